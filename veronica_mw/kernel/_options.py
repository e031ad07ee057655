"""The options of a new context, checked and stored: policies, breaker, budget parent, observers,
output checks, graph size, timeout pool, name, ``on_warn`` and ``on_limit`` (see ExecutionContext)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from . import observer as _obs
from ._control import OutputVerifier, build_verifier
from ._lineage import is_async
from ._state import ContextState
from .circuit_breaker import CircuitBreaker
from .config import ExecutionConfig
from .parent import BudgetParent
from .policy import PolicyPipeline
from .snapshot import ExecutionEvent
from .timeout_pool import SharedTimeoutPool


def configure(
    ctx: ContextState, config: ExecutionConfig, pipeline: PolicyPipeline | None,
    circuit_breaker: CircuitBreaker | None, budget_parent: BudgetParent | None, graph_capacity: int,
    divergence_threshold: int, halt_on_divergence: bool, timeout_pool: SharedTimeoutPool | None,
    observers: Iterable[_obs.Observer], checks: Iterable[Any] | OutputVerifier | None,
    audit: _obs.Observer | None, attributes: Mapping[str, str] | None, name: str,
    on_warn: Callable[[ExecutionEvent], Any] | None, on_limit: Any = None,
) -> None:  # fmt: skip
    """Set up ``ctx`` (its state, then each option given); a bad option raises TypeError/ValueError.
    Options left at their default keep the class-level default: nothing is stored for them."""
    if not isinstance(config, ExecutionConfig):
        raise TypeError(f"config must be an ExecutionConfig, got {type(config).__name__}")
    if pipeline is not None and not isinstance(pipeline, PolicyPipeline):
        raise TypeError(f"pipeline must be a PolicyPipeline, got {type(pipeline).__name__}")
    if circuit_breaker is not None and not callable(getattr(circuit_breaker, "check", None)):
        raise TypeError("circuit_breaker must have check()/record_success()/record_failure()")
    if graph_capacity < 1:
        raise ValueError("graph_capacity must be >= 1")
    if name.__class__ is not str:
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if on_warn is not None and not callable(on_warn):
        raise TypeError("on_warn must be callable (event) -> None")
    if on_limit is not None and not callable(getattr(on_limit, "aask", None)):
        raise TypeError(f"on_limit must be a veronica_mw.AskForMore, got {on_limit!r}")
    ContextState.__init__(ctx, config)
    if observers:
        ctx._observers = tuple(observers)
        for observer in ctx._observers:
            if not isinstance(observer, _obs.Observer):
                raise TypeError(f"observers must be veronica_mw.Observer instances, got {observer!r}")
    if audit is not None:
        # The audit log is an observer like any other: the kernel knows nothing of files.
        if not isinstance(audit, _obs.Observer):
            raise TypeError(f"audit must be a veronica_mw.AuditLog (an Observer), got {audit!r}")
        if audit not in ctx._observers:
            ctx._observers = (*ctx._observers, audit)
    if attributes is not None:
        if not isinstance(attributes, Mapping):
            raise TypeError(f"attributes must be a mapping, got {type(attributes).__name__}")
        ctx.attributes = MappingProxyType(dict(attributes))
    if checks:
        ctx._verifier = build_verifier(checks)
    if pipeline:
        ctx._pipeline = pipeline
    if circuit_breaker is not None:
        ctx._breaker = circuit_breaker
    if budget_parent is not None:
        ctx._parent = budget_parent
        ctx._budgets = (budget_parent,)
        ctx._abudgets = is_async(budget_parent)
    if graph_capacity != 10_000 or divergence_threshold != 25:
        ctx._graph_args = (graph_capacity, divergence_threshold)
    if halt_on_divergence:
        ctx._halt_on_divergence = True
    if timeout_pool is not None:
        ctx._pool = timeout_pool
    ctx._name = name  # a slot: request contexts are named (their path)
    if on_warn is not None:
        ctx._on_warn = on_warn
    if on_limit is not None:
        ctx._on_limit = on_limit
    # Nothing outside the kernel sees a call's node: the call forms keep records (see _calls).
    ctx._plain = on_limit is None and not (
        pipeline or circuit_breaker is not None or budget_parent is not None or ctx._observers or checks
    )
