"""What ``veronica-mw run`` switches on around the program: every SDK and framework adapter, and
context inheritance for the threads the program starts.

Nothing is imported eagerly: each SDK is patched and each framework adapter installed right after
the program imports it (``veronica_mw._post_import``), so a script that uses none of them pays for
none. Frameworks whose adapter needs installing (LlamaIndex, CrewAI) get one process-wide handler
bound to the current context; LangChain's zero-config hook comes with importing its adapter; AG2
and every other framework built on the provider SDKs are contained at the SDK layer.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from .. import _post_import
from ..instrumentation import instrument

logger = logging.getLogger("veronica_mw")


def _langchain() -> None:
    importlib.import_module("veronica_mw.adapters.langchain")  # registers the zero-config hook


def _llamaindex() -> None:
    importlib.import_module("veronica_mw.adapters.llamaindex").VeronicaLlamaIndexHandler().install()


def _crewai() -> None:
    importlib.import_module("veronica_mw.adapters.crewai").VeronicaCrewAIHooks().install()


_FRAMEWORKS: dict[str, Callable[[], None]] = {
    "langchain_core": _langchain,
    "llama_index.core": _llamaindex,
    "crewai": _crewai,
}


def _guarded(name: str, install: Callable[[], None]) -> Callable[[], None]:
    def hook() -> None:
        try:
            install()
        except Exception:  # an adapter that cannot load leaves that framework to the SDK layer
            logger.warning("veronica_mw: the %s adapter could not be installed", name, exc_info=True)

    return hook


def instrument_everything() -> tuple[str, ...]:
    """Instrument every installed SDK and framework (lazily); return the SDK names."""
    names = instrument()
    for module, install in _FRAMEWORKS.items():
        _post_import.when_imported(module, _guarded(module, install))
    return names


def inherit_context_in_threads() -> Callable[[], None]:
    """Make every thread started from now on run in a copy of its starter's contextvars context
    (Python < 3.14 starts threads in an empty one), so the program's worker threads and thread
    pools see the run's execution context. Returns the undo."""
    original = threading.Thread.start

    def start(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        context = contextvars.copy_context()
        run = self.run
        self.run = lambda: context.run(run)  # type: ignore[method-assign]
        original(self, *args, **kwargs)

    threading.Thread.start = start  # type: ignore[method-assign]

    def undo() -> None:
        threading.Thread.start = original  # type: ignore[method-assign]

    return undo
