"""Exceptions raised by veronica-mw.

Exception tree::

    RuntimeError
    └── ExecutionHalted          a limit, policy, breaker, timeout or cancel stopped the run
    Exception
    ├── OutputRejected           a check rejected a model's answer: ask again (within the retry budget)
    └── ToolCallRejected         an approver rejected a tool call; the agent gets the message instead
    ImportError
    └── MissingFrameworkError    an adapter was imported without its framework installed

``ExecutionHalted`` is a ``RuntimeError`` on purpose: LangGraph's default ``RetryPolicy`` does not
retry RuntimeError, so a halt is never turned into more calls. ``OutputRejected`` is deliberately
*not* one: framework retry loops (LangGraph's ``RetryPolicy``, LangChain's ``.with_retry()``) should
re-ask the model, and the kernel has already drawn that retry from ``max_retries_total``. Invalid
limits raise the builtin ``ValueError``/``TypeError`` at construction (G6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .snapshot import ExecutionSnapshot


class ExecutionHalted(RuntimeError):
    """The execution context refused a call (or was stopped) and the run must end.

    ``reason`` is one of the :class:`~veronica_mw.HaltReason` codes, ``snapshot`` the usage at the
    moment of the halt, ``partial_result`` the latest result a wrapped call produced.
    """

    def __init__(
        self,
        reason: str,
        snapshot: ExecutionSnapshot | None = None,
        partial_result: Any = None,
        detail: str = "",
    ) -> None:
        self.reason = reason
        self.snapshot = snapshot
        self.partial_result = partial_result
        self.detail = detail
        message = f"execution halted: {reason}"
        super().__init__(f"{message} ({detail})" if detail else message)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the reason across pickling (process pools, multiprocessing queues).
        return (type(self), (self.reason, self.snapshot, self.partial_result, self.detail))

    @property
    def retry_after_s(self) -> float | None:
        """Seconds after which a retry could succeed, when the halt was caused by something transient."""
        return self.snapshot.retry_after_s if self.snapshot is not None else None


class OutputRejected(Exception):
    """A check rejected a model's output: the call does not return it, and one retry was drawn.

    ``check`` is the failing check's name, ``message`` why it failed, ``feedback`` a sentence to
    send back to the model when asking again, ``output`` the rejected output (a
    :class:`~veronica_mw.ModelOutput`).
    """

    def __init__(self, check: str, message: str, feedback: str = "", output: Any = None) -> None:
        self.check = check
        self.message = message
        self.feedback = feedback or f"Your previous answer failed the check {check!r}: {message}"
        self.output = output
        super().__init__(f"output rejected by check {check!r}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.check, self.message, self.feedback, None))


class ToolCallRejected(Exception):
    """An approver rejected a tool call whose policy says ``on_reject="message"``.

    The tool did not run. Adapters that can answer a tool call with text return ``message`` to the
    agent as the tool's result; elsewhere this surfaces as the tool's error.
    """

    def __init__(self, tool: str, message: str) -> None:
        self.tool = tool
        self.message = message
        super().__init__(f"tool call {tool!r} rejected: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.tool, self.message))


class MissingFrameworkError(ImportError):
    """An adapter's framework is not installed; the message carries the ``pip install`` line."""

    def __init__(
        self, framework: str, extra: str, cause: BaseException | None = None, *, module: str | None = None
    ) -> None:
        hint = f'pip install "veronica-mw[{extra}]"'
        detail = f": {cause}" if cause is not None else ""
        where = module or f"veronica_mw.adapters.{extra}"
        super().__init__(f"{where} needs {framework}{detail}. Install it with: {hint}")
        self.framework = framework
        self.extra = extra
        self.install_hint = hint
