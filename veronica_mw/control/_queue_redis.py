"""Redis store of an ``ApprovalQueue``: a decision posted to any worker reaches the one that waits.

Keys (``prefix`` + ...): ``req:<id>`` the request (JSON), ``pending`` a sorted set of waiting ids,
``decision:<id>`` the decision (JSON), ``wake:<id>`` a list the decider pushes to. Deciding is one
Lua script, so two people deciding at once get one 200 and one 409.

The waiter blocks in ``BLPOP wake:<id>`` in slices shorter than the client's socket timeout and
re-reads the decision after every slice, so a wait of any length never turns into a socket timeout
(which would otherwise be a rejection), and a dropped connection is retried until the policy's own
timeout ends the wait. Every operation uses a short-lived client of its own event loop: the
approvals app runs on the server's loop, a sync tool call on a private one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..kernel.exceptions import MissingFrameworkError
from ._queue_store import EXPIRY_GRACE_S, expired

logger = logging.getLogger("veronica_mw")

_DECIDE = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 1 end
local deadline = tonumber(cjson.decode(raw)['expires']) + tonumber(ARGV[6])
local expired = ARGV[5] ~= 'expired' and tonumber(ARGV[4]) > deadline
local decision = ARGV[1]
if expired then decision = cjson.encode({decision = 'expired', message = 'no decision in time'}) end
redis.call('SET', KEYS[2], decision, 'EX', ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('RPUSH', KEYS[4], '1')
redis.call('EXPIRE', KEYS[4], ARGV[2])
if expired then return 1 end
return 2
"""
_OUTCOME = {0: "unknown", 1: "decided", 2: "ok"}
_MAX_SLICE_S = 5.0


class RedisStore:
    def __init__(self, url: str, prefix: str = "veronica-mw:approvals:", keep_s: float = 3600.0) -> None:
        try:
            import redis.asyncio  # noqa: F401  (checked now: a missing client is a startup error)
        except ImportError as exc:
            raise MissingFrameworkError("redis", "redis", exc, module="veronica_mw.ApprovalQueue") from exc
        self._url = url
        self._prefix = prefix
        self._keep_s = keep_s  # decided requests stay this long (so late decisions get a 409)

    def _key(self, kind: str, request_id: str = "") -> str:
        return f"{self._prefix}{kind}:{request_id}" if request_id else f"{self._prefix}{kind}"

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[Any]:
        from redis.asyncio import Redis

        client = Redis.from_url(self._url, decode_responses=True)
        try:
            yield client
        finally:
            await client.aclose()

    def _ttl(self, record: dict[str, Any]) -> int:
        return math.ceil(max(0.0, float(record["expires"]) - time.time()) + self._keep_s)

    async def add(self, record: dict[str, Any]) -> None:
        async with self._client() as client, client.pipeline(transaction=True) as pipe:
            pipe.set(self._key("req", record["id"]), json.dumps(record), ex=self._ttl(record))
            pipe.zadd(self._key("pending"), {record["id"]: float(record["created"])})
            await pipe.execute()

    async def wait(self, request_id: str) -> dict[str, Any]:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        decision_key, wake_key = self._key("decision", request_id), self._key("wake", request_id)
        async with self._client() as client:
            socket_timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
            slice_s = _MAX_SLICE_S if not socket_timeout else max(0.05, min(_MAX_SLICE_S, socket_timeout / 2))
            while True:  # ended by a decision, or by the caller's timeout (cancellation)
                try:
                    raw = await client.get(decision_key)
                    if raw is not None:
                        return json.loads(raw)  # type: ignore[no-any-return]
                    await client.blpop([wake_key], timeout=slice_s)
                except RedisTimeoutError:
                    continue  # a socket timeout is not a decision: read it again
                except RedisConnectionError as exc:
                    logger.warning(
                        "veronica_mw: approvals Redis unavailable while waiting (%s); retrying", exc
                    )
                    await asyncio.sleep(0.2)

    async def decide(self, request_id: str, decision: dict[str, Any]) -> str:
        async with self._client() as client:
            result = await client.eval(
                _DECIDE,
                4,
                self._key("req", request_id),
                self._key("decision", request_id),
                self._key("pending"),
                self._key("wake", request_id),
                json.dumps(decision),
                math.ceil(self._keep_s),
                request_id,
                repr(time.time()),
                decision.get("decision", ""),
                repr(EXPIRY_GRACE_S),
            )
        return _OUTCOME.get(int(result), "unknown")

    async def pending(self) -> list[dict[str, Any]]:
        async with self._client() as client:
            ids = await client.zrange(self._key("pending"), 0, -1)
            if not ids:
                return []
            raws = await client.mget([self._key("req", i) for i in ids])
            records, stale, now = [], [], time.time()
            for request_id, raw in zip(ids, raws, strict=True):
                record = json.loads(raw) if raw is not None else None
                if record is None or expired(record, now):  # its waiter is gone (or its worker died)
                    stale.append(request_id)
                else:
                    records.append(record)
            if stale:
                await client.zrem(self._key("pending"), *stale)
        return records

    async def get(self, request_id: str) -> dict[str, Any] | None:
        async with self._client() as client:
            raw, decided = await client.mget(
                [self._key("req", request_id), self._key("decision", request_id)]
            )
        if raw is None:
            return None
        status = json.loads(decided).get("decision", "decided") if decided is not None else "pending"
        return {**json.loads(raw), "status": status}
