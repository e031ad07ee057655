"""Redis store of an ``ApprovalQueue``: a decision posted to any worker reaches the one that waits.

Keys share one hash tag per namespace (``<prefix>{<namespace>}:...``), so every script touches a
single slot and the queue works on Redis Cluster: ``req:<id>`` a hash (the request's JSON, its
creation time and deadline, and once decided its decision), ``pending`` a sorted set of waiting
ids, ``session:<hash>`` a signed-in browser, ``fail:<hash>`` failed sign-ins of one address.
Every time is Redis ``TIME`` (never a worker's clock), and a decision is a field of its request's
own hash: it cannot outlive its request, nor be recorded twice, whatever ``timeout_s``.

Commands go through the synchronous client of :class:`~veronica_mw.pools.redis_connect.RedisClients`
on a worker thread (standalone or cluster alike, whichever event loop asks); a waiter polls its
request's decision field.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from typing import Any

from ..kernel.exceptions import MissingFrameworkError
from ._queue_store import EXPIRY_GRACE_S, FAILURE_WINDOW_S, MAX_FAILURES

logger = logging.getLogger("veronica_mw")

_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) + tonumber(t[2]) / 1000000 "
_ADD = (
    _NOW
    + """
local deadline = tostring(now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'record', ARGV[1], 'created', tostring(now), 'deadline', deadline)
redis.call('PEXPIRE', KEYS[1], math.ceil((tonumber(ARGV[2]) + tonumber(ARGV[3])) * 1000))
redis.call('ZADD', KEYS[2], now, ARGV[4])
return tostring(now)
"""
)
_DECIDE = (
    _NOW
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[1], 'decision') == 1 then return 1 end
local deadline = tonumber(redis.call('HGET', KEYS[1], 'deadline'))
local late = ARGV[3] ~= 'expired' and now > deadline + tonumber(ARGV[4])
local decision = ARGV[1]
if late then decision = cjson.encode({decision = 'expired', message = 'no decision in time'}) end
redis.call('HSET', KEYS[1], 'decision', decision)
redis.call('ZREM', KEYS[2], ARGV[2])
if late then return 1 end
return 2
"""
)
_PENDING = (
    _NOW
    + """
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local alive = {}
for _, id in ipairs(ids) do
  local v = redis.call('HMGET', ARGV[1] .. id, 'record', 'deadline', 'decision')
  if v[1] and not v[3] and now <= tonumber(v[2]) + tonumber(ARGV[2]) then
    table.insert(alive, v[1])
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return alive
"""
)
_SESSION_ADD = (
    _NOW
    + """
redis.call('HSET', KEYS[1], 'approver', ARGV[1], 'created', tostring(now), 'seen', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(math.min(tonumber(ARGV[2]), tonumber(ARGV[3])) * 1000))
return 1
"""
)
_SESSION_TOUCH = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 'approver', 'created', 'seen')
if not v[1] then return false end
local idle, absolute = tonumber(ARGV[1]), tonumber(ARGV[2])
local age = now - tonumber(v[2])
if now - tonumber(v[3]) > idle or age > absolute then redis.call('DEL', KEYS[1]) return false end
redis.call('HSET', KEYS[1], 'seen', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil(math.min(idle, absolute - age) * 1000)))
return v[1]
"""
)
_FAILED = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
"""
_RETRY_AFTER = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n < tonumber(ARGV[1]) then return 0 end
local ms = redis.call('PTTL', KEYS[1])
if ms < 0 then return tonumber(ARGV[2]) end
return ms
"""
_OUTCOME = {0: "unknown", 1: "decided", 2: "ok"}
_POLL_S = 0.2


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class RedisStore:
    def __init__(self, url_or_client: Any, prefix: str, namespace: str, keep_s: float = 3600.0) -> None:
        try:
            import redis  # noqa: F401  (checked now: a missing client is a startup error)
        except ImportError as exc:
            raise MissingFrameworkError("redis", "redis", exc, module="veronica_mw.ApprovalQueue") from exc
        from ..pools.redis_connect import RedisClients

        self._clients = RedisClients(url_or_client)
        self._base = f"{prefix}{{{namespace}}}:"  # the hash tag: one slot per namespace
        self._keep_s = keep_s  # decided requests stay this long (so late decisions get a 409)

    def _key(self, kind: str, name: str = "") -> str:
        return f"{self._base}{kind}:{name}" if name else f"{self._base}{kind}"

    async def _eval(self, script: str, keys: list[str], *args: Any) -> Any:
        def run() -> Any:
            return self._clients.sync().eval(script, len(keys), *keys, *args)

        return await asyncio.to_thread(run)

    async def add(self, record: dict[str, Any]) -> None:
        timeout_s = max(0.0, float(record["expires"]) - float(record["created"]))
        keys = [self._key("req", record["id"]), self._key("pending")]
        await self._eval(_ADD, keys, json.dumps(record), repr(timeout_s), repr(self._keep_s), record["id"])

    async def wait(self, request_id: str) -> dict[str, Any]:
        key = self._key("req", request_id)

        def read() -> Any:
            return self._clients.sync().hget(key, "decision")

        while True:  # ended by a decision, or by the caller's timeout (cancellation)
            try:
                raw = await asyncio.to_thread(read)
            except Exception as exc:  # Redis unreachable: not a decision, retried until the timeout
                if not isinstance(exc, self._clients.errors()):
                    raise
                logger.warning("veronica_mw: approvals Redis unavailable while waiting (%s); retrying", exc)
                raw = None
            if raw is not None:
                try:
                    decision = json.loads(raw)
                except ValueError:
                    decision = None
                return decision if isinstance(decision, dict) else {"decision": "malformed"}
            await asyncio.sleep(_POLL_S)

    async def decide(self, request_id: str, decision: dict[str, Any]) -> str:
        keys = [self._key("req", request_id), self._key("pending")]
        args = (json.dumps(decision), request_id, str(decision.get("decision", "")), repr(EXPIRY_GRACE_S))
        result = await self._eval(_DECIDE, keys, *args)
        return _OUTCOME.get(int(result), "unknown")

    async def pending(self, offset: int = 0, limit: int = 50) -> tuple[list[dict[str, Any]], int]:
        raws = await self._eval(
            _PENDING, [self._key("pending")], self._key("req", "_")[:-1], repr(EXPIRY_GRACE_S)
        )
        records = []
        for raw in raws:
            try:
                records.append(json.loads(raw))
            except ValueError:  # written by something else than a queue: never shown
                continue
        return records[offset : offset + limit], len(records)

    async def get(self, request_id: str) -> dict[str, Any] | None:
        key = self._key("req", request_id)

        def read() -> Any:
            return self._clients.sync().hmget(key, ["record", "decision"])

        raw, decided = await asyncio.to_thread(read)
        if raw is None:
            return None
        try:
            record, decision = json.loads(raw), json.loads(decided) if decided is not None else {}
        except ValueError:
            return None
        if not isinstance(record, dict) or not isinstance(decision, dict):
            return None
        return {**record, "status": decision.get("decision", "pending"), "approver": decision.get("approver")}

    async def session_add(self, sid_hash: str, approver: str, idle_s: float, absolute_s: float) -> None:
        await self._eval(
            _SESSION_ADD, [self._key("session", sid_hash)], approver, repr(idle_s), repr(absolute_s)
        )

    async def session_touch(self, sid_hash: str, idle_s: float, absolute_s: float) -> str | None:
        found = await self._eval(
            _SESSION_TOUCH, [self._key("session", sid_hash)], repr(idle_s), repr(absolute_s)
        )
        return found.decode() if isinstance(found, bytes) else found

    async def session_drop(self, sid_hash: str) -> None:
        key = self._key("session", sid_hash)
        await asyncio.to_thread(lambda: self._clients.sync().delete(key))

    async def failed(self, client: str) -> None:
        await self._eval(_FAILED, [self._key("fail", _digest(client))], int(FAILURE_WINDOW_S * 1000))

    async def retry_after(self, client: str) -> int:
        key = self._key("fail", _digest(client))
        ms = await self._eval(_RETRY_AFTER, [key], MAX_FAILURES, int(FAILURE_WINDOW_S * 1000))
        return max(1, math.ceil(int(ms) / 1000)) if int(ms) > 0 else 0
