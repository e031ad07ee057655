"""LangChain adapter: a callback handler, zero-config binding and (LangChain >= 1) agent middleware.

* :class:`VeronicaCallbackHandler` turns every model run (chat or text, invoke or stream, sync or
  async) and every tool run into one kernel step: it begins the step in ``on_*_start`` (raising
  :class:`~veronica_mw.ExecutionHalted` there, so the model or tool is never called), commits the
  real usage and model name in ``on_llm_end``/``on_tool_end`` and records failures in
  ``on_*_error`` so retries (``.with_retry()`` shows each attempt as a run) draw from the
  chain-wide retry budget.
* :class:`VeronicaAsyncCallbackHandler` is its async twin, awaited inline by LangChain in async
  runs (the sync handler costs a thread-pool hop per event there).
* Zero-config: importing this module registers a LangChain configure hook that, while an
  execution context is current, attaches the handler matching the run (async twin for async
  runs) bound to that context at call time, so every LangChain/LangGraph run inside a request
  under the middleware, or inside ``with ExecutionContext(...)``, is contained without passing
  callbacks; outside any context it attaches nothing. Opt out with
  :func:`disable_auto_instrumentation` or ``VERONICA_MW_LANGCHAIN_AUTO=0``.
* ``VeronicaAgentMiddleware`` (needs ``langchain>=1``) is loaded lazily from
  :mod:`._langchain_agent` so that this module needs only langchain-core.

The same run seen by several handlers (explicit + zero-config) is one step: handlers begin it with
``key=run_id``, which the kernel deduplicates, and a step begun by the agent middleware or a
LangGraph node wrapper is adopted through :mod:`._langchain_claims`.
"""

from __future__ import annotations

try:
    from langchain_core.callbacks import AsyncCallbackManager, BaseCallbackHandler
    from langchain_core.tracers.context import register_configure_hook
except ImportError as _exc:
    from .. import MissingFrameworkError

    raise MissingFrameworkError("langchain-core", "langchain", _exc) from None

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from .. import (
    ExecutionContext,
    ExecutionHalted,
    OutputRejected,
    ToolCallRejected,
    get_current_execution_context,
)
from ..kernel.context import current_context
from . import _provider_claims
from ._langchain_async import VeronicaAsyncCallbackHandler, _running_loop
from ._langchain_handler import COST_HINT_METADATA_KEY, VeronicaCallbackHandler
from ._langchain_provider import enclosing_run

if TYPE_CHECKING:
    from ._langchain_agent import VeronicaAgentMiddleware

__all__ = [
    "AUTO_INSTRUMENTATION_ENV",
    "COST_HINT_METADATA_KEY",
    "VeronicaAgentMiddleware",
    "VeronicaAsyncCallbackHandler",
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
    """The configure-hook handler of sync runs: bound to whatever context is current at call time."""

    def _resolve(self) -> ExecutionContext | None:
        return get_current_execution_context() if _auto_enabled else None

    # LangChain reads these before dispatching an event. A run configured inside a context may
    # outlive it (a task that kept running): then there is nothing to do.
    @property
    def ignore_llm(self) -> bool:
        return self._resolve() is None

    @property
    def ignore_chat_model(self) -> bool:
        return self._resolve() is None

    @property
    def ignore_agent(self) -> bool:  # tool events are filtered by this flag
        return self._resolve() is None


class _AsyncAutoHandler(VeronicaAsyncCallbackHandler):
    """The configure-hook handler of async runs (awaited inline, no thread-pool hop)."""

    def _resolve(self) -> ExecutionContext | None:
        return get_current_execution_context() if _auto_enabled else None

    @property
    def ignore_llm(self) -> bool:
        return _running_loop() is None or self._resolve() is None

    @property
    def ignore_chat_model(self) -> bool:
        return _running_loop() is None or self._resolve() is None

    @property
    def ignore_agent(self) -> bool:
        return _running_loop() is None or self._resolve() is None


_SYNC_HANDLER = _AutoHandler()
_ASYNC_HANDLER = _AsyncAutoHandler()
_ASYNC_CONFIGURE = AsyncCallbackManager.configure.__func__.__code__  # type: ignore[attr-defined]
_current = current_context.get


class _ConfigureHook:
    """What LangChain reads when it configures a run's callbacks, in place of a ContextVar.

    LangChain calls ``get()`` on every registered hook while it builds a run's callback manager
    and attaches the handler returned unless it is None. So outside any execution context no
    handler is attached at all -- a run costs what it costs without this adapter -- and inside
    one, a run gets the handler matching its manager: the async twin for an
    ``AsyncCallbackManager`` (``ainvoke``, ``astream``, async graphs), the sync handler otherwise.
    The manager's kind is read from the caller's frame (``AsyncCallbackManager.configure`` calls
    ``_configure``, which calls us); any other caller gets the sync handler, which contains every
    kind of run (async ones at the cost of a thread-pool hop per event).
    """

    def get(self) -> BaseCallbackHandler | None:
        if not _auto_enabled or _current() is None:
            return None
        try:
            caller = sys._getframe(2).f_code
        except ValueError:  # pragma: no cover - called from the top of a stack
            return _SYNC_HANDLER
        return _ASYNC_HANDLER if caller is _ASYNC_CONFIGURE else _SYNC_HANDLER


# Inheritable: child runs (a chain's model, a graph's nodes) get the handler too, and their own
# configure step consults the hook again (a context entered inside a run is picked up there).
register_configure_hook(_ConfigureHook(), inheritable=True)  # type: ignore[arg-type]
# Provider SDK requests made by a model run (ChatOpenAI, ChatAnthropic, ...) adopt the run's step.
_provider_claims.register(enclosing_run)


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
