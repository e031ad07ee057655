"""The leases of one budget pool in this process, how they are synced, and the thread that keeps
them: books their spend every ``sync_s``, renews them before their TTL and gives back what an
idle lease holds (see :mod:`._lease` for the rules)."""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import threading
import time
import weakref
from typing import Any

from ._backend import LeaseReply, LeaseSync, Op
from ._lease import Lease, background

logger = logging.getLogger("veronica_mw")
_all: weakref.WeakSet[Leases] = weakref.WeakSet()


class Leases:
    # ``pool``: the BudgetPool (typed Any: budget_pool imports this module, no import circle).
    def __init__(self, pool: Any, size: int, sync_s: float, idle_s: float) -> None:
        self._pool = weakref.ref(pool)  # the keeper thread must not keep the pool alive
        self._limit = pool._limit
        self._failover = pool._failover
        self.size = size
        self.sync_s = sync_s
        self.idle_s = idle_s
        self.renew_s = max(0.05, pool.reservation_ttl_s / 3)
        self._leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        _all.add(self)

    def get(self, key_hash: str) -> Lease:
        lease = self._leases.get(key_hash)
        if lease is None or lease.dead:
            with self._lock:
                lease = self._leases.get(key_hash)
                if lease is None or lease.dead:
                    lease = self._leases[key_hash] = Lease(key_hash)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._keep, name="veronica-mw-leases", daemon=True)
                    self._thread.start()
        return lease

    def _op(self, lease: Lease) -> Op:
        pool = self._pool()
        if pool is None:
            raise RuntimeError("budget pool is gone")
        op: Op = pool._op(lease.key_hash)[0]
        return op

    # -- syncs -----------------------------------------------------------------------------------

    def sync(
        self, key_hash: str, ask: int, *, lease: Lease | None = None, shrink: bool = False
    ) -> tuple[Lease | None, LeaseReply | None]:
        """Top up the tenant's lease for one reservation of ``ask`` (-1: only book and renew).

        Returns (the lease now holding the reservation, or None; the backend's answer, or None
        when it was down). ``lease``: sync exactly that one (the keeper; nothing is reserved).
        """
        take = lease is None
        while True:
            current = lease or self.get(key_hash)
            current.acquire()
            try:
                if current.dead:  # retired while we waited: its successor is the tenant's lease
                    if not take:
                        return None, None
                    continue
                if take and ask >= 0 and current.take(ask):  # another sync made room meanwhile
                    return current, None
                while True:
                    sync, resent = current.plan(ask, self.size, shrink)
                    reply = self._failover.lease(self._op(current), sync, self._limit)
                    if reply is None:
                        return None, None
                    took = current.apply(sync, reply, self._limit, take and not resent)
                    if not resent:
                        return (current if took else None), reply
            finally:
                current.release()

    async def async_sync(self, key_hash: str, ask: int) -> tuple[Lease | None, LeaseReply | None]:
        """Like :meth:`sync` (without ``lease``), awaiting the backend; cancelled, the sync still
        completes in the background."""
        while True:
            lease = self.get(key_hash)
            await lease.aacquire()
            handed_over = False
            try:
                if lease.dead:
                    continue
                if ask >= 0 and lease.take(ask):
                    return lease, None
                while True:
                    sync, resent = lease.plan(ask, self.size, False)
                    task = background(self._failover.alease(self._op(lease), sync, self._limit))
                    try:
                        reply = await asyncio.shield(task)
                    except asyncio.CancelledError:
                        handed_over = True  # the task applies the answer and frees the sync slot
                        task.add_done_callback(functools.partial(self._finish, lease, sync))
                        raise
                    if reply is None:
                        return None, None
                    took = lease.apply(sync, reply, self._limit, not resent)
                    if not resent:
                        return (lease if took else None), reply
            finally:
                if not handed_over:
                    lease.release()

    def _finish(self, lease: Lease, sync: LeaseSync, task: asyncio.Task[LeaseReply | None]) -> None:
        try:
            if not task.cancelled() and task.exception() is None:
                reply = task.result()
                if reply is not None:
                    lease.apply(sync, reply, self._limit, False)
        finally:
            lease.release()

    # -- the keeper ------------------------------------------------------------------------------

    def maintain(self, final: bool = False) -> None:
        """One pass over the leases: book spend, renew, give back idle slices (``final``: all)."""
        now = time.monotonic()
        for key_hash, lease in list(self._leases.items()):
            if final:
                what = None if lease.idle_and_empty() else "shrink"
            else:
                what = lease.due(now, self.sync_s, self.renew_s, self.idle_s)
            if what is None:
                if not final and lease.retire(now, 10 * self.idle_s):  # long idle, holding nothing: forget it
                    with self._lock:
                        if self._leases.get(key_hash) is lease:
                            del self._leases[key_hash]
                continue
            try:
                self.sync(key_hash, -1, lease=lease, shrink=what == "shrink")
            except Exception:  # never let one bad sync stop the keeper
                logger.exception("veronica_mw: lease sync failed; retried on the next pass")

    def _keep(self) -> None:
        tick = max(0.05, min(self.sync_s, self.idle_s) / 2)
        while not self._stop.wait(tick):
            if self._pool() is None:
                return
            self.maintain()

    def close(self) -> None:
        """Book everything and give back all unused slices, then stop the keeper."""
        self._stop.set()
        try:
            self.maintain(final=True)
        except Exception:
            logger.exception("veronica_mw: giving back leases failed; they expire by TTL")

    def _forked(self) -> None:
        # A forked child must not spend its parent's leases (same ids): it starts with none.
        self._leases = {}
        self._lock = threading.Lock()
        self._thread = None
        self._stop = threading.Event()


def _close_all() -> None:
    for leases in list(_all):
        leases.close()


def _after_fork() -> None:
    for leases in list(_all):
        leases._forked()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
