"""Verdicts on calls: output checks when a model call is committed, approvals before a tool call
runs (the hooks: :mod:`._control`), and the bookkeeping of a model downgrade.

Whatever a check or an approver says, the ledger stays exact: a rejected model output still commits
what the call cost, a rejected tool call keeps its step (a node of the graph) and costs nothing."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any, TypeAlias

from . import _lineage, _settle
from ._control import GateVerdict, Rejection
from ._node import _UNSET, CallNode
from ._state import ContextState
from .config import WrapOptions
from .exceptions import OutputRejected, ToolCallRejected
from .pricing import TokenUsage, price_usage
from .reasons import Decision, HaltReason

Editable: TypeAlias = "bool | Callable[[Any], Any]"
# The usage both prices are compared on when a fallback's reservation is recomputed.
_PROBE = TokenUsage(input_tokens=1000, output_tokens=1000)


def _priced(
    ctx: ContextState, node: CallNode, result: Any, cost_usd: float | None, usage: Any, model: str | None
) -> float:
    cost = _settle.actual_cost(ctx, node, result, cost_usd, usage, model)
    if node.fallback_model is not None and not node._downgraded:
        downgrade_unsupported(ctx, node)
    return cost


def _checked(
    ctx: ContextState, node: CallNode, result: Any, cost: float, rejection: Rejection | None
) -> Decision:
    if rejection is not None:
        reject(ctx, node, cost, rejection)  # raises: the output must not be used
    over = _settle.close(ctx, node, "ok", cost, result=result)
    if node._probe:
        ctx._breaker.record_success()  # type: ignore[union-attr]
    if over:
        _settle.past_ceiling(ctx)
        return Decision.HALT
    return Decision.ALLOW


def commit(
    ctx: ContextState, node: CallNode, result: Any, cost_usd: float | None, usage: Any, model: str | None
) -> Decision:
    """The call succeeded: commit its actual cost (an output check may reject the result first)."""
    if node.status != "running":
        return Decision.ALLOW
    cost = _priced(ctx, node, result, cost_usd, usage, model)
    verifier = ctx._verifier
    checked = verifier is not None and node.kind == "llm" and result is not _UNSET
    return _checked(ctx, node, result, cost, verifier.verify(ctx, node, result) if checked else None)  # type: ignore[union-attr]


async def acommit(
    ctx: ContextState, node: CallNode, result: Any, cost_usd: float | None, usage: Any, model: str | None
) -> Decision:
    """:func:`commit` for async callers: the checks and the budget parents' settle are awaited."""
    if node.status != "running":
        return Decision.ALLOW
    cost = _priced(ctx, node, result, cost_usd, usage, model)
    verifier = ctx._verifier
    rejection = None
    if verifier is not None and node.kind == "llm" and result is not _UNSET:
        rejection = await verifier.averify(ctx, node, result)
    return await _settle.settled(ctx, node, lambda: _checked(ctx, node, result, cost, rejection))  # type: ignore[no-any-return]


def reject(ctx: ContextState, node: CallNode, cost: float, rejection: Rejection) -> None:
    """The output failed a check: commit what the call cost, then re-ask or halt (always raises)."""
    exc = OutputRejected(rejection.check, rejection.message, rejection.feedback, rejection.output)
    exc.__veronica_recorded__ = _settle.recorded_ids(ctx)  # type: ignore[attr-defined]  # retry drawn here
    over = _settle.close(ctx, node, "rejected", cost, error=exc)
    if over is None:  # another hook settled this call meanwhile: nothing to draw or halt
        raise exc
    if node._probe:  # the provider answered: an unusable answer is no outage
        ctx._breaker.record_success()  # type: ignore[union-attr]
    if over:
        _settle.past_ceiling(ctx)  # its own ceiling, or (nested) an ancestor's
        raise ctx.halted_error() from exc
    if rejection.action == "halt":
        detail = f"check {rejection.check!r} failed: {rejection.message}"
        ctx._abort(HaltReason.VERIFICATION_FAILED, detail, http_status=502)
        raise ctx.halted_error() from exc
    if not _lineage.record_retry(ctx, exc):
        raise ctx.halted_error() from exc
    raise exc


# -- downgrade -----------------------------------------------------------------------------------


def fallback_hint(hint: float, options: WrapOptions, fallback: str) -> float:
    """``hint`` scaled by the fallback's price relative to the requested model's (same usage); unknown
    prices keep it: the ceiling is enforced on actual costs either way."""
    if hint <= 0.0 or not options.model or options.model == fallback:
        return hint
    try:
        requested = price_usage(_PROBE, options.model, options.provider)
        cheaper = price_usage(_PROBE, fallback, options.provider)
    except LookupError:
        return hint
    return hint * cheaper / requested if requested > 0.0 else hint


def downgraded(ctx: ContextState, node: CallNode, requested: str | None) -> None:
    node._downgraded = True
    original = requested or node.model
    fallback = node.model = node.fallback_model  # priced, and traced, as the model actually called
    # One event per call (observers rename that call's span after it); the context's own
    # event list keeps only the most recent ones.
    detail = f"{node.name}: {original} -> {fallback}"
    ctx.add_event("downgraded", detail, from_model=original, to_model=fallback, node_id=node.node_id)


