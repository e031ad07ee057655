"""``TenantLedger``: the budget parent of one request (or run) of one tenant of a pool.

Each call reserves in the tenant's window before it runs and settles after it: through this
process's lease when the pool leases (in memory, see :mod:`._lease`), else one backend round trip
each. The coroutine versions await the backend (``redis.asyncio``) and are safe to cancel.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import secrets
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from ..kernel._validate import check_number
from ..kernel.context import PendingContext, current_context
from ._backend import LocalBudgetBackend, Op, to_nano
from ._failover import Failover, Outcome
from ._lease import Lease, background

if TYPE_CHECKING:
    from ._backend import BucketState

logger = logging.getLogger("veronica_mw")
# Reservation ids of in-process pools only need to be unique in this process: a counter, not a
# random token (those are kept for backends shared between processes).
_local_ids = itertools.count(1)


class _Hold:
    __slots__ = ("res_id", "amount", "local", "lease")

    def __init__(
        self, res_id: str, amount: int, local: LocalBudgetBackend | None, lease: Lease | None = None
    ) -> None:
        self.res_id, self.amount, self.local, self.lease = res_id, amount, local, lease


class TenantLedger:
    """The :class:`~veronica_mw.AsyncBudgetParent` of one request (or run) of one tenant.

    The kernel calls :meth:`reserve` before each call and :meth:`settle` after it, synchronously
    and possibly from several threads at once; its coroutine API awaits :meth:`areserve` and
    :meth:`asettle` instead (``redis.asyncio``: the event loop is never blocked). Settles are
    matched to reservations by amount: the kernel settles exactly the amount it reserved, and
    equal amounts of one ledger are interchangeable.
    """

    # ``pool``: the BudgetPool (typed Any: budget_pool imports this module, no import circle).
    def __init__(self, pool: Any, key_hash: str) -> None:
        self._pool = pool
        self.key_hash = key_hash
        self._leases = pool._leases
        self._lock = threading.Lock()
        self._holds: dict[int, deque[_Hold]] = {}
        self._retry_after: float | None = None
        self._noted: set[str] = set()
        self.refusal_status: int | None = None
        self.refusal_detail = ""

    @property
    def blocking_free(self) -> bool:
        """True for an in-process pool: reserve/settle never wait for I/O, so the kernel's
        coroutine API calls them directly instead of awaiting areserve/asettle."""
        in_process: bool = self._pool._in_process
        return in_process

    # -- reserve ---------------------------------------------------------------------------------

    def reserve(self, amount_usd: float) -> bool:
        """Reserve ``amount_usd`` in the tenant's window; False refuses the call (nothing held)."""
        amount = self._amount(amount_usd)
        if amount < 0:
            return False
        leases = self._leases
        if leases is not None:
            lease: Lease | None = leases.get(self.key_hash)
            if lease is not None and lease.take(amount):
                return self._held(_Hold("", amount, None, lease))
            lease, reply = leases.sync(self.key_hash, amount)
            if lease is not None:
                return self._held(_Hold("", amount, None, lease))
            if reply is not None:  # the backend answered: it does not fit
                _, now, end = self._pool._op(self.key_hash)
                return self._too_much(reply.state, amount, now, end)
            # Backend down or corrupted: the per-call path applies on_backend_error.
        pool = self._pool
        if pool._in_process:  # in memory: nothing to fail over from, nothing to replay
            res_id = f"r{next(_local_ids)}"
            op, now, end = pool._op(self.key_hash)
            state = pool.backend.reserve(op, res_id, amount, pool._limit, pool._steps)
            if state.ok:
                return self._held(_Hold(res_id, amount, None))
            return self._too_much(state, amount, now, end)
        res_id = secrets.token_hex(12)
        op, now, end = self._pool._op(self.key_hash)
        outcome = self._pool._failover.reserve(op, res_id, amount, self._pool._limit, self._pool._steps)
        return self._reserved(outcome, res_id, amount, now, end)

    async def areserve(self, amount_usd: float) -> bool:
        """Like :meth:`reserve`, awaiting the backend instead of blocking.

        Cancelled while the backend answers, a reservation made meanwhile is given back.
        """
        if self._pool._in_process:  # nothing to wait for: the sync path neither blocks nor suspends
            return self.reserve(amount_usd)
        amount = self._amount(amount_usd)
        if amount < 0:
            return False
        leases = self._leases
        if leases is not None:
            lease: Lease | None = leases.get(self.key_hash)
            if lease is not None and lease.take(amount):  # the common case: no I/O, no await
                return self._held(_Hold("", amount, None, lease))
            lease, reply = await leases.async_sync(self.key_hash, amount)
            if lease is not None:
                return self._held(_Hold("", amount, None, lease))
            if reply is not None:
                _, now, end = self._pool._op(self.key_hash)
                return self._too_much(reply.state, amount, now, end)
        res_id = secrets.token_hex(12)
        op, now, end = self._pool._op(self.key_hash)
        failover = self._pool._failover
        # The backend's I/O runs in its own task, shielded: a request cancelled meanwhile neither
        # interrupts a Redis command half-way (a broken connection) nor loses what it did.
        task = background(failover.areserve(op, res_id, amount, self._pool._limit, self._pool._steps))
        try:
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(lambda t: _undo(t, failover, op, res_id))
            raise
        return self._reserved(outcome, res_id, amount, now, end)

    def _amount(self, amount_usd: float) -> int:
        try:
            return to_nano(check_number("amount_usd", amount_usd))
        except (TypeError, ValueError) as exc:
            self._refuse(503, f"invalid reservation: {exc}", None)
            return -1

    def _held(self, hold: _Hold) -> bool:
        with self._lock:
            self._holds.setdefault(hold.amount, deque()).append(hold)
        return True

    def _reserved(self, outcome: Outcome, res_id: str, amount: int, now: float, end: float) -> bool:
        state = outcome.state
        if outcome.source == "local":
            self._note(
                "budget_backend_fallback", "budget backend unreachable; serving from this process's bucket"
            )
        if state is not None and state.ok:
            return self._held(_Hold(res_id, amount, outcome.local))
        if outcome.source == "down":
            self._note("budget_backend_unavailable", "budget backend unreachable; on_backend_error='deny'")
            return self._refuse(503, "budget backend unavailable", self._pool.backend_retry_s)
        if state is None:
            return self._refuse(503, "tenant budget state is corrupted", None)
        return self._too_much(state, amount, now, end)

    def _too_much(self, state: BucketState, amount: int, now: float, end: float) -> bool:
        # Only in-flight reservations (or other processes' leases) stand in the way: retrying soon
        # may succeed.
        blocked_by_holds = not self._pool._exhausted(state) and state.spent + amount <= self._pool._limit
        wait = min(1.0, end - now) if blocked_by_holds else end - now
        return self._refuse(429, "tenant budget window exhausted", max(0.0, wait))

    # -- settle ----------------------------------------------------------------------------------

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        """Book ``actual_usd`` for a call that reserved ``reserved_usd`` and give the rest back."""
        hold, actual = self._take(reserved_usd, actual_usd)
        if hold is not None and hold.lease is not None:
            hold.lease.give(hold.amount, actual)
            return
        op, _, _ = self._pool._op(self.key_hash)
        if hold is None:
            self._pool._failover.charge(op, actual)
            return
        if self._pool._in_process:
            self._pool.backend.settle(op, hold.res_id, actual)
            return
        self._pool._failover.settle(op, hold.res_id, actual, hold.local)

    async def asettle(self, reserved_usd: float, actual_usd: float) -> None:
        """Like :meth:`settle`, awaiting the backend; it completes even if the caller is cancelled."""
        if self._pool._in_process:
            self.settle(reserved_usd, actual_usd)
            return
        hold, actual = self._take(reserved_usd, actual_usd)
        if hold is not None and hold.lease is not None:
            hold.lease.give(hold.amount, actual)
            return
        op, _, _ = self._pool._op(self.key_hash)
        if hold is None:
            self._pool._failover.charge_later(op, actual)
            return
        await asyncio.shield(background(self._pool._failover.asettle(op, hold.res_id, actual, hold.local)))

    def _take(self, reserved_usd: float, actual_usd: float) -> tuple[_Hold | None, int]:
        amount = to_nano(reserved_usd) if _finite(reserved_usd) else -1
        actual = to_nano(actual_usd) if _finite(actual_usd) else max(amount, 0)
        with self._lock:
            queue = self._holds.get(amount)
            hold = queue.popleft() if queue else None
            if queue is not None and not queue:
                del self._holds[amount]
        if hold is None:
            logger.error(
                "veronica_mw: settle(%r) matches no reservation; charging the actual cost", reserved_usd
            )
        return hold, actual

    # -- refusals --------------------------------------------------------------------------------

    def retry_after_s(self) -> float | None:
        """Seconds until a refused reservation could succeed (None: not transient)."""
        return self._retry_after

    def _refuse(self, status: int, detail: str, retry_after: float | None) -> bool:
        self.refusal_status, self.refusal_detail, self._retry_after = status, detail, retry_after
        return False

    def _note(self, kind: str, detail: str) -> None:
        # Make the fallback visible in the snapshot of the context that draws from this ledger.
        if kind in self._noted:
            return
        ctx: Any = current_context.get()
        if isinstance(ctx, PendingContext):  # a lazily built request context: only if it exists
            ctx = ctx.ctx
        while ctx is not None and getattr(ctx, "_parent", None) is not self:
            ctx = ctx.parent  # a nested context draws from its ancestor's ledger
        if ctx is not None:
            self._noted.add(kind)
            ctx.add_event(kind, detail, pool=self._pool.name)


def _undo(task: asyncio.Task[Outcome], failover: Failover, op: Op, res_id: str) -> None:
    # The reservation of a cancelled areserve: give it back once the backend has answered.
    if task.cancelled() or task.exception() is not None:
        return
    outcome = task.result()
    if outcome.state is not None and outcome.state.ok:
        background(failover.asettle(op, res_id, 0, outcome.local))


def _finite(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )
