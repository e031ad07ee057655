"""One daemon thread that fires every context's wall-clock deadline (G5)."""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("veronica_mw")


def _noop() -> None:
    return None


class TimeoutHandle:
    __slots__ = ("deadline", "callback", "active")

    def __init__(self, deadline: float, callback: Callable[[], object]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.active = True


class SharedTimeoutPool:
    """A heap of (deadline, callback) served by a single lazily started daemon thread.

    Scheduling and the worker's wait share one condition variable, so a deadline earlier than the
    one being waited for always wakes the worker (no lost wake-ups). Cancelled entries are dropped
    lazily and the heap is compacted when they dominate, so exited contexts do not pile up.
    """

    _default: SharedTimeoutPool | None = None
    _default_lock = threading.Lock()

    def __init__(self) -> None:
        # Callers take the bare lock (a C-level context manager); only the worker needs the
        # condition, which wraps the same lock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, TimeoutHandle]] = []
        self._seq = itertools.count()
        self._dead = 0
        self._thread: threading.Thread | None = None
        # What the worker is waiting for: a new deadline only needs to wake it if it is earlier.
        self._wake_at = float("inf")

    @classmethod
    def default(cls) -> SharedTimeoutPool:
        pool = cls._default
        if pool is None:
            with cls._default_lock:
                if cls._default is None:
                    cls._default = cls()
                pool = cls._default
        return pool

    def __len__(self) -> int:
        with self._lock:
            return len(self._heap) - self._dead

    def schedule(self, deadline: float, callback: Callable[[], object]) -> TimeoutHandle:
        """Call ``callback`` once ``time.monotonic()`` reaches ``deadline``."""
        handle = TimeoutHandle(deadline, callback)
        with self._lock:
            heapq.heappush(self._heap, (deadline, next(self._seq), handle))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="veronica-timeouts", daemon=True)
                self._thread.start()
            elif deadline < self._wake_at:
                self._wake_at = deadline
                self._cond.notify()
        return handle

    def cancel(self, handle: TimeoutHandle) -> None:
        with self._lock:
            if not handle.active:
                return
            handle.active = False
            # The heap drops cancelled entries lazily; the callback (a context's bound method) must
            # not keep an exited context alive until its deadline would have passed.
            handle.callback = _noop
            self._dead += 1
            if self._dead > 256 and self._dead * 2 > len(self._heap):
                self._heap = [item for item in self._heap if item[2].active]
                heapq.heapify(self._heap)
                self._dead = 0

    def _run(self) -> None:
        heap = self._heap
        with self._cond:
            while True:
                heap = self._heap
                while heap and not heap[0][2].active:
                    heapq.heappop(heap)
                    self._dead -= 1
                if not heap:
                    self._wake_at = float("inf")
                    self._cond.wait()
                    continue
                wait = heap[0][0] - time.monotonic()
                if wait > 0:
                    self._wake_at = heap[0][0]
                    # Capped: a lock wait longer than TIMEOUT_MAX (an infinite deadline) raises.
                    self._cond.wait(min(wait, threading.TIMEOUT_MAX))
                    continue
                handle = heapq.heappop(heap)[2]
                handle.active = False
                self._cond.release()
                try:
                    handle.callback()
                except Exception:
                    logger.exception("veronica_mw: timeout callback failed")
                finally:
                    self._cond.acquire()

    def _after_fork(self) -> None:
        # The worker thread does not survive fork(); the child starts its own on first use.
        SharedTimeoutPool.__init__(self)


def _reset_default_after_fork() -> None:
    if SharedTimeoutPool._default is not None:
        SharedTimeoutPool._default._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_default_after_fork)
