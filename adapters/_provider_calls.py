"""One provider request as a kernel step: planned, admitted before it is sent, settled once.

Shared by every provider SDK adapter (OpenAI, Anthropic, LiteLLM, Google GenAI). An adapter turns
the request it is about to send into a :class:`Plan` (operation, model, estimated input tokens,
output limit); :func:`begin` reserves the plan's worst case from genai-prices (or the configured
hint) and admits one ``llm`` step — or adopts the step a layer above already began (see
:mod:`._provider_claims`) — and raises :class:`~veronica_mw.ExecutionHalted` before anything is
sent when a limit refuses it. The returned :class:`ProviderCall` is settled exactly once, with the
usage the provider reported, priced for the model it reported; SDK retries draw from the
context's retry budget through :meth:`ProviderCall.retry`. No SDK is imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from .. import CallNode, ExecutionContext, ExecutionHalted, TokenUsage, WrapOptions
from ..kernel._io import response_text
from ..kernel.context import PendingContext, current_context
from . import _provider_claims as claims
from . import _provider_fit as _fit
from ._provider_estimate import limit, price, reservation, text_tokens

__all__ = ["Plan", "ProviderCall", "begin", "context_now", "field", "limit", "price", "text_tokens"]

_UNSET: Any = object()
_SENTINELS = frozenset({"NotGiven", "Omit"})  # openai/anthropic ``NOT_GIVEN`` and ``omit``
_current = current_context.get


def context_now() -> ExecutionContext | None:
    """The current execution context, if any (cheap when there is none: the pass-through path)."""
    value = _current()
    if value is None or type(value) is ExecutionContext:
        return value
    if isinstance(value, PendingContext):  # a middleware's request context, built on first use
        return value.resolve()
    return value


# Whether a response or chunk type is a Mapping (raw JSON) or an SDK object, remembered per type:
# the ABC check costs about a microsecond on an SDK object, and responses are read field by field.
_mapping_types: dict[type, bool] = {}


def field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, else the attribute of an SDK object; None when absent."""
    kind = type(obj)
    mapping = _mapping_types.get(kind)
    if mapping is None:
        mapping = isinstance(obj, Mapping)
        if len(_mapping_types) < 1024:  # a bound, should a program make types on the fly
            _mapping_types[kind] = mapping
    return obj.get(name) if mapping else getattr(obj, name, None)


Outcome = tuple[TokenUsage | None, str | None, int]  # usage, reported model, generated characters


class Plan:
    """What is about to be sent: enough to name the step and reserve its worst case."""

    __slots__ = (
        "operation",
        "model",
        "provider",
        "input_tokens",
        "output_tokens",
        "limit_field",
        "choices",
        "fitted",
    )

    def __init__(
        self,
        operation: str,
        model: str | None,
        provider: str | None,
        input_tokens: int,
        output_tokens: int,
        limit_field: str | None = None,
        choices: int = 1,
    ) -> None:
        self.operation = operation
        self.model = model
        self.provider = provider  # genai-prices provider id ("openai", "anthropic", "google")
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens  # all choices together
        # The request body's field holding the per-choice output limit, which FitOutputToBudget
        # may lower (None: this request cannot be fitted); ``fitted``: the lowered value.
        self.limit_field = limit_field
        self.choices = choices
        self.fitted: int | None = None

    def reservation(self, ctx: ExecutionContext) -> float:
        """USD reserved before sending (see :func:`._provider_estimate.reservation`); raises
        ExecutionHalted ``unpriced`` for a model that cannot be priced under a cost limit."""
        return reservation(
            ctx, self.model, self.provider, self.input_tokens, self.output_tokens, self.operation
        )


