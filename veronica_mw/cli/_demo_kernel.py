"""The paper's Section 6 scenarios that need nothing but the kernel (used by ``veronica-mw demo``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..kernel.config import ExecutionConfig
from ..kernel.exceptions import ExecutionHalted
from ..kernel.execution import ExecutionContext
from ..kernel.retry import RetryContainer


class UpstreamError(ConnectionError):
    """What the always-failing stub model raises."""


def retry_amplification(contained: bool, layers: int = 3, retries_per_layer: int = 3) -> dict[str, Any]:
    """Nested retry layers around a model that always fails: (1 + r) ** L calls uncontained,
    1 + max_retries_total calls inside a context with ``max_retries_total=5``."""
    calls = 0

    def stub_model() -> str:
        nonlocal calls
        calls += 1
        raise UpstreamError("upstream unavailable")

    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=10.0, max_steps=1000, max_retries_total=5))
    fn: Callable[[], Any] = (lambda: ctx.call_llm(stub_model)) if contained else stub_model
    for _ in range(layers):
        container = RetryContainer(
            max_retries=retries_per_layer, backoff_base=0.0, jitter=0.0, sleep=_no_sleep
        )
        fn = _layer(container, fn)
    halt = _run(fn, ctx if contained else None)
    return _result(calls, halt, ctx if contained else None)


def recursive_tools(contained: bool, depth: int = 20) -> dict[str, Any]:
    """A tool that calls itself ``depth`` times; ``max_steps=5`` stops it after five calls."""
    calls = 0
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=10.0, max_steps=5, max_retries_total=0))

    def tool(level: int) -> int:
        nonlocal calls
        calls += 1
        if level + 1 >= depth:
            return level
        return ctx.call_tool(tool, level + 1) if contained else tool(level + 1)

    halt = _run(lambda: ctx.call_tool(tool, 0) if contained else tool(0), ctx if contained else None)
    return _result(calls, halt, ctx if contained else None)


def _no_sleep(_: float) -> None:
    pass


def _layer(container: RetryContainer, inner: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: container.execute(inner)


def _run(fn: Callable[[], Any], ctx: ExecutionContext | None) -> ExecutionHalted | None:
    try:
        if ctx is None:
            fn()
        else:
            with ctx:
                fn()
    except ExecutionHalted as halted:
        return halted
    except UpstreamError:
        pass
    return None


def _result(calls: int, halt: ExecutionHalted | None, ctx: ExecutionContext | None) -> dict[str, Any]:
    snapshot = ctx.get_snapshot() if ctx is not None else None
    return {
        "underlying_calls": calls,
        "halt_reason": halt.reason if halt is not None else None,
        "steps_used": snapshot.step_count if snapshot else calls,
        "retries_used": snapshot.retries_used if snapshot else None,
    }
