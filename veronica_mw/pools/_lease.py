"""Leases: a process reserves a slice of a tenant's window once and spends it locally.

Without a lease every call costs two backend round trips (reserve, settle) and every request one
more (admission). With ``BudgetPool(lease_usd=...)`` each process holds, per tenant, one
reservation whose amount changes (a *lease*): admission and the calls' reservations are decided
from it in memory, and a backend round trip happens only to top it up, to book what was spent
(every ``lease_sync_s``), to renew it and to give back what an idle process does not use.

Why the bound stays exact: the lease is an ordinary reservation in the shared bucket, so every
other process sees it as reserved; locally a call is admitted only if it fits in what the lease
holds minus what was spent and is in flight. A sync books the spend and, in the same atomic
script, re-sizes the hold. Each sync carries a sequence number, so a sync whose reply was lost is
re-sent first and answered rather than applied twice. A crashed process's lease is reclaimed by
TTL like any reservation (spend it made since its last sync is lost with it, as is the cost of a
call in flight when a worker dies without a lease).

What it costs a tenant near its limit: budget leased by one process is not available to the
others until that process gives it back (idle for ``lease_idle_s``) or its lease is reclaimed, so
near the limit some requests may be refused (429, Retry-After <= 1 s) although the tenant has not
spent it all. Each top-up takes at most half of the room left, so slices shrink as the window fills.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._backend import BucketState, LeaseReply, LeaseSync

T = TypeVar("T")


class Lease:
    """This process's slice of one tenant's window. Counters are integer nano-dollars."""

    __slots__ = (
        "key_hash", "lease_id", "seq", "held", "spent", "steps", "inflight", "used", "synced",
        "state", "lock", "busy", "shrinking", "unsure", "dead", "_cond", "_waiters",
    )  # fmt: skip

    def __init__(self, key_hash: str) -> None:
        self.key_hash = key_hash
        self.lease_id = "L" + secrets.token_hex(12)
        self.seq = 0
        self.held = 0  # what the backend holds for this lease (as of the last sync)
        self.spent = 0  # committed here since the last sync
        self.steps = 0  # calls started here since the last sync
        self.inflight = 0  # reserved by calls still running
        self.used = time.monotonic()
        self.synced = 0.0
        self.state: BucketState | None = None  # the bucket as of the last sync
        self.lock = threading.Lock()
        self.busy = False  # a sync is in flight (one at a time)
        self.shrinking = False  # a give-back is in flight: nothing is taken meanwhile
        self.unsure: LeaseSync | None = None  # sent, outcome unknown: re-sent before anything else
        self.dead = False  # retired (long idle, holding nothing): the pool makes a new one
        self._cond = threading.Condition(self.lock)
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    # -- local decisions (no I/O) --------------------------------------------------------------------

    def take(self, amount: int) -> bool:
        """Reserve ``amount`` from the lease if it holds enough (a zero amount needs some room)."""
        with self.lock:
            return self._take(amount)

    def _take(self, amount: int) -> bool:
        if self.shrinking or self.dead:
            return False
        free = self.held - self.spent - self.inflight
        if amount > free or (amount == 0 and free <= 0):
            return False
        self.inflight += amount
        self.steps += 1
        self.used = time.monotonic()
        return True

    def give(self, amount: int, actual: int) -> None:
        """A call that reserved ``amount`` from the lease is over and cost ``actual``."""
        with self.lock:
            self.inflight -= amount
            self.spent += actual

    def has_room(self) -> bool:
        with self.lock:
            return not self.shrinking and self.held - self.spent - self.inflight > 0

    # -- syncs ---------------------------------------------------------------------------------------

    def acquire(self) -> None:
        with self.lock:
            while self.busy:
                self._cond.wait()
            self.busy = True

    async def aacquire(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with self.lock:
                if not self.busy:
                    self.busy = True
                    return
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, waiter))
            await waiter

    def release(self) -> None:
        with self.lock:
            self.busy = False
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            loop.call_soon_threadsafe(_wake, waiter)

    def plan(self, ask: int, size: int, shrink: bool) -> tuple[LeaseSync, bool]:
        """The next sync to send (the caller holds the sync slot): (sync, is it a re-send).

        The hold is topped up to ``size`` (the lease), never past it: what is kept unspent is at
        most ``size`` and the slice asked is only what is missing, so however many periodic syncs
        a long-lived lease makes, it holds at most ``size`` + the running calls' reservations +
        the one ``ask`` (reserved for its caller at once)."""
        with self.lock:
            if self.unsure is not None:
                return self.unsure, True
            self.seq += 1
            inflight = self.inflight
            if shrink:
                keep, extra = inflight, 0
            elif ask >= 0:
                # A call needs more than is left: hand the unspent fragment back and ask afresh,
                # so a leftover smaller than the call cannot block the window's last cents.
                keep, extra = inflight, max(0, size - inflight)
            else:
                keep = max(inflight, min(self.held - self.spent, max(size, inflight)))
                extra = max(0, size - keep)
            sync = LeaseSync(self.lease_id, self.seq, self.spent, self.steps, inflight, keep, ask, extra)
            self.unsure = sync
            self.shrinking = shrink
            return sync, False

    def apply(self, sync: LeaseSync, reply: LeaseReply, limit: int, take: bool) -> bool:
        """Adopt the backend's answer to ``sync``; with ``take``, reserve its ``ask`` if it fits."""
        with self.lock:
            self.unsure = None
            self.shrinking = False
            self.held = reply.hold
            self.spent -= sync.booked
            self.steps -= sync.steps
            self.state = reply.state
            self.synced = time.monotonic()
            if not take or sync.ask < 0:
                return False
            if sync.ask == 0 and reply.state.spent >= limit:
                return False
            return self._take(sync.ask)

    def retire(self, now: float, idle_s: float) -> bool:
        """Mark the lease dead if it holds and owes nothing and has been idle for ``idle_s``."""
        with self.lock:
            if (
                self.busy
                or self.held
                or self.inflight
                or self.spent
                or self.steps
                or self.unsure is not None
                or now - self.used < idle_s
            ):
                return False
            self.dead = True
            return True

    def idle_and_empty(self) -> bool:
        with self.lock:
            return not (self.held or self.spent or self.steps or self.inflight or self.unsure)

    def due(self, now: float, sync_s: float, renew_s: float, idle_s: float) -> str | None:
        """What the keeper thread should do with this lease now: shrink, sync or nothing."""
        with self.lock:
            if self.busy:
                return None
            if self.unsure is not None or ((self.spent or self.steps) and now - self.synced >= sync_s):
                return "sync"
            if self.held > self.inflight and now - self.used >= idle_s:
                return "shrink"
            if self.held and now - self.synced >= renew_s:
                return "sync"
            return None


_tasks: set[asyncio.Task[Any]] = set()  # strong references: the loop keeps only weak ones


def background(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task for backend I/O that must finish even if the request awaiting it is cancelled."""
    task = asyncio.ensure_future(coro)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    return task


async def drain_background() -> None:
    """Wait for the backend I/O still running in the background on this loop (before closing the
    clients it uses: a shielded settle of a cancelled request, say)."""
    loop = asyncio.get_running_loop()
    pending = [task for task in _tasks if not task.done() and task.get_loop() is loop]
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


def _wake(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(None)
