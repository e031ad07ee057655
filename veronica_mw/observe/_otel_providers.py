"""Which tracer and meter to use, found cheaply on every call.

An explicit provider, or a global one an application configured, is resolved once: the OTel API
lets a global provider be set only once per process, so it cannot change afterwards. While the
global provider is still the API's placeholder (no SDK configured: everything would be a no-op),
it is looked up again at most every :data:`RECHECK_S` seconds, so an SDK configured after the
first request is picked up soon without an environment lookup on every call; :meth:`refresh`
(called when the application sets a provider, see :mod:`._otel_watch`) makes the next call look.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import monotonic
from typing import Any, Generic, TypeVar

T = TypeVar("T")
RECHECK_S = 0.5


class ProviderCache(Generic[T]):
    """``build(provider)`` for the explicit provider, else the global one (None: record nothing)."""

    __slots__ = ("_explicit", "_lookup", "_placeholder", "_build", "_value", "_final", "_next", "_lock")

    def __init__(
        self,
        explicit: Any,
        lookup: Callable[[], Any],
        placeholder: Callable[[Any], bool],
        build: Callable[[Any], T | None],
    ) -> None:
        self._explicit = explicit
        self._lookup = lookup
        self._placeholder = placeholder
        self._build = build
        self._value: T | None = None
        self._final = False
        self._next = 0.0
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Look the global provider up again on the next call (one may have been set)."""
        self._next = 0.0

    def get(self) -> T | None:
        if self._final:
            return self._value
        now = monotonic()
        if now < self._next:
            return None
        with self._lock:
            if self._final:
                return self._value
            self._next = now + RECHECK_S
            provider = self._explicit if self._explicit is not None else self._lookup()
            if self._placeholder(provider):
                return None
            # Final before building: a provider that raises fails once, not on every call.
            self._final = True
            self._value = self._build(provider)
            return self._value
