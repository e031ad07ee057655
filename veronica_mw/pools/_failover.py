"""What a budget pool does when its shared backend (Redis) is unreachable, and how it catches up.

``on_backend_error="deny"``: every reservation and admission is refused until the backend answers
again (fail closed: nothing is ever spent that the shared count has not approved).
``"local"``: this process keeps serving from an in-process bucket seeded with the last state it saw
from the backend, so each process stays within the limit on its own (N processes: at most N times
the remaining budget during the outage).

What is down: an error that concerns one operation's keys (a Redis Cluster master that died or is
being replaced, an ``OOM`` reply: ``BackendUnavailable.key_scoped``) marks only that tenant bucket
down for ``retry_s``; other tenants, whose keys live elsewhere, keep being served. A standalone
server that cannot be reached marks the whole backend down.

Either way, spend that happened while the backend was away is never lost nor counted twice: commits
of reservations held in the backend are queued and replayed with the idempotent settle script
(keyed by reservation id), and spend booked locally is pushed with the idempotent absorb script
(keyed by a batch token) as soon as the backend answers again, before anything else is decided.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from ._backend import (
    BackendCorrupted,
    BackendUnavailable,
    BucketState,
    BudgetBackend,
    LeaseReply,
    LeaseSync,
    LocalBudgetBackend,
    Op,
)

logger = logging.getLogger("veronica_mw")
T = TypeVar("T")


class Outcome(NamedTuple):
    """A backend answer and where it came from: ``backend``, ``local`` (fallback), ``down`` (refused,
    backend unreachable) or ``corrupt`` (refused, stored state unusable)."""

    state: BucketState | None
    source: str
    local: LocalBudgetBackend | None = None


class _SyncAsAsync:
    """The coroutine methods of a backend that has only the sync ones."""

    def __init__(self, backend: BudgetBackend) -> None:
        self._backend = backend

    async def areserve(self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int) -> BucketState:
        return self._backend.reserve(op, res_id, amount, limit, limit_steps)

    async def asettle(self, op: Op, res_id: str, actual: int) -> bool:
        return self._backend.settle(op, res_id, actual)

    async def alease(self, op: Op, sync: LeaseSync, limit: int) -> LeaseReply:
        return self._backend.lease(op, sync, limit)  # type: ignore[attr-defined, no-any-return]


class Failover:
    """Wraps a pool's backend with outage detection, the fallback and the replay queue."""

    def __init__(
        self, backend: BudgetBackend, mode: str, retry_s: float, name: str, clock_op: Callable[[], Op]
    ) -> None:
        self.backend = backend
        # A backend without the coroutine methods (a user's own) is called synchronously.
        self._abackend: Any = (
            backend if callable(getattr(backend, "areserve", None)) else _SyncAsAsync(backend)
        )
        self._clock_op = clock_op  # an Op for "now" (current window), for replays nobody asked for
        self._timer: threading.Timer | None = None
        self.mode = mode
        self.retry_s = retry_s
        self.name = name
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._down_keys: dict[str, float] = {}  # bucket -> monotonic time until it is left alone
        self._episodes: dict[str, LocalBudgetBackend] = {}  # bucket -> its fallback ("local")
        self._last: dict[str, BucketState] = {}
        self._settles: dict[str, tuple[Op, int]] = {}
        self._spend: dict[tuple[str, int], list[int]] = {}  # (bucket, window) -> [usd, steps]
        self._batches: dict[str, tuple[str, int, int, int]] = {}  # token -> (bucket, window, usd, steps)

    @property
    def down(self) -> bool:
        """The whole backend is marked down (a key-scoped error marks only its bucket)."""
        return time.monotonic() < self._down_until

    def is_down(self, bucket: str) -> bool:
        if not (self._down_until or self._down_keys):  # the common case: nothing is down
            return False
        now = time.monotonic()
        return now < self._down_until or now < self._down_keys.get(bucket, 0.0)

    @property
    def pending(self) -> bool:
        return bool(self._settles or self._spend or self._batches)

    # -- calls through the shared backend ----------------------------------------------------------

    def _shared(self, op: Op, fn: Callable[[], T]) -> T:
        if self.is_down(op.bucket):
            raise BackendUnavailable("backend marked unavailable")
        try:
            if self.pending:
                self.replay(op)
            result = fn()
        except BackendUnavailable as exc:
            self._mark_down(exc, op.bucket)
            raise
        self._mark_up(op.bucket)
        return result

    def _mark_down(self, exc: BackendUnavailable, bucket: str) -> None:
        until = time.monotonic() + self.retry_s
        with self._lock:
            if exc.key_scoped:
                first = not self._down_keys and not self._down_until
                self._down_keys[bucket] = until
            else:
                first = self._down_until == 0.0
                self._down_until = until
        if first:
            what = "tenants whose keys are on the failing node" if exc.key_scoped else "its backend"
            logger.warning(
                "veronica_mw: budget pool %r lost %s (%s); on_backend_error=%r",
                self.name,
                what,
                exc,
                self.mode,
            )

    def _mark_up(self, bucket: str) -> None:
        if not (self._down_until or self._down_keys):
            return
        with self._lock:
            was_down = bool(self._down_until or self._down_keys)
            if self._down_until:  # the server answered: all of it is back
                self._down_until = 0.0
                self._down_keys.clear()
                self._episodes.clear()
            elif bucket in self._down_keys:
                del self._down_keys[bucket]
                self._episodes.pop(bucket, None)
            back = was_down and not (self._down_until or self._down_keys)
        if back:
            logger.warning("veronica_mw: budget pool %r backend is back; outage spend reconciled", self.name)

    def _remember(self, bucket: str, state: BucketState) -> BucketState:
        if len(self._last) > 100_000:
            self._last.clear()
        self._last[bucket] = state
        return state

    def _local(self, op: Op) -> LocalBudgetBackend:
        with self._lock:
            local = self._episodes.get(op.bucket)
            if local is None:
                local = self._episodes[op.bucket] = LocalBudgetBackend()
                # Start from what the shared backend last said (reservations counted as spent):
                # this process then cannot spend more than was left when contact was lost.
                last = self._last.get(op.bucket)
                if last is not None:
                    local.absorb(op, last.win, "seed:" + op.bucket, last.spent + last.reserved, last.steps)
        return local

    def _add_spend(self, op: Op, usd: int, steps: int) -> None:
        with self._lock:
            entry = self._spend.setdefault((op.bucket, op.win), [0, 0])
            entry[0] += usd
            entry[1] += steps
        self._schedule()

    def _schedule(self) -> None:
        # Push queued spend soon even if this process gets no more traffic: an idle worker must not
        # sit on outage spend that the other workers need to see.
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(max(self.retry_s, 0.05), self._tick)
            self._timer.daemon = True
        self._timer.start()

    def _tick(self) -> None:
        with self._lock:
            self._timer = None
        if self.pending:
            self._try_replay(self._clock_op())
        if self.pending:
            self._schedule()

    # -- the pool's operations ----------------------------------------------------------------------

    def state(self, op: Op) -> Outcome:
        try:
            return Outcome(
                self._remember(op.bucket, self._shared(op, lambda: self.backend.state(op))), "backend"
            )
        except BackendCorrupted as exc:
            return self._corrupt(op, exc)
        except BackendUnavailable:
            return self._fallback_state(op)

    async def astate(self, op: Op) -> Outcome:
        if self.is_down(op.bucket):
            return self._fallback_state(op)
        try:
            if self.pending:
                await asyncio.to_thread(self.replay, op)
            state = await self.backend.astate(op)
        except BackendCorrupted as exc:
            return self._corrupt(op, exc)
        except BackendUnavailable as exc:
            self._mark_down(exc, op.bucket)
            return self._fallback_state(op)
        self._mark_up(op.bucket)
        return Outcome(self._remember(op.bucket, state), "backend")

    def _fallback_state(self, op: Op) -> Outcome:
        if self.mode == "deny":
            return Outcome(None, "down")
        local = self._local(op)
        return Outcome(local.state(op), "local", local)

    def _corrupt(self, op: Op, exc: BaseException) -> Outcome:
        logger.error(
            "veronica_mw: budget pool %r: bucket %s refused, stored state is corrupted: %s",
            self.name,
            op.bucket,
            exc,
        )
        return Outcome(None, "corrupt")

    def reserve(self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int) -> Outcome:
        try:
            state = self._shared(op, lambda: self.backend.reserve(op, res_id, amount, limit, limit_steps))
            return Outcome(self._remember(op.bucket, state), "backend")
        except BackendCorrupted as exc:
            return self._corrupt(op, exc)
        except BackendUnavailable:
            return self._fallback_reserve(op, res_id, amount, limit, limit_steps)

    async def areserve(self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int) -> Outcome:
        """Like :meth:`reserve`, awaiting the backend (``redis.asyncio``) instead of blocking."""
        if self.is_down(op.bucket):
            return self._fallback_reserve(op, res_id, amount, limit, limit_steps)
        try:
            if self.pending:  # catching up after an outage: rare, so a thread is fine
                await asyncio.to_thread(self.replay, op)
            state = await self._abackend.areserve(op, res_id, amount, limit, limit_steps)
        except BackendCorrupted as exc:
            return self._corrupt(op, exc)
        except BackendUnavailable as exc:
            self._mark_down(exc, op.bucket)
            return self._fallback_reserve(op, res_id, amount, limit, limit_steps)
        self._mark_up(op.bucket)
        return Outcome(self._remember(op.bucket, state), "backend")

    def _fallback_reserve(self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int) -> Outcome:
        if self.mode == "deny":
            return Outcome(None, "down")
        local = self._local(op)
        state = local.reserve(op, res_id, amount, limit, limit_steps)
        if state.ok:
            self._add_spend(op, 0, 1)
        return Outcome(state, "local", local)

    def settle(self, op: Op, res_id: str, actual: int, local: LocalBudgetBackend | None) -> None:
        if local is not None:
            if local.settle(op, res_id, actual):
                self._add_spend(op, actual, 0)
            if not self.is_down(op.bucket):
                self._try_replay(op)
            return
        try:
            self._shared(op, lambda: self.backend.settle(op, res_id, actual))
        except BackendCorrupted as exc:
            self._corrupt(op, exc)
        except BackendUnavailable:
            with self._lock:
                self._settles[res_id] = (op, actual)
            self._schedule()

    async def asettle(self, op: Op, res_id: str, actual: int, local: LocalBudgetBackend | None) -> None:
        """Like :meth:`settle`, awaiting the backend; queued spend is pushed by the replay timer."""
        if local is not None:
            if local.settle(op, res_id, actual):
                self._add_spend(op, actual, 0)  # schedules the push to the shared backend
            return
        if not self.is_down(op.bucket):
            try:
                if self.pending:
                    await asyncio.to_thread(self.replay, op)
                await self._abackend.asettle(op, res_id, actual)
            except BackendCorrupted as exc:
                self._corrupt(op, exc)
                return
            except BackendUnavailable as exc:
                self._mark_down(exc, op.bucket)
            else:
                self._mark_up(op.bucket)
                return
        with self._lock:
            self._settles[res_id] = (op, actual)
        self._schedule()

    def charge(self, op: Op, usd: int) -> None:
        """Book spend that has no reservation (used only when a settle matches none)."""
        self._add_spend(op, usd, 0)
        self._try_replay(op)

    def lease(self, op: Op, sync: LeaseSync, limit: int) -> LeaseReply | None:
        """Sync a lease through the shared backend; None when it is down or its state corrupted
        (the sync's outcome is then unknown: the lease re-sends it)."""
        try:
            reply = self._shared(op, lambda: self.backend.lease(op, sync, limit))  # type: ignore[attr-defined]
        except BackendCorrupted as exc:
            self._corrupt(op, exc)
            return None
        except BackendUnavailable:
            return None
        self._remember(op.bucket, reply.state)
        return reply  # type: ignore[no-any-return]

    async def alease(self, op: Op, sync: LeaseSync, limit: int) -> LeaseReply | None:
        if self.is_down(op.bucket):
            return None
        try:
            if self.pending:
                await asyncio.to_thread(self.replay, op)
            reply: LeaseReply = await self._abackend.alease(op, sync, limit)
        except BackendCorrupted as exc:
            self._corrupt(op, exc)
            return None
        except BackendUnavailable as exc:
            self._mark_down(exc, op.bucket)
            return None
        self._mark_up(op.bucket)
        self._remember(op.bucket, reply.state)
        return reply

    def charge_later(self, op: Op, usd: int) -> None:
        """Like :meth:`charge`, but pushed by the replay timer (no I/O on the caller's thread)."""
        self._add_spend(op, usd, 0)

    def _try_replay(self, op: Op) -> None:
        try:
            self._shared(op, lambda: None)
        except BackendUnavailable:
            pass

    def replay(self, op: Op) -> None:
        """Push everything queued during an outage; raises BackendUnavailable if it is still down.

        Each item is removed only after the backend confirmed it; a retried item is harmless
        (settle is keyed by reservation id, absorb by batch token). Items of a bucket whose keys'
        node is down stay queued (and are skipped until it is retried); the rest goes through.
        """
        with self._lock:
            settles = list(self._settles.items())
            for (bucket, win), (usd, steps) in self._spend.items():
                if usd or steps:
                    self._batches[secrets.token_hex(12)] = (bucket, win, usd, steps)
            self._spend.clear()
            batches = list(self._batches.items())
        for res_id, (settle_op, actual) in settles:
            if self._replayed(settle_op, functools.partial(self.backend.settle, settle_op, res_id, actual)):
                with self._lock:
                    self._settles.pop(res_id, None)
        for token, (bucket, win, usd, steps) in batches:
            current = Op(bucket, op.win, op.now_ms, op.key_ttl_ms, op.reservation_ttl_ms)
            if self._replayed(
                current, functools.partial(self.backend.absorb, current, win, token, usd, steps)
            ):
                with self._lock:
                    self._batches.pop(token, None)

    def _replayed(self, op: Op, fn: Callable[[], object]) -> bool:
        """Run one queued item: True once it is done with (applied, or its state is corrupted)."""
        if self.is_down(op.bucket):
            return False
        try:
            fn()
        except BackendCorrupted as exc:
            self._corrupt(op, exc)
        except BackendUnavailable as exc:
            if not exc.key_scoped:
                raise
            self._mark_down(exc, op.bucket)
            return False
        return True