class ProviderCall:
    """The kernel step of one provider request; exactly one of the settle methods takes effect.

    ``own``: the step was begun for this request, which settles it. An adopted step (``own`` false)
    belongs to the layer above, which settles it with what it got back (and runs the output checks
    there, where a framework can act on them); this request tops up its reservation before sending,
    draws its retries and reports the usage it saw (``CallNode.reported_usage``).
    """

    __slots__ = ("ctx", "node", "plan", "own", "retry_error", "sent")

    def __init__(self, ctx: ExecutionContext, node: CallNode, plan: Plan, own: bool = True) -> None:
        self.ctx = ctx
        self.node = node
        self.plan = plan
        self.own = own
        self.retry_error: BaseException | None = None
        # Whether the request may have left the process. An SDK patch that knows when it is built
        # (the Stainless SDKs' ``_build_request``) sets it False before the call and True there;
        # elsewhere it stays True: a cancelled call is then assumed sent, and kept as spent.
        self.sent = True

    def retry(self, exc: BaseException | None) -> None:
        """The SDK is about to retry: draw one retry, or raise ExecutionHalted so it is not sent."""
        self.retry_error = exc
        ctx = self.ctx
        ctx.check()
        if not ctx.record_retry(exc):
            raise ctx.halted_error()

    def record_request(self, body: Any) -> None:
        """Attach the request body to the step when an observer keeps call bodies (the audit log's
        ``record_bodies``): its messages, model and the other parameters -- only the JSON body, never
        the headers, and the kernel strips credentials from it."""
        node = self.node
        if not node.wants_io or not isinstance(body, Mapping):
            return
        # The SDKs leave their "not given" sentinels in the body and drop them when they serialize.
        params = {
            k: v
            for k, v in body.items()
            if k not in ("model", "messages") and type(v).__name__ not in _SENTINELS
        }
        model = body.get("model")
        node.record_io(
            request={
                "model": model if isinstance(model, str) else None,
                "messages": body.get("messages"),
                "parameters": params,
            }
        )

    def record_response(self, result: Any = None, text: str | None = None) -> None:
        """Attach the response text (of ``result``, or ``text`` read from a stream) when kept."""
        node = self.node
        if not node.wants_io:
            return
        if text is None and result is not None and result is not _UNSET:
            text = response_text(result)
        if text is not None:
            node.record_io(response_text=text)

    def failed(self, exc: BaseException) -> None:
        """The request raised (after the SDK's own retries, or a refused retry)."""
        node = self.node
        if isinstance(exc, ExecutionHalted) and self.retry_error is not None:
            node.fail(self.retry_error)  # attempts that all failed cost nothing; no retry left to draw
        elif not self.sent and not isinstance(exc, Exception):
            # Cancelled before its request was built, so before anything left the process: the
            # step and its reservation are given back (the layer above's too: nothing was sent).
            node.release()
        elif not self.own:
            return  # the layer above sees the exception and settles its step
        elif isinstance(exc, Exception):
            node.fail(exc)
        else:  # cancelled or interrupted in flight: it may have been billed
            node.commit(cost_usd=node.reserved_usd)

    def finish(self, outcome: Outcome, result: Any = _UNSET, *, complete: bool = True) -> None:
        """Settle with what the provider reported. ``complete``: the response was read to its end,
        so missing usage is estimated from the text; otherwise the reservation counts as spent.
        With ``result`` the context's output checks run on it (and may raise OutputRejected).
        An adopted step is only told the usage (``reported_usage``): its own layer settles it."""
        if not self.own:
            self._report(outcome, complete)
            return
        cost = self._cost(outcome, complete)
        if cost is None:
            return
        self.record_response(result)
        if result is _UNSET:
            self.node.commit(cost_usd=cost[0], model=cost[1])
        else:
            self.node.commit(result, cost_usd=cost[0], model=cost[1])

    async def afinish(self, outcome: Outcome, result: Any) -> None:
        """:meth:`finish` for async calls: async output checks are awaited."""
        if not self.own:
            self._report(outcome, True)
            return
        cost = self._cost(outcome, True)
        if cost is not None:
            self.record_response(result)
            await self.node.acommit(result, cost_usd=cost[0], model=cost[1])

    def _tokens(self, outcome: Outcome, complete: bool) -> TokenUsage | None:
        tokens, model, chars = outcome
        if tokens is None and complete:
            plan = self.plan
            tokens = TokenUsage(plan.input_tokens, -(-chars // 4))
            self.ctx.add_event(
                "usage_estimated",
                f"{plan.operation}: no usage reported; estimated {tokens.input_tokens} in, "
                f"{tokens.output_tokens} out",
                model=model or plan.model,
            )
        return tokens

    def _report(self, outcome: Outcome, complete: bool) -> None:
        """Give the layer above, which settles the adopted step, the usage this request saw (used
        when that layer has none of its own, e.g. a framework's stream without usage)."""
        if self.node.settled:
            return
        tokens = self._tokens(outcome, complete)
        if tokens is not None:
            self.node.reported_usage = (tokens, outcome[1] or self.plan.model)

    def _cost(self, outcome: Outcome, complete: bool) -> tuple[float, str | None] | None:
        """What the call cost and the model it reported (None: it was settled already). Sets the
        node's token counts and model name for observers."""
        node = self.node
        if node.settled:
            return None
        tokens = self._tokens(outcome, complete)
        model = outcome[1]
        plan = self.plan
        if tokens is None:
            return node.reserved_usd, model
        priced = price(tokens, (model, plan.model), plan.provider)
        node.tokens_in, node.tokens_out = tokens.input_tokens, tokens.output_tokens
        if priced is None:
            self.ctx.add_event(
                "unpriced", f"no price known for {model or plan.model!r}; reserved hint kept", model=model
            )
            return node.reserved_usd, model
        node.model = priced[1]
        return priced[0], model or priced[1]

    def abandon(self) -> None:
        """Never read to the end and no usage known: the reservation counts as spent."""
        self.finish((None, None, 0), complete=False)


# What the GenAI conventions call these operations (observers report it; the rest are "chat").
_GEN_AI_OPERATIONS = {"openai.embeddings": "embeddings", "openai.completions": "text_completion"}


def _options(plan: Plan, hint: float) -> WrapOptions:
    return WrapOptions(
        operation_name=plan.operation,
        cost_estimate_hint=hint,
        model=plan.model,
        provider=plan.provider,
        gen_ai_operation=_GEN_AI_OPERATIONS.get(plan.operation, ""),
    )


def begin(ctx: ExecutionContext, plan: Plan) -> ProviderCall:
    """Admit the planned request as one step (or adopt the enclosing layer's); raise
    ExecutionHalted, with nothing sent, when a limit refuses it."""
    original = _fit.fit(ctx, plan)  # FitOutputToBudget: lower the output limit to what is left
    call = _admit(ctx, plan, plan.reservation(ctx))  # priced here, never under the context's lock
    if original is not None:
        ctx.add_event(
            "modified",
            f"{plan.operation}: {plan.limit_field} lowered from {original} to {plan.fitted} to fit",
            field=plan.limit_field,
            original=original,
            fitted=plan.fitted,
            node_id=call.node.node_id,
            model=plan.model,
        )
    return call


def _admit(ctx: ExecutionContext, plan: Plan, estimate: float) -> ProviderCall:
    offered = claims.offered_step(ctx)
    node = offered[0] if offered is not None else None
    if offered is not None and offered[1]:  # the layer above sends again (its retry, a fallback)
        ctx.check()
        if not ctx.record_retry(None):
            raise ctx.halted_error()
    if node is None:
        found = claims.enclosing(ctx)
        if found is not None:
            if not isinstance(found, CallNode):  # a key: the open step of that run, or a new one
                options = _options(plan, estimate)
                found = ctx.begin_call("llm", options, key=found)
                if found.options is options and claims.claim(found):
                    return ProviderCall(ctx, found, plan)  # nobody had begun it: ours
            node = found if claims.claim(found) else None
        if node is None:  # a step of its own
            node = ctx.begin_call("llm", _options(plan, estimate))
            claims.claim(node)
            return ProviderCall(ctx, node, plan)
    top_up = max(0.0, estimate - node.reserved_usd)  # 0: admitted already, sent as is
    if top_up and not ctx.aborted:  # halted meanwhile: the admitted step is sent as admitted
        try:
            node.add_reservation(top_up)
        except ExecutionHalted:
            if _admitted_before_halt(ctx):
                return ProviderCall(ctx, node, plan, own=False)
            node.release()  # never sent: the step the layer above began is given back
            raise
    return ProviderCall(ctx, node, plan, own=False)


def _admitted_before_halt(ctx: ExecutionContext) -> bool:
    """After a refused top-up: whether the context had halted for another reason (a sibling's
    refusal at max_steps, a timeout, a cancel) rather than because this top-up would cross the
    cost ceiling. A step admitted before such a halt runs: N admitted steps are N requests sent."""
    reason = ctx.get_snapshot().abort_reason
    return reason is not None and reason != "budget_exceeded"


active: ContextVar[ProviderCall | None] = ContextVar("veronica_mw_provider_call", default=None)


def retrying(exc: BaseException | None) -> None:
    """Called by an SDK patch right before the SDK waits for and sends a retry."""
    call = active.get()
    if call is not None:
        call.retry(exc)
