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

import asyncio
import hashlib
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..kernel._validate import check_int, check_number
from ._backend import (
    MAX_NANO,
    NANO,
    BucketState,
    BudgetBackend,
    LocalBudgetBackend,
    Op,
    Window,
    WindowSpec,
    to_nano,
)
from ._failover import Failover, Outcome
from ._leases import Leases
from ._tenant_ledger import TenantLedger

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
        lease_usd: float | None = None,
        lease_sync_s: float = 1.0,
        lease_idle_s: float = 5.0,
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
        # In-process storage answers without I/O: the async path calls the sync one directly.
        self._in_process = type(backend) is LocalBudgetBackend
        self.on_backend_error = on_backend_error
        self.rate_limit_headers = bool(rate_limit_headers)
        self.reservation_ttl_s = check_number("reservation_ttl_s", reservation_ttl_s)
        # What _op would otherwise work out on every reserve and settle: the current window (kept
        # while the clock stays in it) and each tenant's bucket name.
        self._window: Window | None = None
        self._bucket_names: dict[str, str] = {}
        self._named = (self.window, name)  # what those were worked out for
        self.backend_retry_s = check_number("backend_retry_s", backend_retry_s)
        self._clock = clock
        self._failover = Failover(
            backend, on_backend_error, self.backend_retry_s, name, lambda: self._op("")[0]
        )
        self.lease_usd = None if lease_usd is None else check_number("lease_usd", lease_usd)
        self._leases: Leases | None = None
        if self.lease_usd:
            if limit_steps is not None:
                raise ValueError("lease_usd cannot be combined with limit_steps (steps are not leased)")
            if not callable(getattr(backend, "lease", None)):
                raise TypeError(f"backend {type(backend).__name__} has no lease(): lease_usd needs one")
            sync_s, idle_s = (
                check_number("lease_sync_s", lease_sync_s),
                check_number("lease_idle_s", lease_idle_s),
            )
            if sync_s <= 0 or idle_s <= 0:
                raise ValueError("lease_sync_s and lease_idle_s must be > 0")
            self._leases = Leases(self, to_nano(self.lease_usd), sync_s, idle_s)

    def flush(self) -> None:
        """Book this process's leased spend and give back what its leases hold unused.

        Run at shutdown by an ``atexit`` hook too; call it (or :meth:`aflush`) from a lifespan
        handler to hand the budget back before the process stops taking requests.
        """
        if self._leases is not None:
            self._leases.close()

    async def aflush(self) -> None:
        """:meth:`flush` in a thread, so the event loop keeps running meanwhile."""
        if self._leases is not None:
            await asyncio.to_thread(self._leases.close)

    # -- tenants, windows and operations ---------------------------------------------------------

    @staticmethod
    def hash_key(key: str) -> str:
        """The tenant key as stored: a hex digest, so no key can inject ``:``, ``*`` or newlines."""
        return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def _op(self, key_hash: str) -> tuple[Op, float, float]:
        now = self._clock()
        spec, window = self.window, self._window
        named = self._named
        if named[0] is not spec or named[1] is not self.name:  # reassigned since: start over
            self._named, self._bucket_names, window = (spec, self.name), {}, None
        if spec.seconds:
            stale = window is None or window.id != math.floor(now / spec.seconds)
        else:  # calendar months; the last millisecond is left to at(), which rounds to microseconds
            stale = window is None or not window.start <= now < window.end - 0.001
        if stale or window is None:
            window = self._window = spec.at(now)
        bucket = self._bucket_names.get(key_hash)
        if bucket is None:
            if len(self._bucket_names) >= 10_000:
                self._bucket_names.clear()
            bucket = self._bucket_names[key_hash] = f"{self.name}:{spec.label}:{{{key_hash}}}"
        ttl_ms = math.ceil((window.end - now + self.reservation_ttl_s + 60.0) * 1000)
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
        leases = self._leases
        if leases is not None:
            if self._lease_admits(key_hash, op):  # decided in memory: no round trip
                return self._decide(key_hash, leases.get(key_hash).state, "backend", now, end)
            _, reply = leases.sync(key_hash, -1)  # book, renew and top up in one round trip
            if reply is not None:
                return self._decide(key_hash, reply.state, "backend", now, end)
        outcome = self._failover.state(op)
        return self._decide(key_hash, outcome.state, outcome.source, now, end)

    async def aadmit(self, request: Any) -> Admission:
        """Like :meth:`admit`, without blocking the event loop on the backend."""
        key, refusal = self._tenant(request)
        if refusal is not None or key is None:
            return refusal or _UNPOOLED
        key_hash = self.hash_key(key)
        op, now, end = self._op(key_hash)
        leases = self._leases
        if leases is not None:
            if self._lease_admits(key_hash, op):
                return self._decide(key_hash, leases.get(key_hash).state, "backend", now, end)
            _, reply = await leases.async_sync(key_hash, -1)
            if reply is not None:
                return self._decide(key_hash, reply.state, "backend", now, end)
        outcome = await self._failover.astate(op)
        return self._decide(key_hash, outcome.state, outcome.source, now, end)

    def _lease_admits(self, key_hash: str, op: Op) -> bool:
        # A lease with room proves the window is not spent (its hold is part of the reservations,
        # which never exceed the limit); the state it last saw must be of this window, though.
        lease = self._leases.get(key_hash)  # type: ignore[union-attr]
        state = lease.state
        return state is not None and state.win == op.win and lease.has_room()

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
            return _refused(429, reason, max(0.0, end - now), self._spent_detail(reason, state), headers)
        ledger = TenantLedger(self, key_hash)
        return Admission(True, headers=headers, ledger=ledger, fallback=source == "local")

    def _spent_detail(self, reason: str, state: BucketState) -> str:
        # The usage and the limits in force go with the refusal (the client's problem+json and the
        # audit log's ``refused`` record), so a refusal can be checked against its window later.
        steps = f"{state.steps} of {self._steps}" if self._steps >= 0 else str(state.steps)
        return (
            f"tenant {'budget' if reason == 'budget_exceeded' else 'step limit'} for this window is spent"
            f" (${state.spent / NANO:.6f} of ${self._limit / NANO:.6f} spent, steps {steps})"
        )

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
        try:
            outcome = self._failover.state(op)
        except Exception:  # an operator view never raises for a broken client: it says "down"
            logger.exception("veronica_mw: budget pool %r: usage(%r) failed", self.name, key)
            outcome = Outcome(None, "down")
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
