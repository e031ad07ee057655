"""What every budget-pool backend shares: budget windows, integer money, the backend protocol and the
in-process :class:`LocalBudgetBackend`.

Money is counted in integer nano-dollars (1e-9 USD) everywhere a backend stores it, so sums are exact
in Python and in Redis Lua (whose numbers are doubles: integers are exact up to 2**53, i.e. $9M per
window) and no float drift can let a pool creep past its limit.

Semantics shared by all backends (the Redis Lua scripts implement exactly the same rules):

- A bucket (one tenant of one pool) holds ``win`` (the current window id), ``spent`` (committed),
  ``reserved`` (sum of open reservations) and ``steps`` (calls started in this window).
- Window reset: whenever an operation names a window id newer than the stored one, ``spent`` and
  ``steps`` drop to 0 in the same atomic step. Open reservations carry over: a call reserved just
  before the reset and committed after it is booked in the window it commits in, so no commit is lost.
- reserve(amount > 0) succeeds iff ``spent + reserved + amount <= limit``; reserve(0) succeeds iff
  ``spent < limit`` (an exhausted window refuses even free calls). Each success counts one step.
- A reservation not settled within its TTL (its worker crashed) is reclaimed: its amount leaves
  ``reserved`` and it is marked, so a late commit still books the actual cost exactly once.
- settle is idempotent per reservation id; absorb (replaying spend made while the shared backend
  was unreachable) is idempotent per token.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import NamedTuple, Protocol

NANO = 1_000_000_000
MAX_NANO = 2**53 - 1
_NAMED_WINDOWS = {"minute": 60.0, "hour": 3600.0, "day": 86400.0, "week": 604800.0}


def to_nano(usd: float) -> int:
    """USD as integer nano-dollars (nearest; the kernel has already validated the float)."""
    return min(MAX_NANO, round(usd * NANO))


class BackendUnavailable(Exception):
    """The shared backend could not be reached or did not answer (the op may or may not have run).

    ``key_scoped``: the error concerns the operation's keys only (one cluster master, an ``OOM``
    reply), so other tenants' buckets may still be served; otherwise the whole backend is down.
    """

    def __init__(self, message: str = "", *, key_scoped: bool = False) -> None:
        super().__init__(message)
        self.key_scoped = key_scoped


class BackendCorrupted(Exception):
    """A stored value is not a non-negative integer: nothing can be decided safely from it."""


class BucketState(NamedTuple):
    """A backend's answer: ``ok`` (for reserve), the window id it holds and its counters."""

    ok: bool
    win: int
    spent: int
    reserved: int
    steps: int


@dataclass(frozen=True, slots=True)
class Window:
    """One budget window: integer id (monotonic), start and end in Unix seconds."""

    id: int
    start: float
    end: float


