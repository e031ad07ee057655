"""Tenant budget pools: "tenant X may spend $5 per day across all requests, workers and machines".

A :class:`BudgetPool` maps each request (ASGI scope or WSGI environ) to a tenant key, refuses the
request before the app runs when that tenant's window is spent (:meth:`BudgetPool.admit` /
:meth:`BudgetPool.aadmit` return an :class:`Admission`), and otherwise hands out a
:class:`TenantLedger`, which the request's :class:`~veronica_mw.ExecutionContext` uses as its
``budget_parent``: every call reserves its estimated cost in the pool before it runs and settles the
actual cost after, so concurrent requests of one tenant cannot jointly overshoot. The context's own
limits still apply; the call must fit in both.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..kernel._validate import check_int, check_number
from ..kernel.context import PendingContext, current_context
from ._backend import (
    MAX_NANO,
    NANO,
    BucketState,
    BudgetBackend,
    LocalBudgetBackend,
    Op,
    WindowSpec,
    to_nano,
)
from ._failover import Failover

__all__ = ["Admission", "BudgetPool", "LocalBudgetBackend", "PoolUsage", "TenantLedger"]

logger = logging.getLogger("veronica_mw")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_BACKEND_METHODS = ("state", "astate", "reserve", "settle", "absorb", "reset")


@dataclass(frozen=True)
class Admission:
    """A pool's answer for one request (the middlewares' ``budget_pool`` hook).

    Refused: ``status`` 429 (window spent; ``retry_after_s`` = seconds until it resets) or 503
    (backend unreachable with ``on_backend_error="deny"``, broken key function, corrupted state).
    ``headers`` (RateLimit fields, when enabled) go on the refusal and on the normal response;
    ``ledger`` becomes the request context's ``budget_parent`` (None: the request has no tenant).
    """

    allowed: bool
    status: int = 200
    reason: str = ""
    retry_after_s: float | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    ledger: TenantLedger | None = None
    detail: str = ""
    fallback: bool = False


@dataclass(frozen=True)
class PoolUsage:
    """A tenant's current window as the pool sees it (``source``: backend, local, down, corrupt)."""

    spent_usd: float
    reserved_usd: float
    steps: int
    remaining_usd: float
    resets_in_s: float
    source: str


_UNPOOLED = Admission(allowed=True)


class _Hold:
    __slots__ = ("res_id", "amount", "local")

    def __init__(self, res_id: str, amount: int, local: LocalBudgetBackend | None) -> None:
        self.res_id, self.amount, self.local = res_id, amount, local


class TenantLedger:
    """The :class:`~veronica_mw.kernel.execution.BudgetParent` of one request (or run) of one tenant.

    The kernel calls :meth:`reserve` before each call and :meth:`settle` after it, synchronously
    and possibly from several threads at once. Settles are matched to reservations by amount: the
    kernel settles exactly the amount it reserved, and equal amounts of one ledger are
    interchangeable.
    """

    def __init__(self, pool: BudgetPool, key_hash: str) -> None:
        self._pool = pool
        self.key_hash = key_hash
        self._lock = threading.Lock()
        self._holds: dict[int, deque[_Hold]] = {}
        self._retry_after: float | None = None
        self._noted: set[str] = set()
        self.refusal_status: int | None = None
        self.refusal_detail = ""

    def reserve(self, amount_usd: float) -> bool:
        """Reserve ``amount_usd`` in the tenant's window; False refuses the call (nothing held)."""
        try:
            amount = to_nano(check_number("amount_usd", amount_usd))
        except (TypeError, ValueError) as exc:
            return self._refuse(503, f"invalid reservation: {exc}", None)
        res_id = secrets.token_hex(12)
        op, now, end = self._pool._op(self.key_hash)
        outcome = self._pool._failover.reserve(op, res_id, amount, self._pool._limit, self._pool._steps)
        state = outcome.state
        if outcome.source == "local":
            self._note(
                "budget_backend_fallback", "budget backend unreachable; serving from this process's bucket"
            )
        if state is not None and state.ok:
            with self._lock:
                self._holds.setdefault(amount, deque()).append(_Hold(res_id, amount, outcome.local))
            return True
        if outcome.source == "down":
            self._note("budget_backend_unavailable", "budget backend unreachable; on_backend_error='deny'")
            return self._refuse(503, "budget backend unavailable", self._pool.backend_retry_s)
        if state is None:
            return self._refuse(503, "tenant budget state is corrupted", None)
        # Only in-flight reservations stand in the way: retrying soon may succeed.
        blocked_by_holds = not self._pool._exhausted(state) and state.spent + amount <= self._pool._limit
        wait = min(1.0, end - now) if blocked_by_holds else end - now
        return self._refuse(429, "tenant budget window exhausted", max(0.0, wait))

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        """Book ``actual_usd`` for a call that reserved ``reserved_usd`` and give the rest back."""
        amount = to_nano(reserved_usd) if _finite(reserved_usd) else -1
        actual = to_nano(actual_usd) if _finite(actual_usd) else max(amount, 0)
        with self._lock:
            queue = self._holds.get(amount)
            hold = queue.popleft() if queue else None
            if queue is not None and not queue:
                del self._holds[amount]
        op, _, _ = self._pool._op(self.key_hash)
        if hold is None:
            logger.error(
                "veronica_mw: settle(%r) matches no reservation; charging the actual cost", reserved_usd
            )
            self._pool._failover.charge(op, actual)
            return
        self._pool._failover.settle(op, hold.res_id, actual, hold.local)

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
        ctx = current_context.get()
        if isinstance(ctx, PendingContext):  # a lazily built request context: only if it exists
            ctx = ctx.ctx
        if ctx is not None and getattr(ctx, "_parent", None) is self:
            self._noted.add(kind)
            ctx.add_event(kind, detail, pool=self._pool.name)


