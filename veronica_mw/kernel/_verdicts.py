"""Verdicts on calls: output checks at settle time, approvals at admission, downgrade bookkeeping.

The part of :class:`~veronica_mw.ExecutionContext` that applies what ``veronica_mw.control`` decided
(see :mod:`veronica_mw.kernel._control` for the hooks). Whatever a check or an approver says, the
ledger stays exact: a rejected model output still commits what the call cost, a rejected tool call
keeps its step (it is a node of the graph) and costs nothing.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from ._control import GateVerdict, Rejection
from .config import WrapOptions
from .exceptions import ExecutionHalted, OutputRejected, ToolCallRejected
from .graph import _UNSET, CallNode
from .pricing import TokenUsage, price_usage
from .reasons import Decision, HaltReason

if TYPE_CHECKING:
    from ._control import OutputVerifier
    from .circuit_breaker import CircuitBreaker

Editable: TypeAlias = "bool | Callable[[Any], Any]"
# The usage both prices are compared on when a fallback's reservation is recomputed.
_PROBE = TokenUsage(input_tokens=1000, output_tokens=1000)


class Verdicts:
    """Mixin of :class:`~veronica_mw.ExecutionContext`; see that class for the state it uses."""

    __slots__ = ()

    if TYPE_CHECKING:
        _lock: threading.Lock
        _verifier: OutputVerifier | None
        _breaker: CircuitBreaker | None
        _reason: str | None
        _committed: float
        _deadline: float

        @property
        def chain_id(self) -> str: ...
        def _abort(
            self,
            reason: HaltReason,
            detail: str = "",
            retry_after: float | None = None,
            http_status: int = 429,
        ) -> None: ...
        def _close(
            self,
            node: CallNode,
            status: str,
            cost: float,
            *,
            refund_step: bool = False,
            result: Any = _UNSET,
            error: BaseException | None = None,
        ) -> bool | None: ...
        def _commit(
            self, node: CallNode, result: Any, cost_usd: float | None, usage: Any, model: str | None
        ) -> Decision: ...
        def _actual_cost(
            self, node: CallNode, result: Any, cost_usd: float | None, usage: Any, model: str | None
        ) -> float: ...
        def _settle_ok(self, node: CallNode, result: Any, cost: float) -> Decision: ...
        def _past_ceiling(self) -> None: ...
        def _recorded_ids(self) -> str | tuple[str, ...]: ...
        @property
        def aborted(self) -> bool: ...
        def add_event(self, kind: str, detail: str, **data: Any) -> None: ...
        def record_retry(self, exc: BaseException | None = None) -> bool: ...
        def halted_error(self) -> ExecutionHalted: ...
        def _on_deadline(self) -> None: ...
        def get_events(self) -> list[Any]: ...
        def _owe(self, node: CallNode) -> bool: ...
        async def _pay(self, node: CallNode) -> None: ...

    # -- output checks -------------------------------------------------------------------------------

    async def _acommit(
        self, node: CallNode, result: Any, cost_usd: float | None, usage: Any, model: str | None
    ) -> Decision:
        verifier = self._verifier
        if verifier is None or node.kind != "llm" or result is _UNSET or node.status != "running":
            if not self._owe(node):
                return self._commit(node, result, cost_usd, usage, model)
            try:  # an async parent budget's settle is awaited after the sync step
                return self._commit(node, result, cost_usd, usage, model)
            finally:
                await self._pay(node)
        cost = self._actual_cost(node, result, cost_usd, usage, model)
        if node.fallback_model is not None and not node._downgraded:
            self._downgrade_unsupported(node)
        rejection = await verifier.averify(self, node, result)  # type: ignore[arg-type]
        owed = self._owe(node)
        try:
            if rejection is not None:
                self._reject(node, cost, rejection)
            return self._settle_ok(node, result, cost)
        finally:
            if owed:
                await self._pay(node)

    def _reject(self, node: CallNode, cost: float, rejection: Rejection) -> None:
        """The output failed a check: commit what the call cost, then re-ask or halt (always raises)."""
        exc = OutputRejected(rejection.check, rejection.message, rejection.feedback, rejection.output)
        exc.__veronica_recorded__ = self._recorded_ids()  # type: ignore[attr-defined]  # retry drawn here
        over = self._close(node, "rejected", cost, error=exc)
        if over is None:  # another hook settled this call meanwhile: nothing to draw or halt
            raise exc
        if node._probe:  # the provider answered: an unusable answer is no outage
            self._breaker.record_success()  # type: ignore[union-attr]
        if over:
            self._past_ceiling()  # its own ceiling, or (nested) an ancestor's
            raise self.halted_error() from exc
        if rejection.action == "halt":
            detail = f"check {rejection.check!r} failed: {rejection.message}"
            self._abort(HaltReason.VERIFICATION_FAILED, detail, http_status=502)
            raise self.halted_error() from exc
        if not self.record_retry(exc):
            raise self.halted_error() from exc
        raise exc

    # -- downgrade -----------------------------------------------------------------------------------

    def _fallback_hint(self, hint: float, options: WrapOptions, fallback: str) -> float:
        """``hint`` scaled by the fallback's price relative to the requested model's (same usage).

        Unknown prices keep the hint: the ceiling is enforced on actual costs either way.
        """
        if hint <= 0.0 or not options.model or options.model == fallback:
            return hint
        try:
            requested = price_usage(_PROBE, options.model, options.provider)
            cheaper = price_usage(_PROBE, fallback, options.provider)
        except LookupError:
            return hint
        return hint * cheaper / requested if requested > 0.0 else hint

    def _downgraded(self, node: CallNode, requested: str | None) -> None:
        node._downgraded = True
        original = requested or node.model
        node.model = node.fallback_model  # priced, and traced, as the model actually called
        # One event per call (observers rename that call's span after it); the context's own
        # event list keeps only the most recent ones.
        self.add_event(
            "downgraded",
            f"{node.name}: {original} -> {node.fallback_model}",
            from_model=original,
            to_model=node.fallback_model,
            node_id=node.node_id,
        )

    def _downgrade_unsupported(self, node: CallNode) -> None:
        node._downgraded = True  # said once for this call ...
        if any(event.kind == "downgrade_unsupported" for event in self.get_events()):
            return  # ... and once for the context
        self.add_event(
            "downgrade_unsupported",
            f"{node.name}: the adapter could not switch to {node.fallback_model}; the call ran unchanged",
            model=node.model,
            fallback_model=node.fallback_model,
        )

    # -- approvals -----------------------------------------------------------------------------------

    def _take_gates(self, node: CallNode) -> tuple[Any, ...]:
        with self._lock:  # several hooks may see one keyed call: only the first one asks
            gates, node._gates = node._gates, ()
        return gates

    def _approve(self, node: CallNode, arguments: Any, editable: Editable) -> None:
        """Ask every gate matching this tool call before it runs (blocking); raise on a rejection.

        ``editable``: whether the caller can run the tool with edited arguments, or a function
        that raises TypeError/ValueError for edited arguments that do not fit the tool.
        """
        for gate in self._take_gates(node):
            try:
                verdict = gate.decide(self, node, arguments)
            except Exception as exc:  # fail closed: a broken approver is a rejection
                verdict = GateVerdict(False, f"approver failed: {type(exc).__name__}: {exc}")
            arguments = self._apply_verdict(node, verdict, arguments, editable)

    async def _aapprove(self, node: CallNode, arguments: Any, editable: Editable) -> None:
        """:meth:`_approve` for async callers: waiting for a person never blocks the event loop."""
        for gate in self._take_gates(node):
            try:
                verdict = await gate.adecide(self, node, arguments)
            except Exception as exc:
                verdict = GateVerdict(False, f"approver failed: {type(exc).__name__}: {exc}")
            arguments = self._apply_verdict(node, verdict, arguments, editable)

    def _apply_verdict(self, node: CallNode, verdict: Any, arguments: Any, editable: Editable) -> Any:
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
            if self._deadline and time.monotonic() >= self._deadline:
                self._on_deadline()
            if self.aborted:  # halted (a timeout, an ancestor's) while waiting: the tool must not run
                self._close(node, "halted", 0.0)
                raise self.halted_error()
            if verdict.edited:
                node.edited_arguments = verdict.arguments
                return verdict.arguments
            return arguments
        self._close(node, "rejected", 0.0)  # never ran; the decision stays a step of the graph
        message = verdict.message or "rejected"
        if verdict.on_reject == "message":
            raise ToolCallRejected(node.name, message)
        detail = f"{verdict.gate}: tool {node.name!r} rejected: {message}"
        self._abort(HaltReason.POLICY_DENIED, detail, http_status=403)
        raise self.halted_error()


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
