"""LangChain adapter: a callback handler, zero-config binding and (LangChain >= 1) agent middleware.

* :class:`VeronicaCallbackHandler` turns every model run (chat or text, invoke or stream, sync or
  async) and every tool run into one kernel step: it begins the step in ``on_*_start`` (raising
  :class:`~veronica_mw.ExecutionHalted` there, so the model or tool is never called), commits the
  real usage and model name in ``on_llm_end``/``on_tool_end`` and records failures in
  ``on_*_error`` so retries (``.with_retry()`` shows each attempt as a run) draw from the
  chain-wide retry budget.
* Zero-config: importing this module registers a LangChain configure hook whose handler binds to
  the *current* execution context at call time, so every LangChain/LangGraph run inside a request
  under the middleware, or inside ``with ExecutionContext(...)``, is contained without passing
  callbacks. Opt out with :func:`disable_auto_instrumentation` or ``VERONICA_MW_LANGCHAIN_AUTO=0``.
* ``VeronicaAgentMiddleware`` (needs ``langchain>=1``) is loaded lazily from
  :mod:`._langchain_agent` so that this module needs only langchain-core.

The same run seen by several handlers (explicit + zero-config) is one step: handlers begin it with
``key=run_id``, which the kernel deduplicates, and a step begun by the agent middleware or a
LangGraph node wrapper is adopted through :mod:`._langchain_claims`.
"""

from __future__ import annotations

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.tracers.context import register_configure_hook
except ImportError as _exc:
    from .. import MissingFrameworkError

    raise MissingFrameworkError("langchain-core", "langchain", _exc) from None

import logging
import os
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .. import (
    ExecutionContext,
    ExecutionHalted,
    OutputRejected,
    ToolCallRejected,
    get_current_execution_context,
)
from ._langchain_handler import COST_HINT_METADATA_KEY, VeronicaCallbackHandler

if TYPE_CHECKING:
    from ._langchain_agent import VeronicaAgentMiddleware

__all__ = [
    "AUTO_INSTRUMENTATION_ENV",
    "COST_HINT_METADATA_KEY",
    "VeronicaAgentMiddleware",
    "VeronicaCallbackHandler",
    "auto_instrumentation_enabled",
    "disable_auto_instrumentation",
    "enable_auto_instrumentation",
]

AUTO_INSTRUMENTATION_ENV = "VERONICA_MW_LANGCHAIN_AUTO"
"""Set to ``0``/``false``/``off`` before import to start with zero-config binding disabled."""


# -- zero-config binding ----------------------------------------------------------------------------

_auto_enabled = os.environ.get(AUTO_INSTRUMENTATION_ENV, "1").strip().lower() not in {
    "0",
    "false",
    "no",
    "off",
}


class _AutoHandler(VeronicaCallbackHandler):
    """The configure-hook handler: bound to whatever context is current when a run starts."""

    def _resolve(self) -> ExecutionContext | None:
        return get_current_execution_context() if _auto_enabled else None

    # LangChain reads these before dispatching an event, in the run's own context. Outside any
    # execution context the hook handler is skipped right there: otherwise every async run in the
    # process would pay a thread-pool hop per event for a handler with nothing to do.
    @property
    def ignore_llm(self) -> bool:
        return self._resolve() is None

    @property
    def ignore_chat_model(self) -> bool:
        return self._resolve() is None

    @property
    def ignore_agent(self) -> bool:  # tool events are filtered by this flag
        return self._resolve() is None


# LangChain attaches a hook's handler only while the hook variable holds a non-None value, and a
# ContextVar cannot be subclassed to compute that value. So the variable's *default* is one shared
# handler that resolves the current execution context itself at call time; outside any context it
# does nothing. Being a real ContextVar, it also works in threads and tasks LangChain/LangGraph start.
_AUTO_HANDLER = _AutoHandler()
_auto_handler_var: ContextVar[BaseCallbackHandler | None] = ContextVar(
    "veronica_mw_langchain_auto_handler", default=_AUTO_HANDLER
)
register_configure_hook(_auto_handler_var, inheritable=True)


_EXPECTED = tuple(f"{cls.__name__}(" for cls in (ExecutionHalted, OutputRejected, ToolCallRejected))


class _HaltLogFilter(logging.Filter):
    """Drop LangChain's "Error in <handler> callback" warning when the error is our halt (or a
    rejected output or tool call).

    LangChain logs every handler exception before re-raising it; these are expected control flow
    (they still propagate), not a callback failure worth a warning per run.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (
            isinstance(record.msg, str)
            and record.msg.startswith("Error in %s.%s callback")
            and isinstance(args, tuple)
            and bool(args)
            and isinstance(args[-1], str)
            and args[-1].startswith(_EXPECTED)
        )


logging.getLogger("langchain_core.callbacks.manager").addFilter(_HaltLogFilter())


def disable_auto_instrumentation() -> None:
    """Stop containing LangChain runs that were not given a VeronicaCallbackHandler (process-wide)."""
    global _auto_enabled
    _auto_enabled = False


def enable_auto_instrumentation() -> None:
    """Undo :func:`disable_auto_instrumentation`."""
    global _auto_enabled
    _auto_enabled = True


def auto_instrumentation_enabled() -> bool:
    """Whether runs inside an execution context are contained without explicit callbacks."""
    return _auto_enabled


def __getattr__(name: str) -> Any:
    # The agent middleware needs langchain>=1 (not only langchain-core): import it on first use so
    # this module works without it and the error names the right thing to install.
    if name == "VeronicaAgentMiddleware":
        from ._langchain_agent import VeronicaAgentMiddleware

        globals()[name] = VeronicaAgentMiddleware
        return VeronicaAgentMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
