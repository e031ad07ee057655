"""Process-wide installers of the framework adapters that have none of their own, for ``instrument()``.

The LangChain, LlamaIndex and CrewAI adapters are installed by an object (a configure hook that
comes with importing the adapter, a handler's ``install()``, a hooks object's ``install()``); each
installer here does that once, bound to whatever execution context is current at each call, and
undoes it. The adapter is imported only when the installer runs, i.e. after the framework itself
was imported, so ``import veronica_mw`` stays framework-free.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any


class _Installer:
    """``instrument()``/``uninstrument()`` of one framework adapter (both idempotent)."""

    def __init__(self, module: str, factory: str | None) -> None:
        self.module = module  # veronica_mw.adapters.<module>
        self.factory = factory  # the class whose instance is installed (None: the import suffices)
        self._installed: Any = None
        self._lock = threading.Lock()

    def instrument(self) -> None:
        with self._lock:
            if self._installed is not None:
                return
            adapter = importlib.import_module(f"veronica_mw.adapters.{self.module}")
            # Without a factory the import is the installation (LangChain's zero-config hook,
            # which binds every run started inside an execution context).
            self._installed = getattr(adapter, self.factory)().install() if self.factory else adapter

    def uninstrument(self) -> None:
        with self._lock:
            installed, self._installed = self._installed, None
            if installed is not None and self.factory:
                installed.uninstall()
            # LangChain's hook stays registered, as after any import of its adapter; it only acts
            # inside an execution context (disable_auto_instrumentation() turns it off).

    def instrumented(self) -> bool:
        return self._installed is not None


langchain = _Installer("langchain", None)
llamaindex = _Installer("llamaindex", "VeronicaLlamaIndexHandler")
crewai = _Installer("crewai", "VeronicaCrewAIHooks")
