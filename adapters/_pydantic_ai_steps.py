"""Kernel steps for Pydantic AI model requests and tool executions, and the retries between them.

Shared by the capability (tools, output retries) and the model wrapper (requests). Each step is
begun in the context the owner's :class:`~veronica_mw.ContextBinding` resolves to when the call
starts, before it runs, and settled exactly once. Imported only after the framework gate of
:mod:`veronica_mw.adapters.pydantic_ai`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from pydantic import ValidationError
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipToolExecution,
    ToolRetryError,
)
from pydantic_ai.messages import ModelResponse
from pydantic_ai.usage import RequestUsage

from .. import (
    CallNode,
    ContextBinding,
    ExecutionContext,
    ExecutionHalted,
    OutputRejected,
    TokenUsage,
    WrapOptions,
)
from ..kernel.context import current_node
from ..kernel.pricing import is_priced, price_usage
from ._provider_estimate import reservation

# What a tool step can end with besides a result: the tool never ran (skipped or deferred by a
# hook inside ours), or pydantic-ai will ask the model again (a retry, drawn from the budget).
NOT_RUN: tuple[type[BaseException], ...] = (SkipToolExecution, CallDeferred, ApprovalRequired)
RETRY_SIGNALS: tuple[type[BaseException], ...] = (ModelRetry, ToolRetryError, ValidationError)


_REFUSED = "_veronica_pydantic_ai_refused"  # set on a refusal's ExecutionHalted: the call refused


class Owner(Protocol):
    binding: ContextBinding
    cost_estimate_hint: float | None  # None: the worst case of each request (provider estimator)


# The call being run now and the contexts that counted it. A second capability on the same agent
# sees the same call inside the first one's step (the same ``messages`` list handed down to the
# model it wraps, the same ``ToolCallPart``): counted once per context, never twice in one.
_counted: ContextVar[tuple[object, frozenset[int]] | None] = ContextVar(
    "veronica_mw_pydantic_ai_counted", default=None
)


class Step:
    """One begun model request or tool execution: the kernel node and its context."""

    __slots__ = ("ctx", "node", "call")

    def __init__(self, ctx: ExecutionContext, node: CallNode, call: object) -> None:
        self.ctx = ctx
        self.node = node
        self.call = call

    @contextmanager
    def running(self) -> Iterator[None]:
        """Calls made inside (a provider SDK's instrumentation, a sub-agent) record this node as
        their parent; an exception settles the step (see :meth:`failed`)."""
        seen = _counted.get()
        ids = seen[1] if seen is not None and seen[0] is self.call else frozenset()
        counted = _counted.set((self.call, ids | {id(self.ctx)}))
        token = current_node.set(self.node.node_id)
        try:
            yield
        except BaseException as exc:
            self.failed(exc)
            raise
        finally:
            current_node.reset(token)
            _counted.reset(counted)

    def failed(self, exc: BaseException) -> None:
        """Settle after ``exc``; raise the halt instead when it ends a retry the budget cannot pay."""
        if isinstance(exc, NOT_RUN) or getattr(exc, _REFUSED, None) is self.call:
            # The call never ran (skipped, deferred, or refused by a capability inside this one,
            # bound to another context): its step is given back.
            self.node.release()
        elif isinstance(exc, RETRY_SIGNALS):
            # pydantic-ai would ask the model again: one retry from the chain-wide budget, and no
            # further model call when that budget is spent.
            self.node.fail(exc)
            if self.ctx.aborted:
                raise self.ctx.halted_error() from exc
        elif isinstance(exc, Exception):
            self.node.fail(exc)  # draws one retry, like any failed call
        else:
            # Cancelled or interrupted mid-call: it may have cost money, so the reservation stays spent.
            self.node.commit(cost_usd=self.node.reserved_usd)

    async def commit_response(self, response: ModelResponse) -> None:
        """Commit a model response: the kernel prices its usage for the model that answered and
        runs the context's output checks. A rejected answer (one retry drawn by the kernel) is
        asked again the way pydantic-ai asks again: a ``ModelRetry`` carrying the check's feedback."""
        usage, model = _tokens(response.usage), self._model(response)
        if not _answers(response):  # only tool calls: no answer for the checks to judge
            self.node.commit(usage=usage, model=model)
            return
        try:
            await self.node.acommit(response, usage=usage, model=model)
        except OutputRejected as rejected:
            raise ModelRetry(rejected.feedback) from rejected

    def commit_streamed(self, response: ModelResponse, *, quiet: bool = False) -> None:
        """Commit what a stream delivered. Its text already reached the consumer, so a rejection
        by an output check cannot be asked again: it is raised as it is (or dropped when ``quiet``,
        because the stream is ending with an error of its own)."""
        usage, model = _tokens(response.usage), self._model(response)
        try:
            if _answers(response):
                self.node.commit(response, usage=usage, model=model)
            else:
                self.node.commit(usage=usage, model=model)
        except OutputRejected:
            if not quiet:
                raise

    def _model(self, response: ModelResponse) -> str | None:
        return response.model_name or self.node.model


def _admission(
    owner: Owner,
    kind: str,
    name: str,
    call: object,
    model: str | None,
    provider: str | None,
    worst: tuple[int, int] = (0, 0),
    local: bool = False,
) -> tuple[ExecutionContext, WrapOptions] | None:
    """The context to count ``call`` in and its options; None when it runs uncontained, or when
    another capability counted this very call in that context already. A model request reserves
    the owner's hint, else its worst case (``worst``: estimated input tokens, output limit) from
    the provider layer's estimator; an unpriced model under a cost limit raises ``unpriced``."""
    ctx = owner.binding.resolve()
    if ctx is None:
        return None
    seen = _counted.get()
    if seen is not None and seen[0] is call and id(ctx) in seen[1]:
        return None
    hint = 0.0
    if kind == "llm":
        owned = owner.cost_estimate_hint
        if owned is None and local and not (model and is_priced(model, provider)):
            owned = 0.0  # a local model (FunctionModel) that no price names: it costs nothing
        hint = reservation(ctx, model or None, provider, worst[0], worst[1], name, owned)
    options = WrapOptions(
        operation_name=name, cost_estimate_hint=hint, model=model or None, provider=provider
    )
    return ctx, options


def begin_request(
    owner: Owner,
    name: str,
    call: object,
    model: str | None = None,
    provider: str | None = None,
    worst: tuple[int, int] = (0, 0),
    local: bool = False,
) -> Step | None:
    """Begin the step of a model request (None: not counted here). Raises
    :class:`~veronica_mw.ExecutionHalted` at any limit, so the request is never sent."""
    admitted = _admission(owner, "llm", name, call, model, provider, worst, local)
    if admitted is None:
        return None
    ctx, options = admitted
    try:
        node = ctx.begin_call("llm", options)
    except ExecutionHalted as halted:
        setattr(halted, _REFUSED, call)  # so an enclosing step of this same call gives its own back
        raise
    return Step(ctx, node, call)


async def begin_tool(owner: Owner, name: str, call: object, arguments: dict[str, Any]) -> Step | None:
    """Begin the step of a tool execution; the context's approval gates are awaited here (an
    approver may edit the arguments: ``node.edited_arguments``). Raises ExecutionHalted, or
    :class:`~veronica_mw.ToolCallRejected` when the agent is to get the rejection as the result."""
    admitted = _admission(owner, "tool", name, call, None, None)
    if admitted is None:
        return None
    ctx, options = admitted
    try:
        node = await ctx.abegin_call("tool", options, arguments=arguments, editable=_fits_tool)
    except ExecutionHalted as halted:
        setattr(halted, _REFUSED, call)
        raise
    return Step(ctx, node, call)


def _fits_tool(edited: Any) -> None:
    # pydantic-ai hands a tool its validated arguments as a dict of parameter names.
    if not isinstance(edited, dict) or not all(isinstance(key, str) for key in edited):
        raise TypeError(f"a tool's arguments are a dict of parameter names, got {type(edited).__name__}")


def draw_retry(owner: Owner, exc: BaseException) -> None:
    """pydantic-ai is about to ask the model again (output validation failed, a validator or a
    tool's arguments said retry): draw one retry, and raise the halt when the budget is spent."""
    ctx = owner.binding.resolve()
    if ctx is not None and not ctx.record_retry(exc):
        raise ctx.halted_error() from exc


def _answers(response: ModelResponse) -> bool:
    """Whether the response carries text for output checks (and a halt's partial result); a turn
    of tool calls only (an output tool's arguments included) has none."""
    return bool(response.text)


def _tokens(usage: RequestUsage | Any) -> TokenUsage | None:
    """pydantic-ai's usage in the kernel's terms (both count cache reads and writes inside input)."""
    if not isinstance(usage, RequestUsage) or not (usage.input_tokens or usage.output_tokens):
        return None  # the response reported no usage: the reserved hint is kept as its cost
    return TokenUsage(
        usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens
    )


_providers: dict[tuple[str, str], str | None] = {}


def pricing_provider(model: str, system: str) -> str | None:
    """The provider to price ``model`` under: pydantic-ai's provider name when genai-prices knows
    the model there (a Groq-hosted Llama needs it), else None to match by the model name alone
    (a ``FunctionModel`` named after a real model, an OpenAI-compatible server). Cached."""
    key = (model, system)
    if key not in _providers:
        try:
            price_usage(TokenUsage(1, 1), model, system)
            _providers[key] = system
        except LookupError:
            _providers[key] = None
    return _providers[key]
