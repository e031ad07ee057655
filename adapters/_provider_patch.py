"""Class-level patches with an undo, for the provider SDK adapters.

A patch wraps a method where a class defines it (``vars(owner)``), so subclasses that override it
keep their own; a method that is missing (API drift) is skipped, never invented. :meth:`undo`
puts back each original unless someone patched on top of ours, in which case ours stays.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

_MARK = "__veronica_mw_patch__"


class Patches:
    """The patches one adapter applied; ``apply`` is idempotent per (class, name)."""

    def __init__(self) -> None:
        self._applied: list[tuple[Any, str, Any, Any]] = []

    def wrap(self, owner: Any, name: str, make: Callable[[Any], Callable[..., Any]]) -> bool:
        """Replace ``owner.name`` (a class or module attribute) by ``make(original)``; False when it
        is missing or already ours."""
        original = vars(owner).get(name) if owner is not None else None
        if owner is None or original is None or getattr(original, _MARK, False):
            return False
        wrapper = functools.wraps(original)(make(original))
        setattr(wrapper, _MARK, True)
        setattr(owner, name, wrapper)
        self._applied.append((owner, name, original, wrapper))
        return True

    def undo(self) -> None:
        while self._applied:
            owner, name, original, wrapper = self._applied.pop()
            if vars(owner).get(name) is wrapper:
                setattr(owner, name, original)

    def __bool__(self) -> bool:
        return bool(self._applied)


class Instrumentation:
    """One SDK's patches behind a lock: ``install`` applies them once, ``remove`` undoes them
    (both idempotent); what every provider adapter's instrument/uninstrument/instrumented share."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._patches: Patches | None = None

    def install(self, apply: Callable[[], Patches]) -> None:
        with self._lock:
            if self._patches is None:
                self._patches = apply()

    def remove(self) -> None:
        with self._lock:
            if self._patches is not None:
                self._patches.undo()
                self._patches = None

    @property
    def active(self) -> bool:
        return self._patches is not None


def attr(module: Any, path: str) -> Any:
    """``module.a.b`` for ``path="a.b"``, or None when any part is missing (API drift)."""
    value = module
    for part in path.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value