def _finite(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


class BudgetPool:
    """Per-tenant spend limits per time window, shared through ``backend``.

    ``key_func(scope_or_environ) -> str | None`` names the tenant (None: the request is not
    pooled). ``window_s`` is seconds (windows aligned to the Unix epoch, so 86400 is a UTC day),
    ``"minute"``/``"hour"``/``"day"``/``"week"``, or ``"month"`` (calendar month, UTC).
    ``backend`` defaults to an in-process :class:`LocalBudgetBackend`; use
    :class:`~veronica_mw.RedisBudgetBackend` to share the pool across processes and machines.
    ``on_backend_error``: ``"deny"`` (default, fail closed) or ``"local"`` (per-process fallback).
    ``limit_steps``: also cap calls (model and tool) per window. ``rate_limit_headers``: add the IETF
    draft ``RateLimit``/``RateLimit-Policy`` fields (quota in micro-dollars). ``name``: keeps pools
    with different limits apart in a shared backend. ``reservation_ttl_s``: after this long an
    unsettled reservation (its worker died) is reclaimed. ``backend_retry_s``: how long an
    unreachable backend is left alone before it is tried again (also the 503's Retry-After).
    ``clock``: wall time in seconds; every process sharing a backend must agree on it (NTP).
    """

    def __init__(
        self,
        limit_usd: float,
        *,
        window_s: float | str,
        key_func: Callable[[Any], str | None],
        backend: BudgetBackend | None = None,
        on_backend_error: str = "deny",
        limit_steps: int | None = None,
        name: str = "default",
        rate_limit_headers: bool = False,
        reservation_ttl_s: float = 600.0,
        backend_retry_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limit_usd = check_number("limit_usd", limit_usd)
        if self.limit_usd * NANO > MAX_NANO:
            raise ValueError(f"limit_usd must be <= {MAX_NANO / NANO:.0f} per window, got {limit_usd!r}")
        self._limit = to_nano(self.limit_usd)
        self.limit_steps = None if limit_steps is None else check_int("limit_steps", limit_steps)
        self._steps = -1 if limit_steps is None else limit_steps
        self.window = WindowSpec(window_s)
        if not callable(key_func):
            raise TypeError("key_func must be callable (scope or environ) -> str | None")
        self._key_func = key_func
        if backend is None:
            backend = LocalBudgetBackend()
        missing = [m for m in _BACKEND_METHODS if not callable(getattr(backend, m, None))]
        if missing:
            raise TypeError(f"backend {type(backend).__name__} lacks {', '.join(missing)}")
        if on_backend_error not in ("deny", "local"):
            raise ValueError(f"on_backend_error must be 'deny' or 'local', got {on_backend_error!r}")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"name must be 1-64 characters of [A-Za-z0-9_.-], got {name!r}")
        self.name = name
        self.backend = backend
        self.on_backend_error = on_backend_error
        self.rate_limit_headers = bool(rate_limit_headers)
        self.reservation_ttl_s = check_number("reservation_ttl_s", reservation_ttl_s)
        self.backend_retry_s = check_number("backend_retry_s", backend_retry_s)
        self._clock = clock
        self._failover = Failover(
            backend, on_backend_error, self.backend_retry_s, name, lambda: self._op("")[0]
        )

    # -- tenants, windows and operations ---------------------------------------------------------

    @staticmethod
    def hash_key(key: str) -> str:
        """The tenant key as stored: a hex digest, so no key can inject ``:``, ``*`` or newlines."""
        return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def _op(self, key_hash: str) -> tuple[Op, float, float]:
        now = self._clock()
        window = self.window.at(now)
        ttl_ms = math.ceil((window.end - now + self.reservation_ttl_s + 60.0) * 1000)
        bucket = f"{self.name}:{self.window.label}:{{{key_hash}}}"
        op = Op(bucket, window.id, math.floor(now * 1000), ttl_ms, math.ceil(self.reservation_ttl_s * 1000))
        return op, now, window.end

    def _exhausted(self, state: BucketState) -> bool:
        return state.spent >= self._limit or (self._steps >= 0 and state.steps >= self._steps)

    def ledger(self, key: str) -> TenantLedger:
        """A ledger for tenant ``key`` outside HTTP: ``ExecutionContext(cfg, budget_parent=ledger)``."""
        if not isinstance(key, str):
            raise TypeError(f"tenant key must be a str, got {type(key).__name__}")
        return TenantLedger(self, self.hash_key(key))

    # -- admission ---------------------------------------------------------------------------------

    def _tenant(self, request: Any) -> tuple[str | None, Admission | None]:
        try:
            key = self._key_func(request)
        except Exception as exc:
            logger.exception("veronica_mw: budget pool %r key_func raised; refusing the request", self.name)
            return None, _refused(
                503, "policy_denied", None, f"tenant key function failed ({type(exc).__name__})"
            )
        if key is None or isinstance(key, str):
            return key, None
        logger.error(
            "veronica_mw: budget pool %r key_func returned %s, not str or None; refusing",
            self.name,
            type(key).__name__,
        )
        return None, _refused(503, "policy_denied", None, "tenant key function returned a non-string")

    def admit(self, request: Any) -> Admission:
        """Decide a request (WSGI environ or ASGI scope) before the app runs."""
        key, refusal = self._tenant(request)
        if refusal is not None or key is None:
            return refusal or _UNPOOLED
        key_hash = self.hash_key(key)
        op, now, end = self._op(key_hash)
        outcome = self._failover.state(op)
        return self._decide(key_hash, outcome.state, outcome.source, now, end)

    async def aadmit(self, request: Any) -> Admission:
        """Like :meth:`admit`, without blocking the event loop on the backend."""
        key, refusal = self._tenant(request)
        if refusal is not None or key is None:
            return refusal or _UNPOOLED
        key_hash = self.hash_key(key)
        op, now, end = self._op(key_hash)
        outcome = await self._failover.astate(op)
        return self._decide(key_hash, outcome.state, outcome.source, now, end)

    def _decide(
        self, key_hash: str, state: BucketState | None, source: str, now: float, end: float
    ) -> Admission:
        if state is None:
            if source == "down":
                return _refused(503, "policy_denied", self.backend_retry_s, "budget backend unavailable")
            return _refused(503, "policy_denied", None, "tenant budget state is corrupted")
        headers = self._headers(state, now, end) if self.rate_limit_headers else []
        if self._exhausted(state):
            reason = "budget_exceeded" if state.spent >= self._limit else "step_limit"
            detail = (
                f"tenant {'budget' if reason == 'budget_exceeded' else 'step limit'} for this window is spent"
            )
            return _refused(429, reason, max(0.0, end - now), detail, headers)
        ledger = TenantLedger(self, key_hash)
        return Admission(True, headers=headers, ledger=ledger, fallback=source == "local")

    def _headers(self, state: BucketState, now: float, end: float) -> list[tuple[str, str]]:
        # IETF draft-ietf-httpapi-ratelimit-headers: quota in micro-dollars, reset in whole seconds.
        window = self.window.seconds or (end - self.window.at(now).start)
        w, t = max(1, math.ceil(window)), max(0, math.ceil(end - now))
        left = max(0, self._limit - state.spent - state.reserved) // 1000
        policy = [f'"usd";q={self._limit // 1000};w={w};qu="usd-micros"']
        current = [f'"usd";r={left};t={t}']
        if self._steps >= 0:
            policy.append(f'"steps";q={self._steps};w={w}')
            current.append(f'"steps";r={max(0, self._steps - state.steps)};t={t}')
        return [("RateLimit-Policy", ", ".join(policy)), ("RateLimit", ", ".join(current))]

    # -- operator views ------------------------------------------------------------------------------

    def usage(self, key: str) -> PoolUsage:
        """The tenant's current window (reclaims expired reservations on the way)."""
        op, now, end = self._op(self.hash_key(key))
        outcome = self._failover.state(op)
        s = outcome.state or BucketState(False, op.win, 0, 0, 0)
        return PoolUsage(
            s.spent / NANO,
            s.reserved / NANO,
            s.steps,
            max(0, self._limit - s.spent - s.reserved) / NANO,
            max(0.0, end - now),
            outcome.source,
        )

    def reset(self, key: str) -> None:
        """Zero the tenant's current window (open reservations stay); also repairs corrupted state."""
        op, _, _ = self._op(self.hash_key(key))
        self.backend.reset(op)


def _refused(
    status: int,
    reason: str,
    retry_after: float | None,
    detail: str,
    headers: list[tuple[str, str]] | None = None,
) -> Admission:
    return Admission(False, status, reason, retry_after, headers or [], None, detail)