class WindowSpec:
    """Fixed windows of ``seconds`` aligned to the Unix epoch (so ``"day"`` is a UTC day), or
    calendar months in UTC (``"month"``)."""

    __slots__ = ("seconds", "label")

    def __init__(self, window_s: float | str) -> None:
        if isinstance(window_s, str):
            if window_s == "month":
                self.seconds = 0.0
                self.label = "month"
                return
            if window_s not in _NAMED_WINDOWS:
                raise ValueError(f"window_s must be seconds or one of {sorted([*_NAMED_WINDOWS, 'month'])}")
            window_s = _NAMED_WINDOWS[window_s]
        if isinstance(window_s, bool) or not isinstance(window_s, (int, float)):
            raise TypeError(f"window_s must be a number of seconds or a name, got {type(window_s).__name__}")
        if not math.isfinite(window_s) or window_s < 0.001:
            raise ValueError(f"window_s must be finite and >= 0.001, got {window_s!r}")
        self.seconds = float(window_s)
        self.label = f"{round(self.seconds * 1000)}ms"

    def at(self, now: float) -> Window:
        if self.seconds:
            index = math.floor(now / self.seconds)
            return Window(index, index * self.seconds, (index + 1) * self.seconds)
        day = datetime.fromtimestamp(now, timezone.utc)
        start = datetime(day.year, day.month, 1, tzinfo=timezone.utc)
        end = datetime(day.year + day.month // 12, day.month % 12 + 1, 1, tzinfo=timezone.utc)
        return Window(day.year * 12 + day.month - 1, start.timestamp(), end.timestamp())


class Op(NamedTuple):
    """Where and when an operation happens: the bucket name, the caller's window and clock (ms) and
    how long keys and reservations live. (A named tuple: one is made per reserve and settle.)"""

    bucket: str
    win: int
    now_ms: int
    key_ttl_ms: int
    reservation_ttl_ms: int


class BudgetBackend(Protocol):
    """Storage for budget buckets. Every method is one atomic step; see the module docstring."""

    def state(self, op: Op) -> BucketState: ...

    async def astate(self, op: Op) -> BucketState: ...

    def reserve(self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int) -> BucketState: ...

    def settle(self, op: Op, res_id: str, actual: int) -> bool: ...

    # Optional coroutine versions (awaited by the async path; without them the sync ones are used).
    async def areserve(
        self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int
    ) -> BucketState: ...

    async def asettle(self, op: Op, res_id: str, actual: int) -> bool: ...

    def absorb(self, op: Op, target_win: int, token: str, usd: int, steps: int) -> bool: ...

    def reset(self, op: Op) -> None: ...


class LeaseReply(NamedTuple):
    """A lease sync's answer: the amount now held for the lease and the bucket after the sync."""

    hold: int
    state: BucketState


class LeaseSync(NamedTuple):
    """One sync of a lease (see :mod:`veronica_mw.pools._lease`): ``booked`` spend and ``steps``
    to commit, ``inflight`` (owed to running calls), ``keep`` (to hold on to), ``ask`` (one more
    reservation that must fit, -1: none), ``extra`` (slice wanted on top, at most half the room).
    ``seq`` makes a retried sync an answer instead of a second application."""

    lease_id: str
    seq: int
    booked: int
    steps: int
    inflight: int
    keep: int
    ask: int
    extra: int


class _Bucket:
    __slots__ = ("win", "spent", "reserved", "steps", "holds", "expiry", "expires_ms", "seqs", "due_ms")

    def __init__(self) -> None:
        self.win = 0
        self.spent = 0
        self.reserved = 0
        self.steps = 0
        self.holds: dict[str, int | None] = {}  # id -> amount; None = reclaimed, awaiting a late settle
        self.expiry: dict[str, int] = {}  # id -> ms when it is reclaimed (or, if reclaimed, forgotten)
        self.expires_ms = 0  # ms after which the bucket may be forgotten
        self.seqs: dict[str, int] = {}  # lease id -> last applied sync
        # At most the earliest time in ``expiry`` (a lower bound, lowered on every add): before it
        # nothing is due, so an operation need not scan the open reservations.
        self.due_ms = 0


class LocalBudgetBackend:
    """In-process backend (the default): one lock, so it is safe from threads and from asyncio tasks
    alike (no await happens while the lock is held). Bounds one process only."""

    def __init__(self, *, max_buckets: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._tokens: dict[str, int] = {}
        self._max_buckets = max_buckets

    def _bucket(self, op: Op) -> _Bucket:
        bucket = self._buckets.get(op.bucket)
        if bucket is None:
            if len(self._buckets) >= self._max_buckets:
                self._evict(op.now_ms)
            bucket = self._buckets[op.bucket] = _Bucket()
        if op.win > bucket.win:
            bucket.win, bucket.spent, bucket.steps = op.win, 0, 0
        expires = op.now_ms + op.key_ttl_ms
        if expires > bucket.expires_ms:
            bucket.expires_ms = expires  # expiry, like PEXPIRE
        if bucket.expiry and op.now_ms >= bucket.due_ms:
            self._reclaim(bucket, op)
        return bucket

    def _evict(self, now_ms: int) -> None:
        # Like a Redis key TTL: only buckets whose window (plus reservation grace) is over may go;
        # dropping a live one would hand its tenant a fresh budget.
        for name in [n for n, b in self._buckets.items() if b.expires_ms < now_ms]:
            del self._buckets[name]
        self._tokens = {t: exp for t, exp in self._tokens.items() if exp > now_ms}

    @staticmethod
    def _due(bucket: _Bucket, res_id: str, when: int) -> None:
        if not bucket.expiry or when < bucket.due_ms:
            bucket.due_ms = when
        bucket.expiry[res_id] = when

    @staticmethod
    def _reclaim(bucket: _Bucket, op: Op) -> None:
        due = None
        for res_id, when in list(bucket.expiry.items()):
            if when > op.now_ms:
                due = when if due is None or when < due else due
                continue
            amount = bucket.holds.get(res_id)
            if amount is None:
                bucket.holds.pop(res_id, None)
                bucket.seqs.pop(res_id, None)
                del bucket.expiry[res_id]
            else:
                bucket.reserved = max(0, bucket.reserved - amount)
                bucket.holds[res_id] = None
                when = bucket.expiry[res_id] = op.now_ms + op.reservation_ttl_ms
                due = when if due is None or when < due else due
        bucket.due_ms = 0 if due is None else due

    def _view(self, bucket: _Bucket, ok: bool) -> BucketState:
        return BucketState(ok, bucket.win, bucket.spent, bucket.reserved, bucket.steps)

    def state(self, op: Op) -> BucketState:
        with self._lock:
            return self._view(self._bucket(op), True)

    async def astate(self, op: Op) -> BucketState:
        return self.state(op)

    def reserve(self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int) -> BucketState:
        with self._lock:
            b = self._bucket(op)
            if res_id in b.holds:
                return self._view(b, True)
            if limit_steps >= 0 and b.steps >= limit_steps:
                ok = False
            elif amount == 0:
                ok = b.spent < limit
            else:
                ok = b.spent + b.reserved + amount <= limit
            if ok:
                b.reserved += amount
                b.steps += 1
                b.holds[res_id] = amount
                self._due(b, res_id, op.now_ms + op.reservation_ttl_ms)
            return self._view(b, ok)

    async def areserve(self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int) -> BucketState:
        return self.reserve(op, res_id, amount, limit, limit_steps)

    async def asettle(self, op: Op, res_id: str, actual: int) -> bool:
        return self.settle(op, res_id, actual)

    def settle(self, op: Op, res_id: str, actual: int) -> bool:
        with self._lock:
            b = self._bucket(op)
            if res_id not in b.holds:
                return False
            amount = b.holds.pop(res_id)
            b.expiry.pop(res_id, None)
            if amount is not None:
                b.reserved = max(0, b.reserved - amount)
            b.spent = min(MAX_NANO, b.spent + actual)
            return True

    def lease(self, op: Op, sync: LeaseSync, limit: int) -> LeaseReply:
        """Sync one lease (the rules of the Redis ``LEASE`` script)."""
        with self._lock:
            b = self._bucket(op)
            present = sync.lease_id in b.holds
            amount = b.holds.get(sync.lease_id)
            held = amount or 0
            if sync.seq <= b.seqs.get(sync.lease_id, 0):
                return LeaseReply(held, self._view(b, True))
            b.reserved = max(0, b.reserved - held)
            b.spent = min(MAX_NANO, b.spent + sync.booked)
            b.steps += sync.steps
            hold = sync.keep
            if not present or amount is None:  # nothing held: only the in-flight calls are owed
                fits = limit - b.spent - b.reserved - sync.inflight
                hold = sync.inflight + max(0, min(sync.keep - sync.inflight, fits))
            if sync.ask > 0 and b.spent + b.reserved + hold + sync.ask <= limit:
                hold += sync.ask
            if sync.extra > 0:
                room = limit - b.spent - b.reserved - hold
                if room >= 2:
                    hold += min(sync.extra, room // 2)
            b.seqs[sync.lease_id] = sync.seq
            if hold > 0:
                b.holds[sync.lease_id] = hold
                self._due(b, sync.lease_id, op.now_ms + op.reservation_ttl_ms)
            else:
                b.holds.pop(sync.lease_id, None)
                b.expiry.pop(sync.lease_id, None)
            b.reserved += hold
            return LeaseReply(hold, self._view(b, True))

    async def alease(self, op: Op, sync: LeaseSync, limit: int) -> LeaseReply:
        return self.lease(op, sync, limit)

    def absorb(self, op: Op, target_win: int, token: str, usd: int, steps: int) -> bool:
        with self._lock:
            b = self._bucket(op)
            if token in self._tokens:
                return False
            self._tokens[token] = op.now_ms + op.key_ttl_ms
            if b.win == target_win:
                b.spent = min(MAX_NANO, b.spent + usd)
                b.steps += steps
            return True

    def reset(self, op: Op) -> None:
        """Zero the current window's spend and steps; open reservations stay."""
        with self._lock:
            b = self._bucket(op)
            b.spent, b.steps = 0, 0
