"""Cooperative cancellation: a one-shot flag with a reason and callbacks."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import suppress

logger = logging.getLogger("veronica_mw")


class CancellationToken:
    """Set once; the first reason wins. Callbacks run once, outside the lock, on the cancelling
    thread (a timeout fires them on the timeout pool's thread, so keep them short and thread-safe).
    """

    __slots__ = ("_lock", "reason", "detail", "_callbacks")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Read without the lock on hot paths: a str reference swap is atomic under the GIL.
        self.reason: str | None = None
        self.detail = ""
        self._callbacks: list[Callable[[], object]] = []

    @property
    def is_cancelled(self) -> bool:
        return self.reason is not None

    def cancel(self, reason: str = "cancelled", detail: str = "") -> bool:
        """Cancel with ``reason``; return True if this call was the one that cancelled."""
        with self._lock:
            if self.reason is not None:
                return False
            self.reason = reason
            self.detail = detail
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a broken observer must not stop the others
                logger.exception("veronica_mw: cancellation callback failed")
        return True

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run ``callback`` on cancellation (at once if already cancelled); returns a remover."""
        with self._lock:
            if self.reason is None:
                self._callbacks.append(callback)

                def remove() -> None:
                    with self._lock, suppress(ValueError):  # removed twice: nothing to do
                        self._callbacks.remove(callback)

                return remove
        callback()
        return lambda: None
