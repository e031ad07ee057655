"""Run a function right after a module is first imported (a post-import hook).

``instrument()`` patches an SDK the application has not imported yet when it finally is, so that
building a middleware never imports (and pays for, or lets phone home) SDKs the app never uses.
A finder at the front of ``sys.meta_path`` spots the import of a watched name, lets the other
finders locate it, and chains the hook after the loader's ``exec_module`` on that one spec's
loader. A hook that raises is logged: it must never break the application's ``import``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

logger = logging.getLogger("veronica_mw")

_lock = threading.RLock()
_hooks: dict[str, list[Callable[[], None]]] = {}
_searching = threading.local()


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _hooks or getattr(_searching, "name", None) == fullname:
            return None
        _searching.name = fullname  # find_spec below consults the finders again, us included
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            _searching.name = None
        loader = spec.loader if spec is not None else None
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or exec_module is None:
            return spec

        def exec_and_hook(module: ModuleType) -> None:
            exec_module(module)
            _run(fullname)

        try:
            loader.exec_module = exec_and_hook  # type: ignore[method-assign,union-attr]  # this spec only
        except (AttributeError, TypeError):  # a loader we cannot chain: hook right away instead
            return spec
        return spec


_finder = _Finder()


def _run(name: str) -> None:
    with _lock:
        hooks = _hooks.pop(name, [])
        if not _hooks and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
    for hook in hooks:
        try:
            hook()
        except Exception:
            logger.exception("veronica_mw: instrumenting %s after its import failed", name)


def when_imported(name: str, hook: Callable[[], None]) -> None:
    """Call ``hook()`` once module ``name`` is imported: now if it already is, else right after."""
    with _lock:
        if name not in sys.modules:
            _hooks.setdefault(name, []).append(hook)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    hook()


def cancel(hook: Callable[[], None]) -> None:
    """Forget ``hook`` wherever it still waits for an import."""
    with _lock:
        for name in list(_hooks):
            _hooks[name] = [h for h in _hooks[name] if h is not hook]
            if not _hooks[name]:
                del _hooks[name]
        if not _hooks and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)


def pending() -> dict[str, Any]:
    with _lock:
        return {name: list(hooks) for name, hooks in _hooks.items()}