def downgrade_unsupported(ctx: ContextState, node: CallNode) -> None:
    node._downgraded = True  # said once for this call ...
    if any(event.kind == "downgrade_unsupported" for event in ctx.get_events()):
        return  # ... and once for the context
    detail = f"{node.name}: the adapter could not switch to {node.fallback_model}; the call ran unchanged"
    ctx.add_event("downgrade_unsupported", detail, model=node.model, fallback_model=node.fallback_model)


# -- approvals -----------------------------------------------------------------------------------


def _take_gates(ctx: ContextState, node: CallNode) -> tuple[Any, ...]:
    with ctx._ledger.lock:  # several hooks may see one keyed call: only the first one asks
        gates, node._gates = node._gates, ()
    return gates


def approve(ctx: ContextState, node: CallNode, arguments: Any, editable: Editable) -> None:
    """Ask every gate matching this tool call before it runs (blocking); raise on a rejection.
    ``editable``: whether edited arguments can be used, or a function raising for ones that do not fit."""
    for gate in _take_gates(ctx, node):
        try:
            verdict = gate.decide(ctx, node, arguments)
        except Exception as exc:  # fail closed: a broken approver is a rejection
            verdict = GateVerdict(False, f"approver failed: {type(exc).__name__}: {exc}")
        arguments = _apply_verdict(ctx, node, verdict, arguments, editable)


async def aapprove(ctx: ContextState, node: CallNode, arguments: Any, editable: Editable) -> None:
    """:func:`approve` for async callers: waiting for a person never blocks the event loop."""
    for gate in _take_gates(ctx, node):
        try:
            verdict = await gate.adecide(ctx, node, arguments)
        except Exception as exc:
            verdict = GateVerdict(False, f"approver failed: {type(exc).__name__}: {exc}")
        arguments = _apply_verdict(ctx, node, verdict, arguments, editable)


async def agate(ctx: ContextState, node: CallNode, arguments: Any, editable: Editable) -> None:
    """:func:`aapprove`, awaiting the budget parents' settle of a rejection (the node closes)."""
    owed = _settle.defer(ctx, node)
    try:
        await aapprove(ctx, node, arguments, editable)
    finally:
        if owed:
            await _settle.pay(ctx, node)


def _apply_verdict(
    ctx: ContextState, node: CallNode, verdict: Any, arguments: Any, editable: Editable
) -> Any:
    if not isinstance(verdict, GateVerdict):
        verdict = GateVerdict(False, f"malformed approval verdict {verdict!r}")
    if verdict.approved and verdict.edited:
        problem = ""
        if not editable:
            problem = "the approver edited the arguments, but this adapter cannot pass edited arguments"
        elif callable(editable):
            try:
                editable(verdict.arguments)
            except (TypeError, ValueError) as exc:
                problem = f"the edited arguments do not fit the tool: {exc}"
        if problem:
            verdict = GateVerdict(False, problem, on_reject=verdict.on_reject, gate=verdict.gate)
    if verdict.approved:
        if ctx._deadline and time.monotonic() >= ctx._deadline:
            ctx._on_deadline()
        if ctx.aborted:  # halted (a timeout, an ancestor's) while waiting: the tool must not run
            _settle.close(ctx, node, "halted", 0.0)
            raise ctx.halted_error()
        if verdict.edited:
            node.edited_arguments = verdict.arguments
            return verdict.arguments
        return arguments
    _settle.close(ctx, node, "rejected", 0.0)  # never ran; the decision stays a step of the graph
    message = verdict.message or "rejected"
    if verdict.on_reject == "message":
        raise ToolCallRejected(node.name, message)
    detail = f"{verdict.gate}: tool {node.name!r} rejected: {message}"
    ctx._abort(HaltReason.POLICY_DENIED, detail, http_status=403)
    raise ctx.halted_error()


class ToolCall:
    """The arguments of ``fn(*args, **kwargs)`` by parameter name, as an approver sees them, and
    how to call ``fn`` with arguments an approver edited (``ctx.call_tool``/``acall_tool``)."""

    __slots__ = ("arguments", "_signature")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            self._signature: inspect.Signature | None = inspect.signature(fn)
            self.arguments: dict[str, Any] = dict(self._signature.bind(*args, **kwargs).arguments)
        except (TypeError, ValueError):  # no signature Python can read: edits are refused
            self._signature = None
            self.arguments = {"args": list(args), "kwargs": dict(kwargs)}

    @property
    def editable(self) -> Editable:
        return self.rebuild if self._signature is not None else False

    def rebuild(self, edited: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments for the edited call; TypeError if they do not fit."""
        if not isinstance(edited, dict):
            raise TypeError(f"edited arguments must be a dict, got {type(edited).__name__}")
        signature = self._signature
        assert signature is not None
        bound = inspect.BoundArguments(signature, edited)
        signature.bind(*bound.args, **bound.kwargs)
        return bound.args, bound.kwargs
