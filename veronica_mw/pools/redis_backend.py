"""Redis storage for tenant budget pools: every operation is one atomic Lua script.

redis-py is imported only when a client is first needed, so ``import veronica_mw`` never pulls it
in; without it, the first use raises :class:`~veronica_mw.MissingFrameworkError` with the
``pip install "veronica-mw[redis]"`` hint.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..kernel.exceptions import MissingFrameworkError
from ._backend import BackendCorrupted, BackendUnavailable, BucketState, LeaseReply, LeaseSync, Op
from ._lease import drain_background
from ._redis_lua import ABSORB, LEASE, RESERVE, RESET, SETTLE, STATE

if TYPE_CHECKING:
    import redis as redis_mod

_NAMESPACE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def import_redis() -> Any:
    """The redis module, or MissingFrameworkError with the install hint."""
    try:
        import redis
    except ImportError as exc:
        raise MissingFrameworkError(
            "redis-py", "redis", exc, module="veronica_mw.RedisBudgetBackend"
        ) from exc
    return redis


def check_namespace(field: str, value: Any) -> str:
    """Key prefixes are configuration, but still never allowed to contain Redis pattern characters."""
    if not isinstance(value, str) or not _NAMESPACE.match(value):
        raise ValueError(f"{field} must be 1-64 characters of [A-Za-z0-9_.-], got {value!r}")
    return value


class RedisClients:
    """One sync and (when needed) one asyncio client for a URL or for a client given by the user.

    Clients built from a URL get short socket timeouts and a single immediate retry (a pooled
    connection may be stale after a Redis restart): the kernel calls the pool synchronously, so a
    dead Redis must cost milliseconds, not redis-py's default of ten backed-off retries. Every
    script is idempotent (ids, tokens), so that one retry cannot count anything twice.
    """

    def __init__(
        self,
        url_or_client: Any,
        *,
        async_client: Any = None,
        socket_timeout: float = 1.0,
        max_connections: int = 64,
    ) -> None:
        import_redis()  # fail at construction (startup) with the install hint, not on the first request
        self._lock = threading.Lock()
        self._timeout = socket_timeout
        self._max = max_connections
        self._url: str | None = None
        self._sync: Any = None
        self._async: Any = async_client
        self._owns_sync = self._owns_async = False
        if isinstance(url_or_client, str):
            if not url_or_client.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError("Redis URL must start with redis://, rediss:// or unix://")
            self._url = url_or_client
        elif isinstance(url_or_client, RedisClients):
            self._url, self._sync, self._async = url_or_client._url, url_or_client._sync, url_or_client._async
        elif callable(getattr(url_or_client, "register_script", None)):
            if type(url_or_client).__module__.startswith("redis.asyncio"):
                self._async = url_or_client
            else:
                self._sync = url_or_client
        else:
            raise TypeError(f"expected a Redis URL or a redis-py client, got {type(url_or_client).__name__}")

    def _options(self, retry_cls: Any) -> dict[str, Any]:
        from redis.backoff import NoBackoff

        # A blocking pool: a burst of concurrent requests waits (briefly) for a free connection
        # instead of failing with "Too many connections", which would read as an outage.
        return {
            "socket_timeout": self._timeout,
            "socket_connect_timeout": self._timeout,
            "retry": retry_cls(NoBackoff(), 1),
            "max_connections": self._max,
            "timeout": max(5.0, self._timeout),
        }

    def sync(self) -> redis_mod.Redis:
        client = self._sync
        if client is None:
            redis = import_redis()
            with self._lock:
                if self._sync is None:
                    from redis.retry import Retry

                    options = self._options(Retry)
                    if self._url is not None:
                        pool = redis.BlockingConnectionPool.from_url(self._url, **options)
                    else:
                        pool = redis.BlockingConnectionPool(**self._derive_kwargs(), **options)
                    self._sync = redis.Redis.from_pool(pool)  # from_pool: close() closes the pool too
                    self._owns_sync = True
                client = self._sync
        return client  # type: ignore[no-any-return]

    def _derive_kwargs(self) -> dict[str, Any]:
        # Only an asyncio client was given: connect the sync one to the same server. Exotic setups
        # (TLS options, sentinels) should pass both clients explicitly.
        import redis

        kwargs = self._async.connection_pool.connection_kwargs
        keys = ("host", "port", "db", "username", "password", "path")
        derived: dict[str, Any] = {k: kwargs[k] for k in keys if k in kwargs}
        kind = self._async.connection_pool.connection_class.__name__
        if "path" in derived:
            derived["connection_class"] = redis.UnixDomainSocketConnection
        elif "SSL" in kind:
            derived["connection_class"] = redis.SSLConnection
        return derived

    def asyncio_client(self) -> Any:
        """The asyncio client, or None when only a sync client was given (callers use a thread)."""
        if self._async is None and self._url is not None:
            redis = import_redis()
            with self._lock:
                if self._async is None:
                    from redis.asyncio.retry import Retry

                    pool = redis.asyncio.BlockingConnectionPool.from_url(self._url, **self._options(Retry))
                    self._async = redis.asyncio.Redis.from_pool(pool)
                    self._owns_async = True
        return self._async

    def close(self) -> None:
        """Close the sync client if this object created it (clients passed in stay the caller's)."""
        with self._lock:
            client, self._sync = (self._sync, None) if self._owns_sync else (None, self._sync)
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the clients this object created; call it from the event loop that used them."""
        with self._lock:
            client, self._async = (self._async, None) if self._owns_async else (None, self._async)
        if client is not None:
            await client.aclose()
        self.close()

    def errors(self) -> tuple[type[BaseException], ...]:
        redis = import_redis()
        return (redis.RedisError, OSError)


def classify(exc: BaseException) -> Exception:
    """A redis-py error as BackendCorrupted (a key of the wrong type) or BackendUnavailable."""
    if "WRONGTYPE" in str(exc):
        return BackendCorrupted(str(exc))
    return BackendUnavailable(f"{type(exc).__name__}: {exc}")


class RedisBudgetBackend:
    """Budget buckets in Redis, shared by every worker process and machine using the same server.

    ``url_or_client``: a ``redis://`` URL, a ``redis.Redis`` or a ``redis.asyncio.Redis``
    (``async_client=`` adds the asyncio one next to a sync client). Keys are
    ``<namespace>:bp:<pool>:<window>:{<sha256 of the tenant key>}`` (+ ``:exp``, ``:a:<token>``).
    """

    def __init__(
        self,
        url_or_client: Any = "redis://127.0.0.1:6379/0",
        *,
        namespace: str = "veronica",
        async_client: Any = None,
        socket_timeout: float = 1.0,
        max_connections: int = 64,
    ) -> None:
        self.namespace = check_namespace("namespace", namespace)
        self.clients = RedisClients(
            url_or_client,
            async_client=async_client,
            socket_timeout=socket_timeout,
            max_connections=max_connections,
        )
        self._scripts: dict[str, Any] = {}
        self._ascripts: dict[str, Any] = {}

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
        client = self.clients.sync()
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = client.register_script(source)
        try:
            reply = script(keys=keys, args=args)
        except self.clients.errors() as exc:
            raise classify(exc) from exc
        return _check(reply)

    async def _arun(self, name: str, source: str, keys: Sequence[str], args: Sequence[str]) -> list[int]:
        client = self.clients.asyncio_client()
        if client is None:
            return await asyncio.to_thread(self._run, name, source, keys, args)
        script = self._ascripts.get(name)
        if script is None:
            script = self._ascripts[name] = client.register_script(source)
        try:
            reply = await script(keys=keys, args=args)
        except self.clients.errors() as exc:
            raise classify(exc) from exc
        return _check(reply)

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
