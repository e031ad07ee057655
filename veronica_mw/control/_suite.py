"""The output verifier the kernel asks when a model call settles: the context's checks, in order.

Each check is given as ``check`` or ``(check, on_fail)``:

- ``"retry"`` (default): the call does not return its result; it raises ``OutputRejected`` and
  draws one retry from ``max_retries_total`` (the kernel halts with ``retry_limit`` when spent);
- ``"halt"``: the context halts with ``verification_failed`` (HTTP 502 under the middlewares);
- ``"warn"``: a ``check_failed`` event, nothing else.

Checks run in the order given; the first retry/halt failure stops the rest (put cheap checks
first). Every result that was produced is kept on the call's graph node (``node.checks``) and
every failure is a ``check_failed`` event. A check that raises, or returns something other than a
``CheckResult``, a bool or None, has failed (fail closed) with a message saying so.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..kernel._control import Rejection
from .checks import CheckResult
from .outputs import ModelOutput

if TYPE_CHECKING:
    from ..kernel.execution import ExecutionContext
    from ..kernel.graph import CallNode

logger = logging.getLogger("veronica_mw")

ON_FAIL = ("retry", "halt", "warn")
Check = Callable[[ModelOutput], Any]


def check_name(check: Any) -> str:
    name = getattr(check, "name", None)
    if isinstance(name, str) and name:
        return name
    name = getattr(check, "__name__", None)
    return name if isinstance(name, str) and name else type(check).__name__


class _Entry:
    __slots__ = ("check", "on_fail", "name")

    def __init__(self, check: Check, on_fail: str) -> None:
        self.check = check
        self.on_fail = on_fail
        self.name = check_name(check)


def _entries(checks: Iterable[Any]) -> tuple[_Entry, ...]:
    entries = []
    for item in checks:
        on_fail = "retry"
        if isinstance(item, tuple):
            if len(item) != 2:
                raise ValueError(f"a check is given as check or (check, on_fail), got {item!r}")
            item, on_fail = item
        if not callable(item):
            raise TypeError(f"a check must be callable (output) -> CheckResult | bool | None, got {item!r}")
        if on_fail not in ON_FAIL:
            raise ValueError(f"on_fail must be one of {', '.join(ON_FAIL)}, got {on_fail!r}")
        entries.append(_Entry(item, on_fail))
    return tuple(entries)


def _result(entry: _Entry, value: Any) -> CheckResult:
    if value is None or value is True:
        return CheckResult(True, entry.name)
    if value is False:
        return CheckResult(False, entry.name, "check failed")
    if isinstance(value, CheckResult):
        return value if value.name else CheckResult(value.passed, entry.name, value.message, value.score)
    return CheckResult(False, entry.name, f"check returned {type(value).__name__}, not CheckResult/bool/None")


def _raised(entry: _Entry, exc: BaseException) -> CheckResult:
    logger.warning("veronica_mw: check %s raised; counted as failed", entry.name, exc_info=exc)
    return CheckResult(False, entry.name, f"check raised {type(exc).__name__}: {exc}")


def _run_sync(entry: _Entry, output: ModelOutput) -> CheckResult:
    try:
        value = entry.check(output)
    except Exception as exc:
        return _raised(entry, exc)
    if inspect.isawaitable(value):
        # A sync call settles here; an async check can still run when this thread has no loop.
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            try:
                value = asyncio.run(_awaited(value))
            except Exception as exc:
                return _raised(entry, exc)
        else:
            getattr(value, "close", lambda: None)()
            return CheckResult(
                False, entry.name, "async check in a sync call on an event loop thread: use the async API"
            )
    return _result(entry, value)


async def _awaited(value: Any) -> Any:
    return await value


class CheckSuite:
    """The :class:`~veronica_mw.kernel._control.OutputVerifier` built from a list of checks.

    Built once (by ``ExecutionContext(checks=...)``, or once per middleware) and shared: it holds
    no per-call state.
    """

    __slots__ = ("_entries",)

    def __init__(self, checks: Iterable[Any]) -> None:
        if isinstance(checks, (str, bytes)) or not isinstance(checks, Iterable):
            raise TypeError(f"checks must be a list of checks, got {type(checks).__name__}")
        self._entries = _entries(checks)

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _output(ctx: ExecutionContext, node: CallNode, result: Any) -> ModelOutput:
        return ModelOutput(result, model=node.model, call_name=node.name, chain_id=ctx.chain_id)

    def verify(self, ctx: ExecutionContext, node: CallNode, result: Any) -> Rejection | None:
        output = self._output(ctx, node, result)
        results: list[CheckResult] = []
        for entry in self._entries:
            checked = _run_sync(entry, output)
            rejection = self._record(ctx, node, entry, checked, results, output)
            if rejection is not None:
                return rejection
        return None

    async def averify(self, ctx: ExecutionContext, node: CallNode, result: Any) -> Rejection | None:
        output = self._output(ctx, node, result)
        results: list[CheckResult] = []
        for entry in self._entries:
            try:
                value = entry.check(output)
                if inspect.isawaitable(value):
                    value = await value
                checked = _result(entry, value)
            except Exception as exc:
                checked = _raised(entry, exc)
            rejection = self._record(ctx, node, entry, checked, results, output)
            if rejection is not None:
                return rejection
        return None

    @staticmethod
    def _record(
        ctx: ExecutionContext,
        node: CallNode,
        entry: _Entry,
        checked: CheckResult,
        results: list[CheckResult],
        output: ModelOutput,
    ) -> Rejection | None:
        results.append(checked)
        node.checks = tuple(results)
        if checked.passed:
            return None
        message = checked.message or "check failed"
        ctx.add_event(
            "check_failed",
            f"{node.name}: {checked.name}: {message}",
            check=checked.name,
            message=message,
            on_fail=entry.on_fail,
            score=checked.score,
            node_id=node.node_id,
        )
        if entry.on_fail == "warn":
            return None
        feedback = (
            f"Your previous answer was rejected by the check {checked.name!r}: {message}. "
            "Answer again, fixing this."
        )
        return Rejection(checked.name, message, entry.on_fail, feedback, output)
