"""Admission and settlement of calls: the part of ExecutionContext that enforces G1–G3.

``_begin`` checks every limit and reserves one step plus the call's cost hint under the context's
lock; exactly one settle (``_commit``/``_fail``/``_release``/``_interrupt``) gives the reservation
back and commits what the call really cost. Policies, the circuit breaker, the parent budget and
pricing are consulted outside the lock, so a slow one never serialises other calls.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from . import _nesting
from . import observer as _obs
from ._nesting import NESTED_HELD
from ._soft_limits import SoftLimits
from ._validate import check_number
from .config import ExecutionConfig, WrapOptions
from .context import current_node
from .exceptions import ExecutionHalted
from .graph import _UNSET, CallNode, ExecutionGraph
from .policy import PolicyContext, PolicyPipeline
from .pricing import TokenUsage, extract_usage, price_usage, usage_from_mapping
from .reasons import Decision, HaltReason
from .snapshot import ExecutionEvent

if TYPE_CHECKING:
    from ._control import OutputVerifier, Rejection
    from .circuit_breaker import CircuitBreaker
    from .parent import BudgetParent

_EPSILON = 1e-9  # float sums of exact hints may land a hair over the ceiling
# node._held: no parent reservation / one to settle synchronously / one whose settle an async
# caller will await after the sync step it runs (see _async_ledger) / that settle, now owed.
# A nested context's nodes hold the ancestors' reservations too (see _nesting: NESTED, NESTED_HELD).
FREE, HELD, AWAITED, OWED = 0, 1, 2, 3


class Ledger(SoftLimits):
    """Mixin of :class:`~veronica_mw.ExecutionContext` holding its admission/settlement logic.

    The code here is the flat path (a context with no parent); a nested context branches to
    :mod:`._nesting` at one ``_up`` check per admission, and its nodes' ``_held`` state routes
    their settlement there.
    """

    if not TYPE_CHECKING:  # the slots live on ExecutionContext; mypy would reject writes here
        __slots__ = ()

    if TYPE_CHECKING:
        config: ExecutionConfig
        _reason: str | None
        _pipeline: PolicyPipeline | None
        _breaker: CircuitBreaker | None
        _parent: BudgetParent | None
        _lock: threading.Lock
        _graph: ExecutionGraph | None
        _graph_args: tuple[int, int]
        _halt_on_divergence: bool
        _steps: int
        _committed: float
        _reserved: float
        _retries: int
        _in_flight: int
        _partial: Any
        _events: deque[ExecutionEvent] | None
        _open_keys: dict[Hashable, CallNode] | None
        _deadline: float
        _observers: tuple[_obs.Observer, ...]
        _verifier: OutputVerifier | None
        _up: Any
        _budgets: tuple[BudgetParent, ...]
        _down: tuple[Any, ...]

        @property
        def chain_id(self) -> str: ...
        def _abort(
            self,
            reason: HaltReason,
            detail: str = "",
            retry_after: float | None = None,
            http_status: int = 429,
        ) -> None: ...
        def _on_deadline(self) -> None: ...
        def _graph_locked(self) -> ExecutionGraph: ...
        def add_event(self, kind: str, detail: str, **data: Any) -> None: ...
        def halted_error(self) -> ExecutionHalted: ...
        def record_retry(self, exc: BaseException | None = None) -> bool: ...
        def _fallback_hint(self, hint: float, options: WrapOptions, fallback: str) -> float: ...
        def _downgrade_unsupported(self, node: CallNode) -> None: ...
        def _reject(self, node: CallNode, cost: float, rejection: Rejection) -> None: ...

    def _begin(
        self,
        kind: str,
        options: WrapOptions,
        key: Hashable | None,
        parent_id: int | None,
        inline: bool = False,
    ) -> CallNode | None:
        if self._up is not None:
            return _nesting.begin(self, kind, options, key, parent_id, inline)  # type: ignore[arg-type]
        node, fresh = self._admit(kind, options, key, parent_id)
        if node is None or not fresh:
            return node
        parent = self._parent
        if parent is not None:
            if not parent.reserve(node.reserved_usd):
                self._refused_by_parent(node, parent)
                return None
            node._held = HELD
        self._announce(node, inline)
        return node

    def _admit(
        self, kind: str, options: WrapOptions, key: Hashable | None, parent_id: int | None
    ) -> tuple[CallNode | None, bool]:
        """Every local check and the reservation under the lock: (node, whether it is new).

        A new node still needs the parent budget's reservation (sync or awaited, by the caller)
        and :meth:`_announce`; ``(None, False)`` is a refusal, an open node of the same key is
        returned as it is.
        """
        if kind != "llm" and kind != "tool":
            raise ValueError(f"kind must be 'llm' or 'tool', got {kind!r}")
        if self._reason is not None:
            return None, False
        if self._deadline and time.monotonic() >= self._deadline:
            self._on_deadline()
            return None, False
        hint = options.cost_estimate_hint
        name = options.operation_name or kind
        config = self.config
        fallback: str | None = None
        if self._pipeline is not None:
            decision = self._pipeline.evaluate(
                PolicyContext(
                    cost_usd=self._committed,
                    step_count=self._steps,
                    retries_used=self._retries,
                    cost_estimate_usd=hint,
                    kind=kind,
                    operation_name=name,
                    chain_id=self.chain_id,
                    max_cost_usd=config.max_cost_usd,
                )
            )
            if not decision.allowed:
                wait = decision.rate_limit_ms / 1000.0 if decision.rate_limit_ms else None
                self._abort(HaltReason.POLICY_DENIED, f"{decision.policy_type}: {decision.reason}", wait)
                return None, False
            if (
                decision.fallback_model is not None
                and kind == "llm"
                and decision.fallback_model != options.model
            ):
                # MODIFY: the call runs on the fallback, so it is reserved at the fallback's price.
                fallback = decision.fallback_model
                hint = self._fallback_hint(hint, options, fallback)
        halt: HaltReason | None = None
        repeats = 0
        with self._lock:
            if key is not None:
                if self._open_keys is None:
                    self._open_keys = {}
                existing = self._open_keys.get(key)
                if existing is not None:
                    return existing, False
            if self._reason is not None:
                return None, False
            # The gate is the step limit, or lower when a soft limit comes first (no extra test).
            gate = self._steps >= self._step_gate
            if gate and self._steps >= config.max_steps:
                halt = HaltReason.STEP_LIMIT
            elif (kind == "llm" or hint > 0.0) and (
                self._committed + self._reserved + hint > config.max_cost_usd + _EPSILON
                or (kind == "llm" and self._committed + _EPSILON >= config.max_cost_usd)
            ):
                halt = HaltReason.BUDGET_EXCEEDED
            else:
                self._steps += 1
                self._reserved += hint
                self._in_flight += 1
                node, repeats = (self._graph or self._graph_locked()).add(
                    kind, name, parent_id if parent_id is not None else current_node.get()
                )
                node._ctx = self  # type: ignore[assignment]  # always an ExecutionContext
                node._options = options
                node.reserved_usd = hint
                node.model = options.model
                node.step = self._steps
                if fallback is not None:
                    node.fallback_model = fallback
                if key is not None:
                    node.key = key
                    self._open_keys[key] = node  # type: ignore[index]
        if halt is not None:
            self._abort(halt, self._limit_detail(halt, hint))
            return None, False
        if gate:
            self._soft_limit("steps")
        if repeats == self._graph_args[1] and self._diverged(node):
            return None, False
        breaker = self._breaker
        if breaker is not None:
            decision = breaker.check(None)
            if not decision.allowed:
                self._close(node, "refused", 0.0, refund_step=True)
                wait = decision.rate_limit_ms / 1000.0 if decision.rate_limit_ms else None
                self._abort(HaltReason.CIRCUIT_OPEN, decision.reason, wait)
                return None, False
            node._probe = True
        return node, True

    def _announce(self, node: CallNode, inline: bool) -> None:
        """A new node that passed every check (the parent's too): approval gates, observers."""
        if node.kind == "tool" and self._pipeline is not None and self._pipeline.gates:
            # ``begin_call`` asks these before the tool runs (see _verdicts.Verdicts._approve).
            node._gates = tuple(gate for gate in self._pipeline.gates if gate.gates(node.name))
        if _obs._global or self._observers:
            node._seen = True
            node.inline = inline
            if node.kind == "llm" and _obs.wants_bodies(self._observers):
                node.io = {}
            _obs.notify(self._observers, "call_started", self, node)

    def _refused_by_parent(self, node: CallNode, parent: BudgetParent) -> None:
        self._close(node, "refused", 0.0, refund_step=True)
        self._parent_refused(parent)

    def _add_reservation(self, node: CallNode, usd: float) -> None:
        usd = check_number("usd", usd)
        if usd == 0.0:  # nothing more to reserve: the call was admitted when its step began
            return
        if self._up is not None:
            _nesting.add_reservation(self, node, usd)  # type: ignore[arg-type]
            return
        if self._deadline and self._reason is None and time.monotonic() >= self._deadline:
            self._on_deadline()
        config = self.config
        with self._lock:
            refused = self._reason is not None
            over = not refused and self._committed + self._reserved + usd > config.max_cost_usd + _EPSILON
            if not refused and not over and node.status == "running":
                self._reserved += usd
                node.reserved_usd += usd
        if over:
            self._abort(HaltReason.BUDGET_EXCEEDED, self._limit_detail(HaltReason.BUDGET_EXCEEDED, usd))
        if refused or over:
            raise self.halted_error()
        parent = self._parent
        if node._held and usd > 0.0 and parent is not None and not parent.reserve(usd):
            with self._lock:
                if node.status == "running":
                    self._reserved -= usd
                    node.reserved_usd -= usd
            self._parent_refused(parent)
            raise self.halted_error()

    def _parent_refused(self, parent: BudgetParent) -> None:
        status = getattr(parent, "refusal_status", 429)
        detail = getattr(parent, "refusal_detail", "") or "parent budget exhausted"
        if status == 503:  # the budget store is down and fails closed: not the tenant's fault
            self._abort(HaltReason.POLICY_DENIED, detail, parent.retry_after_s(), http_status=503)
        else:
            self._abort(HaltReason.BUDGET_EXCEEDED, detail, parent.retry_after_s())

    def _limit_detail(self, reason: HaltReason, hint: float) -> str:
        config = self.config
        if reason is HaltReason.STEP_LIMIT:
            return f"max_steps={config.max_steps} reached"
        return (
            f"cost {self._committed:.6f} + reserved {self._reserved:.6f} + {hint:g} > {config.max_cost_usd:g}"
        )

    def _diverged(self, node: CallNode) -> bool:
        detail = f"{node.kind}:{node.name} repeated {self._graph_args[1]} times in a row"
        self.add_event("divergence", detail, call_kind=node.kind, name=node.name)
        if not self._halt_on_divergence:
            return False
        self._close(node, "refused", 0.0, refund_step=True)
        self._abort(HaltReason.POLICY_DENIED, f"divergence: {detail}")
        return True

    def _close(
        self,
        node: CallNode,
        status: str,
        cost: float,
        *,
        refund_step: bool = False,
        result: Any = _UNSET,
        error: BaseException | None = None,
    ) -> bool | None:
        """Settle ``node`` under the lock; return whether the committed cost is now past the ceiling
        or, nested, an ancestor halted (None: it was settled already, by another hook).

        Also gives back a parent reservation and a half-open probe slot for calls that never ran.
        """
        with self._lock:
            if node.status != "running":
                return None
            if node.key is not None:
                self._open_keys.pop(node.key, None)  # type: ignore[union-attr]
            self._reserved -= node.reserved_usd
            self._in_flight -= 1
            self._committed += cost
            if refund_step:
                self._steps -= 1
            node.cost_usd = cost
            self._graph.finish(node, status)  # type: ignore[union-attr]
            if result is not _UNSET:
                self._partial = result
            # The gate is the ceiling, or lower when a soft limit comes first (no extra test).
            over = self._committed > self._cost_gate
            held = node._held
            if held == AWAITED:  # an async caller awaits the parent's settle after this step
                node._held = OWED
        node._ctx = None
        if over:
            over = self._cost_passed()  # False when the gate was only a soft limit
        if held == HELD:
            self._parent.settle(node.reserved_usd, cost)  # type: ignore[union-attr]
        elif held > OWED:  # nested: the ancestors' reservations, and the budgets above them
            if _nesting.settle_up(self, node, cost, refund_step, held == NESTED_HELD):  # type: ignore[arg-type]
                over = True  # an ancestor halted: this context's run is over too
        if refund_step and node._probe:
            self._breaker.release_probe()  # type: ignore[union-attr]
        if node._seen:
            _obs.notify(self._observers, "call_ended", self, node, error)
        return over

    def _commit(
        self, node: CallNode, result: Any, cost_usd: float | None, usage: TokenUsage | Any, model: str | None
    ) -> Decision:
        if node.status != "running":
            return Decision.ALLOW
        cost = self._actual_cost(node, result, cost_usd, usage, model)
        if node.fallback_model is not None and not node._downgraded:
            self._downgrade_unsupported(node)
        if self._verifier is not None and node.kind == "llm" and result is not _UNSET:
            rejection = self._verifier.verify(self, node, result)  # type: ignore[arg-type]
            if rejection is not None:
                self._reject(node, cost, rejection)  # raises: the output must not be used
        return self._settle_ok(node, result, cost)

    def _settle_ok(self, node: CallNode, result: Any, cost: float) -> Decision:
        over = self._close(node, "ok", cost, result=result)
        if node._probe:
            self._breaker.record_success()  # type: ignore[union-attr]
        if over:
            self._past_ceiling()
            return Decision.HALT
        return Decision.ALLOW

    def _past_ceiling(self) -> None:
        """``_close`` said the run is over: the call already ran, and its cost took the total past
        the ceiling (it is the last), or -- nested -- took an ancestor past its own, or an ancestor
        halted meanwhile."""
        if self._committed > self.config.max_cost_usd + _EPSILON:
            self._abort(
                HaltReason.BUDGET_EXCEEDED,
                f"actual cost took the total to {self._committed:.6f} > {self.config.max_cost_usd:g}",
            )
        elif self._up is not None:
            _nesting.halted_above(self)  # type: ignore[arg-type]

    def _actual_cost(
        self, node: CallNode, result: Any, cost_usd: float | None, usage: TokenUsage | Any, model: str | None
    ) -> float:
        options: WrapOptions = node._options
        if model:
            node.response_model = model
        if cost_usd is not None:
            return check_number("cost_usd", cost_usd)
        if options.cost_fn is not None:
            try:
                return check_number("cost_fn(result)", options.cost_fn(None if result is _UNSET else result))
            except Exception as exc:  # a broken cost_fn must not lose the reservation
                self.add_event("cost_fn_failed", f"{type(exc).__name__}: {exc}; reserved hint kept")
                return node.reserved_usd
        tokens = usage_from_mapping(usage) if usage is not None else None
        model = model or node.model  # the requested model, or the fallback it was sent to
        if tokens is None and result is not _UNSET:
            tokens, found_model = extract_usage(result)
            if found_model and not node.response_model:
                node.response_model = found_model
            model = model or found_model
        if tokens is None and node.reported_usage is not None:
            tokens, reported_model = node.reported_usage
            model = model or reported_model
        if tokens is None:
            return node.reserved_usd
        node.tokens_in, node.tokens_out = tokens.input_tokens, tokens.output_tokens
        if model:
            node.model = model
            try:
                return price_usage(tokens, model, options.provider)
            except LookupError as exc:
                self.add_event("unpriced", f"{exc}; reserved hint kept", model=model)
                return node.reserved_usd
        self.add_event("unpriced", "usage reported without a model name; reserved hint kept")
        return node.reserved_usd

    def _fail(self, node: CallNode, exc: BaseException | None) -> None:
        if isinstance(exc, ExecutionHalted):
            # Halted inside (a nested wrap or an adapter): the call did run, but it is no failure.
            self._close(node, "halted", node.reserved_usd, error=exc)
            return
        if node.status != "running":
            return
        self._close(node, "error", 0.0, error=exc)
        if node._probe:
            self._breaker.record_failure()  # type: ignore[union-attr]
        if exc is not None:
            try:
                exc.__veronica_recorded__ = self._recorded_ids()  # type: ignore[attr-defined]
            except (AttributeError, TypeError):
                pass
        self.record_retry(exc)

    def _recorded_ids(self) -> str | tuple[str, ...]:
        """What marks a failure whose retry this context drew: its chain id, or -- nested, as the
        ancestors drew it too -- every chain id of the lineage (see RetryContainer)."""
        return self.chain_id if self._up is None else _nesting.chain_ids(self)  # type: ignore[arg-type]

    def _release(self, node: CallNode, status: str) -> None:
        self._close(node, status, 0.0, refund_step=True)

    def _interrupt(self, node: CallNode, exc: BaseException | None = None) -> None:
        # Cancelled mid-call (asyncio.CancelledError, KeyboardInterrupt): the call may have cost
        # money, so the reservation is kept as spent rather than given back.
        self._close(node, "interrupted", node.reserved_usd, error=exc)
