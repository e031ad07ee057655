"""Redis storage for tenant budget pools (standalone or Redis Cluster): every operation is one
atomic Lua script on one tenant window's keys, which share a ``{hash tag}`` (one cluster slot).

Connections come from :mod:`.redis_connect` (a URL to any node, or clients); redis-py is imported
only when needed, so ``import veronica_mw`` never pulls it in.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
import weakref
from collections.abc import Sequence
from typing import Any

from ._backend import BackendCorrupted, BackendUnavailable, BucketState, LeaseReply, LeaseSync, Op
from ._lease import drain_background
from ._redis_lua import ABSORB, LEASE, RESERVE, RESET, SETTLE, STATE
from .redis_connect import RedisClients, import_redis

__all__ = ["RedisBudgetBackend", "RedisClients", "check_namespace", "classify", "import_redis"]
_NAMESPACE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def check_namespace(field: str, value: Any) -> str:
    """Key prefixes are configuration, but still never allowed to contain Redis pattern characters."""
    if not isinstance(value, str) or not _NAMESPACE.match(value):
        raise ValueError(f"{field} must be 1-64 characters of [A-Za-z0-9_.-], got {value!r}")
    return value


def classify(exc: BaseException, cluster: bool | None = False) -> Exception:
    """A redis-py error as BackendCorrupted (a key of the wrong type) or BackendUnavailable.

    An error reply about the command (``OOM``, ``CLUSTERDOWN``, ``TRYAGAIN``, ``READONLY``...) and
    any error of a cluster client concern the keys' node only: ``key_scoped``, so the pool refuses
    just the tenants whose keys are there. A standalone server that cannot be reached is down for all.
    """
    if "WRONGTYPE" in str(exc):
        return BackendCorrupted(str(exc))
    redis = import_redis()
    scoped = bool(cluster) or isinstance(exc, redis.ResponseError)
    return BackendUnavailable(f"{type(exc).__name__}: {exc}", key_scoped=scoped)


def script_for(cache: dict[str, Any], name: str, source: str, client: Any) -> Any:
    """The registered script ``name`` for ``client`` (re-registered when the client changed:
    a MOVED reply switches a standalone client to cluster mode)."""
    script = cache.get(name)
    if script is None or script.registered_client is not client:
        script = cache[name] = client.register_script(source)
    return script


class RedisBudgetBackend:
    """Budget buckets in Redis, shared by every worker process and machine using the same server.

    ``url_or_client``: a ``redis://``/``rediss://`` URL to a standalone Redis or to any node of a
    Redis Cluster, a ``redis.Redis``/``redis.cluster.RedisCluster`` or their ``redis.asyncio``
    twins (``async_client=`` adds the asyncio one next to a sync client). ``cluster``: None (detect
    on first connect), True or False. Keys are ``<namespace>:bp:<pool>:<window>:{<hash of the
    tenant key>}`` (+ ``:exp``, ``:a:<token>``): one tenant window, one hash tag, one cluster slot.
    """

    def __init__(
        self,
        url_or_client: Any = "redis://127.0.0.1:6379/0",
        *,
        namespace: str = "veronica",
        async_client: Any = None,
        cluster: bool | None = None,
        socket_timeout: float = 1.0,
        max_connections: int = 64,
    ) -> None:
        self.namespace = check_namespace("namespace", namespace)
        self.clients = RedisClients(
            url_or_client,
            async_client=async_client,
            cluster=cluster,
            socket_timeout=socket_timeout,
            max_connections=max_connections,
        )
        self._scripts: dict[str, Any] = {}
        self._loads: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Task[Any]]] = (
            weakref.WeakKeyDictionary()
        )

    def close(self) -> None:
        """Close the connections this backend opened (sync client)."""
        self.clients.close()

    async def aclose(self) -> None:
        """Close the connections this backend opened; call it at app shutdown (lifespan). Backend
        I/O still finishing in the background (a cancelled request's settle) is waited for first."""
        await drain_background()
        await self.clients.aclose()

    def key(self, bucket: str) -> str:
        """The Redis key of a bucket (the pool builds ``bucket`` from validated names and a hash)."""
        return f"{self.namespace}:bp:{bucket}"

    def _keys(self, op: Op, token: str | None = None) -> list[str]:
        key = self.key(op.bucket)
        keys = [key, key + ":exp"]
        if token is not None:
            keys.append(f"{key}:a:{token}")
        return keys

    @staticmethod
    def _args(op: Op, *extra: object) -> list[str]:
        return [str(op.win), str(op.now_ms), str(op.key_ttl_ms), str(op.reservation_ttl_ms), *map(str, extra)]

    def _run(self, name: str, source: str, keys: Sequence[str], args: Sequence[str]) -> list[int]:
        redis = import_redis()
        for attempt in (1, 2):
            try:
                client = self.clients.sync()
                reply = script_for(self._scripts, name, source, client)(keys=keys, args=args)
            except redis.exceptions.MovedError as exc:
                # A cluster node reached as standalone: switch to cluster mode and run it again.
                if attempt == 1 and self.clients.moved():
                    continue
                raise classify(exc, self.clients.cluster) from exc
            except self.clients.errors() as exc:
                raise classify(exc, self.clients.cluster) from exc
            except ValueError as exc:  # a URL that cannot work (db > 0 on a cluster): say what to fix
                raise BackendUnavailable(str(exc)) from exc
            return _check(reply)
        raise AssertionError("unreachable")

    async def _arun(self, name: str, source: str, keys: Sequence[str], args: Sequence[str]) -> list[int]:
        redis = import_redis()
        for attempt in (1, 2):
            try:
                client = await self.clients.aclient()
                if client is None:  # only sync clients: run them in a thread
                    return await asyncio.to_thread(self._run, name, source, keys, args)
                limiter = self.clients.limiter()
                if limiter is None:
                    reply = await self._aeval(client, name, source, keys, args)
                else:
                    async with limiter:
                        reply = await self._aeval(client, name, source, keys, args)
            except redis.exceptions.MovedError as exc:
                if attempt == 1 and self.clients.moved():
                    continue
                raise classify(exc, self.clients.cluster) from exc
            except self.clients.errors() as exc:
                raise classify(exc, self.clients.cluster) from exc
            except ValueError as exc:
                raise BackendUnavailable(str(exc)) from exc
            except Exception as exc:
                if not self.clients.cluster:
                    raise
                # redis-py's asyncio cluster client can fail in-flight commands with internal
                # errors while it rebuilds its topology: that is an outage of those keys' node.
                raise BackendUnavailable(f"{type(exc).__name__}: {exc}", key_scoped=True) from exc
            return _check(reply)
        raise AssertionError("unreachable")

    async def _aeval(
        self, client: Any, name: str, source: str, keys: Sequence[str], args: Sequence[str]
    ) -> Any:
        """EVALSHA; on NOSCRIPT (a new or promoted master) load the script once for all the
        concurrent callers, then run it again. redis-py's own per-call reload, done by dozens of
        requests at once on a cluster client, breaks connections that other requests are using."""
        sha = _sha(source)
        try:
            return await client.evalsha(sha, len(keys), *keys, *args)
        except import_redis().exceptions.NoScriptError:
            loop = asyncio.get_running_loop()
            loads = self._loads.setdefault(loop, {})
            load = loads.get(name)
            if load is None or load.done():
                load = loads[name] = loop.create_task(client.script_load(source))
            await asyncio.shield(load)
            return await client.evalsha(sha, len(keys), *keys, *args)

    def state(self, op: Op) -> BucketState:
        return _state(self._run("state", STATE, self._keys(op), self._args(op)))

    async def astate(self, op: Op) -> BucketState:
        return _state(await self._arun("state", STATE, self._keys(op), self._args(op)))

    def reserve(self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int) -> BucketState:
        args = self._args(op, res_id, amount, limit, limit_steps)
        return _state(self._run("reserve", RESERVE, self._keys(op), args))

    async def areserve(self, op: Op, res_id: str, amount: int, limit: int, limit_steps: int) -> BucketState:
        args = self._args(op, res_id, amount, limit, limit_steps)
        return _state(await self._arun("reserve", RESERVE, self._keys(op), args))

    def settle(self, op: Op, res_id: str, actual: int) -> bool:
        return self._run("settle", SETTLE, self._keys(op), self._args(op, res_id, actual))[0] > 0

    async def asettle(self, op: Op, res_id: str, actual: int) -> bool:
        return (await self._arun("settle", SETTLE, self._keys(op), self._args(op, res_id, actual)))[0] > 0

    def lease(self, op: Op, sync: LeaseSync, limit: int) -> LeaseReply:
        return _lease(self._run("lease", LEASE, self._keys(op), self._args(op, *sync, limit)))

    async def alease(self, op: Op, sync: LeaseSync, limit: int) -> LeaseReply:
        return _lease(await self._arun("lease", LEASE, self._keys(op), self._args(op, *sync, limit)))

    def absorb(self, op: Op, target_win: int, token: str, usd: int, steps: int) -> bool:
        args = self._args(op, target_win, usd, steps)
        return self._run("absorb", ABSORB, self._keys(op, token), args)[0] > 0

    def reset(self, op: Op) -> None:
        self._run("reset", RESET, self._keys(op), self._args(op))


@functools.lru_cache(maxsize=32)
def _sha(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()


def _check(reply: Any) -> list[int]:
    if not isinstance(reply, list) or not reply:
        raise BackendCorrupted(f"unexpected script reply {reply!r}")
    values = [int(v) for v in reply]
    if values[0] < 0:
        field = ("win", "spent", "reserved", "steps")[values[1] - 1] if len(values) > 1 else "?"
        raise BackendCorrupted(f"stored {field!r} is not a non-negative integer")
    return values


def _state(values: list[int]) -> BucketState:
    return BucketState(values[0] == 1, values[1], values[2], values[3], values[4])


def _lease(values: list[int]) -> LeaseReply:
    if len(values) != 6:
        raise BackendCorrupted(f"unexpected lease reply {values!r}")
    return LeaseReply(values[1], BucketState(True, values[2], values[3], values[4], values[5]))
