"""A circuit breaker whose state lives in Redis, shared by every worker process and machine.

Same state machine and methods as :class:`~veronica_mw.CircuitBreaker` (it is a subclass, so it
fits wherever one is accepted); each transition is one atomic Lua script, so across all processes a
HALF_OPEN circuit lets exactly one probe through. The inherited in-process breaker is the fallback
while Redis is unreachable (``on_backend_error="local"``, the default: a breaker protects an
upstream, it does not bound spend, so availability wins; the budget pool stays fail-closed).
With ``"deny"`` every call is refused as ``circuit_open`` until Redis answers again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..kernel.circuit_breaker import CircuitBreaker, CircuitState
from ..kernel.policy import PolicyContext, PolicyDecision
from ._backend import BackendUnavailable
from .redis_backend import RedisBudgetBackend, RedisClients, check_namespace, classify, script_for
from .redis_connect import import_redis

logger = logging.getLogger("veronica_mw")

# KEYS[1] breaker hash. ARGV: now ms, failure threshold, recovery ms, operation, key TTL ms.
# Returns {allowed, wait ms, state (0 closed, 1 open, 2 half_open), failures, healed}.
_SCRIPT = """
local key = KEYS[1]
local now, threshold, recovery = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local op, ttl = ARGV[4], ARGV[5]
local raw = redis.call('HMGET', key, 'state', 'failures', 'opened', 'probe')
local state = raw[1] or 'closed'
local failures, opened, probe = tonumber(raw[2] or '0'), tonumber(raw[3] or '0'), tonumber(raw[4] or '0')
local healed, changed = 0, false
local function bad(n) return n == nil or n ~= n or n < 0 or n == math.huge end
local known = state == 'closed' or state == 'open' or state == 'half_open'
if not known or bad(failures) or bad(opened) or bad(probe) then
  -- corrupted: fail safe into OPEN, which denies now and recovers through a single probe
  state, failures, opened, probe, healed, changed = 'open', threshold, now, 0, 1, true
end
if state == 'open' and now - opened >= recovery then
  state, probe, changed = 'half_open', 0, true
end
local allowed = 1
if op == 'check' then
  if state == 'half_open' then
    if probe == 0 or now - probe >= recovery then
      probe, changed = now, true
    else
      allowed = 0
    end
  elseif state == 'open' then
    allowed = 0
  end
elseif op == 'success' then
  failures, changed = 0, true
  if state ~= 'open' then state, probe = 'closed', 0 end
elseif op == 'failure' then
  failures, changed = failures + 1, true
  if state == 'half_open' or failures >= threshold then state, opened, probe = 'open', now, 0 end
elseif op == 'release' then
  if state == 'half_open' and probe ~= 0 then probe, changed = 0, true end
elseif op == 'reset' then
  state, failures, opened, probe, changed = 'closed', 0, 0, 0, true
end
if changed then
  redis.call('HSET', key, 'state', state, 'failures', string.format('%d', failures),
             'opened', string.format('%d', opened), 'probe', string.format('%d', probe))
  redis.call('PEXPIRE', key, ttl)
end
local wait = 0
if state ~= 'closed' then wait = math.max(0, opened + recovery - now) end
local code = 0
if state == 'open' then code = 1 elseif state == 'half_open' then code = 2 end
return {allowed, wait, code, failures, healed}
"""
_STATES = (CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN)
_KEY_TTL_MS = 7 * 86400 * 1000


class DistributedCircuitBreaker(CircuitBreaker):
    """CLOSED → OPEN after ``failure_threshold`` consecutive failures (counted across processes);
    OPEN denies for ``recovery_timeout`` s; HALF_OPEN admits one probe in total across processes.

    ``url_or_client``: a ``redis://``/``rediss://`` URL (standalone, or any node of a Redis
    Cluster: detected, or forced with ``cluster=True``), a ``redis.Redis``/``RedisCluster`` (or an
    asyncio one, whose settings a sync twin copies), or a :class:`~veronica_mw.RedisBudgetBackend`
    whose connection to share. The breaker's state is one key, so it lives on one cluster master.
    ``clock`` is wall time (seconds): processes on several machines compare timestamps, so keep
    their clocks in sync (NTP).
    """

    __slots__ = ("name", "on_backend_error", "backend_retry_s", "_clients", "_key", "_scripts", "_down_until")

    def __init__(
        self,
        url_or_client: Any = "redis://127.0.0.1:6379/0",
        *,
        name: str = "default",
        failure_threshold: int = 5,
        recovery_timeout: float = 30.0,
        namespace: str = "veronica",
        on_backend_error: str = "local",
        backend_retry_s: float = 1.0,
        socket_timeout: float = 1.0,
        clock: Callable[[], float] = time.time,
        cluster: bool | None = None,
    ) -> None:
        super().__init__(failure_threshold, recovery_timeout, clock=clock)
        if on_backend_error not in ("deny", "local"):
            raise ValueError(f"on_backend_error must be 'deny' or 'local', got {on_backend_error!r}")
        self.name = check_namespace("name", name)
        self.on_backend_error = on_backend_error
        self.backend_retry_s = backend_retry_s
        if isinstance(url_or_client, RedisBudgetBackend):
            url_or_client = url_or_client.clients
        self._clients = RedisClients(url_or_client, socket_timeout=socket_timeout, cluster=cluster)
        self._key = f"{check_namespace('namespace', namespace)}:cb:{self.name}"
        self._scripts: dict[str, Any] = {}
        self._down_until = 0.0

    def close(self) -> None:
        """Close the Redis connection this breaker opened (one passed in stays the caller's)."""
        self._clients.close()

    def _run(self, op: str) -> list[int] | None:
        """Run one transition in Redis; None when Redis is unreachable (the caller falls back)."""
        if time.monotonic() < self._down_until:
            return None
        args = [
            int(self._clock() * 1000),
            self.failure_threshold,
            int(self.recovery_timeout * 1000),
            op,
            _KEY_TTL_MS,
        ]
        errors: tuple[type[BaseException], ...] = (*self._clients.errors(), ValueError)
        try:
            reply = self._call(args)
        except errors as exc:
            error = classify(exc, self._clients.cluster)
            if not isinstance(error, BackendUnavailable):
                # A key of the wrong type: nothing to recover from but a reset; fail safe (deny).
                # A key of the wrong type: replace it with an OPEN circuit (fail safe, then one probe).
                logger.error("veronica_mw: breaker %r: %s; rewriting its key as OPEN", self.name, error)
                opened = int(self._clock() * 1000)
                fields: dict[Any, Any] = {
                    "state": "open",
                    "failures": self.failure_threshold,
                    "opened": opened,
                    "probe": 0,
                }
                try:
                    self._clients.sync().delete(self._key)
                    self._clients.sync().hset(self._key, mapping=fields)
                except self._clients.errors():
                    pass
                return [0, int(self.recovery_timeout * 1000), 1, self.failure_threshold, 1]
            if self._down_until == 0.0:
                logger.warning(
                    "veronica_mw: breaker %r lost Redis (%s); on_backend_error=%r",
                    self.name,
                    error,
                    self.on_backend_error,
                )
            self._down_until = time.monotonic() + self.backend_retry_s
            return None
        if self._down_until:
            self._down_until = 0.0
            logger.warning("veronica_mw: breaker %r reached Redis again", self.name)
        if reply[4]:
            logger.error("veronica_mw: breaker %r had corrupted state in Redis; forced OPEN", self.name)
        return reply

    def _call(self, args: list[Any]) -> list[int]:
        moved = import_redis().exceptions.MovedError
        try:
            script = script_for(self._scripts, "breaker", _SCRIPT, self._clients.sync())
            return [int(v) for v in script(keys=[self._key], args=args)]
        except moved:
            if not self._clients.moved():  # a cluster node reached as standalone: cluster mode, once
                raise
            script = script_for(self._scripts, "breaker", _SCRIPT, self._clients.sync())
            return [int(v) for v in script(keys=[self._key], args=args)]

    def _unavailable(self) -> PolicyDecision:
        return PolicyDecision(
            allowed=False,
            policy_type="circuit_breaker",
            reason="circuit state unavailable (Redis unreachable, on_backend_error='deny')",
            rate_limit_ms=int(self.backend_retry_s * 1000),
        )

    def check(self, context: PolicyContext | None = None) -> PolicyDecision:
        reply = self._run("check")
        if reply is None:
            return super().check(context) if self.on_backend_error == "local" else self._unavailable()
        if reply[0]:
            return PolicyDecision(allowed=True, policy_type="circuit_breaker")
        reason = "circuit half-open: probe in flight" if reply[2] == 2 else "circuit open"
        return PolicyDecision(
            allowed=False, policy_type="circuit_breaker", reason=reason, rate_limit_ms=reply[1]
        )

    def record_success(self) -> None:
        if self._run("success") is None and self.on_backend_error == "local":
            super().record_success()

    def record_failure(self) -> None:
        if self._run("failure") is None and self.on_backend_error == "local":
            super().record_failure()

    def release_probe(self) -> None:
        if self._run("release") is None and self.on_backend_error == "local":
            super().release_probe()

    def reset(self) -> None:
        self._run("reset")
        super().reset()

    @property
    def state(self) -> CircuitState:
        reply = self._run("state")
        if reply is None:
            return super().state if self.on_backend_error == "local" else CircuitState.OPEN
        return _STATES[reply[2]]

    @property
    def failure_count(self) -> int:
        reply = self._run("state")
        if reply is None:
            return self._failures
        return reply[3]

    def retry_after_s(self) -> float:
        """Seconds until an OPEN circuit lets a probe through (0 when it already would)."""
        reply = self._run("state")
        if reply is None:
            return super().retry_after_s() if self.on_backend_error == "local" else self.backend_retry_s
        return reply[1] / 1000.0 if reply[2] == 1 else 0.0
