"""Redis connections for every Redis-backed part: one URL or client in, a sync and an asyncio client out,
standalone or Redis Cluster alike.

Accepted: a ``redis://``/``rediss://``/``unix://`` URL to a standalone Redis or to any node of a
cluster, a ``redis.Redis``/``redis.cluster.RedisCluster`` or their ``redis.asyncio`` twins (or a
:class:`RedisClients` to share). A URL's kind is detected on first connect (``INFO cluster``), or
forced with ``cluster=True``/``False``; a ``MOVED`` reply seen by a standalone client switches it to
cluster mode (so a cluster URL never becomes a permanent outage). When only an asyncio client is
given, a sync twin is built to the same server(s). A cluster reached through a URL (or a plain
client that got MOVED) has no asyncio client: callers run the sync RedisCluster in a thread.

redis-py is imported only when a client is first needed, so ``import veronica_mw`` never pulls it
in; without it, construction raises :class:`~veronica_mw.MissingFrameworkError` with the hint.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

from ..kernel.exceptions import MissingFrameworkError
from ._redis_derive import (
    client_kind,
    cluster_enabled,
    cluster_from,
    cluster_url,
    standalone_kwargs,
    without_db,
)

_SCHEMES = ("redis://", "rediss://", "unix://")


def import_redis() -> Any:
    """The redis module, or MissingFrameworkError with the install hint."""
    try:
        import redis
    except ImportError as exc:
        raise MissingFrameworkError(
            "redis-py", "redis", exc, module="veronica_mw.RedisBudgetBackend"
        ) from exc
    return redis


class RedisClients:
    """A sync and an asyncio client for one URL or client, created lazily and thread-safely.

    Clients built from a URL get short socket timeouts and a single immediate retry: the kernel
    calls the pool synchronously, so a dead Redis must cost milliseconds, not redis-py's default of
    backed-off retries. ``cluster``: None (detect), True or False. Clients passed in stay the
    caller's (:meth:`close` leaves them open).
    """

    def __init__(
        self,
        url_or_client: Any,
        *,
        async_client: Any = None,
        cluster: bool | None = None,
        socket_timeout: float = 1.0,
        max_connections: int = 64,
    ) -> None:
        import_redis()  # fail at construction (startup) with the install hint, not on the first request
        if cluster is not None and not isinstance(cluster, bool):
            raise TypeError(f"cluster must be True, False or None (detect), got {cluster!r}")
        self._lock = threading.Lock()
        self._timeout = socket_timeout
        self._max = max_connections
        self._url: str | None = None
        self._sync: Any = None
        self._async: Any = None
        self._owns_sync = self._owns_async = False
        self._seed: Any = None  # a client given by the user whose settings replacement clients copy
        self._retired: list[Any] = []  # asyncio clients replaced after a MOVED, closed by aclose()
        self._probes: dict[asyncio.AbstractEventLoop, asyncio.Task[bool]] = {}
        self._limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self.cluster = cluster
        if isinstance(url_or_client, RedisClients):
            other = url_or_client
            # Share its connections (they stay the other's to close) and what it knows.
            self._url, self._sync, self._async, self.cluster = (
                other._url,
                other._sync,
                other._async,
                other.cluster,
            )
            self._seed = other._seed
        elif isinstance(url_or_client, str):
            if not url_or_client.startswith(_SCHEMES):
                raise ValueError("Redis URL must start with redis://, rediss:// or unix://")
            if url_or_client.startswith("unix://") and cluster:
                raise ValueError("a Redis Cluster cannot be reached through a unix:// socket URL")
            self._url = url_or_client
        else:
            self._adopt(url_or_client)
        if async_client is not None:
            is_async, _ = self._check_client(async_client)
            if not is_async:
                raise TypeError("async_client must be a redis.asyncio client")
            self._async = async_client
        if self.cluster is None and self._url is None:
            given = self._sync if self._sync is not None else self._async
            self.cluster = client_kind(given)[1]

    @staticmethod
    def _check_client(client: Any) -> tuple[bool, bool]:
        if not callable(getattr(client, "register_script", None)) or not type(client).__module__.startswith(
            "redis"
        ):
            raise TypeError(
                "expected a Redis URL, a redis-py client (redis.Redis, redis.cluster.RedisCluster or their "
                f"redis.asyncio twins) or RedisClients, got {type(client).__name__}"
            )
        return client_kind(client)

    def _adopt(self, client: Any) -> None:
        is_async, is_cluster = self._check_client(client)
        if self.cluster is False and is_cluster:
            raise ValueError("cluster=False but the client given is a RedisCluster")
        if self.cluster and not is_cluster:  # forced: cluster clients to the node this one talks to
            self._seed = client
        elif is_async:
            self._async = client
        else:
            self._sync = client

    # -- detection ---------------------------------------------------------------------------------

    def _detect(self) -> bool:
        """Ask the URL's node whether it runs in cluster mode (blocking; once per process)."""
        redis = import_redis()
        probe = redis.Redis.from_url(
            without_db(str(self._url)), socket_timeout=self._timeout, socket_connect_timeout=self._timeout
        )
        try:
            return cluster_enabled(probe.info("cluster"))
        except redis.ResponseError:  # INFO renamed or forbidden: standalone until a MOVED says otherwise
            return False
        finally:
            probe.close()

    async def _adetect(self) -> bool:
        redis = import_redis()
        probe = redis.asyncio.Redis.from_url(
            without_db(str(self._url)), socket_timeout=self._timeout, socket_connect_timeout=self._timeout
        )
        try:
            return cluster_enabled(await probe.info("cluster"))
        except redis.ResponseError:
            return False
        finally:
            await probe.aclose()

    def moved(self) -> bool:
        """A standalone client got ``MOVED``: the server is a cluster node. Switch to cluster
        clients (built from the URL, or from the settings of the client given) and return True:
        the caller retries once with them."""
        with self._lock:
            if self.cluster:
                return True  # another thread switched already
            self.cluster = True
            old_sync = self._sync if self._owns_sync else None
            if self._async is not None:
                self._seed = self._seed or self._async
                if self._owns_async:
                    self._retired.append(self._async)
            if self._sync is not None:
                self._seed = self._seed or self._sync
            self._sync = self._async = None
            self._owns_sync = self._owns_async = False
        if old_sync is not None:
            old_sync.close()
        return True

    # -- clients -----------------------------------------------------------------------------------

    def _options(self, retry_cls: Any, *, cluster: bool) -> dict[str, Any]:
        from redis.backoff import NoBackoff

        options: dict[str, Any] = {
            "socket_timeout": self._timeout,
            "socket_connect_timeout": self._timeout,
            "retry": retry_cls(NoBackoff(), 1),
        }
        if not cluster:
            # A blocking pool: a burst of concurrent requests waits (briefly) for a free connection
            # instead of failing with "Too many connections", which would read as an outage.
            options["max_connections"] = self._max
            options["timeout"] = max(5.0, self._timeout)
        else:
            options["max_connections"] = self._max
        return options

    def limiter(self) -> asyncio.Semaphore | None:
        """For an asyncio cluster client: a semaphore (one per event loop) of ``max_connections``
        commands at once. Its connection pools do not wait for a free connection, they raise
        MaxConnectionsError, which a burst of requests must not turn into an "outage"."""
        if not self.cluster:
            return None
        loop = asyncio.get_running_loop()
        limiter = self._limiters.get(loop)
        if limiter is None:
            with self._lock:
                limiter = self._limiters.setdefault(loop, asyncio.Semaphore(self._max))
        return limiter

    def sync(self) -> Any:
        """The sync client (built on first use; detection may connect once)."""
        client = self._sync
        if client is not None:
            return client
        redis = import_redis()
        if self._url is not None and self.cluster is None:
            detected = self._detect()
            with self._lock:
                if self.cluster is None:
                    self.cluster = detected
        with self._lock:
            if self._sync is None:
                from redis.retry import Retry

                cluster = bool(self.cluster)
                options = self._options(Retry, cluster=cluster)
                if self._url is not None and cluster:
                    self._sync = redis.cluster.RedisCluster.from_url(cluster_url(self._url), **options)
                elif self._url is not None:
                    pool = redis.BlockingConnectionPool.from_url(self._url, **options)
                    self._sync = redis.Redis.from_pool(pool)  # from_pool: close() closes the pool too
                elif cluster:
                    self._sync = self._cluster_from(self._seed or self._async)
                else:
                    pool = redis.BlockingConnectionPool(**standalone_kwargs(self._async), **options)
                    self._sync = redis.Redis.from_pool(pool)
                self._owns_sync = True
            return self._sync

    def _cluster_from(self, client: Any) -> Any:
        from redis.retry import Retry

        return cluster_from(client, self._options(Retry, cluster=True))

    def asyncio_client(self) -> Any:
        """The asyncio client, or None when only a sync client was given (callers use a thread).
        Prefer :meth:`aclient` on an event loop: it detects a URL's kind without blocking."""
        if self._async is None and self._url is not None and self.cluster is None:
            detected = self._detect()
            with self._lock:
                if self.cluster is None:
                    self.cluster = detected
        return self._build_async()

    async def aclient(self) -> Any:
        """Like :meth:`asyncio_client`, detecting a URL's kind with an asyncio connection (once:
        concurrent first requests wait for the one probe)."""
        if self._async is None and self._url is not None and self.cluster is None:
            loop = asyncio.get_running_loop()
            with self._lock:
                probe = self._probes.get(loop)
                if probe is None:
                    probe = self._probes[loop] = loop.create_task(self._adetect())
            try:
                detected = await asyncio.shield(probe)
            finally:
                with self._lock:
                    if probe.done() and self._probes.get(loop) is probe:
                        del self._probes[loop]  # a failed probe (Redis down) is retried next time
            with self._lock:
                if self.cluster is None:
                    self.cluster = detected
        return self._build_async()

    def _build_async(self) -> Any:
        # A cluster reached through a URL is driven by the sync RedisCluster, in a worker thread on
        # the asyncio path: redis-py's asyncio cluster client fails in-flight commands (a closed
        # writer) when many requests open connections at once, which would read as an outage.
        if self._async is not None or self._url is None or self.cluster:
            return self._async
        redis = import_redis()
        with self._lock:
            if self._async is None:
                from redis.asyncio.retry import Retry

                pool = redis.asyncio.BlockingConnectionPool.from_url(
                    self._url, **self._options(Retry, cluster=False)
                )
                self._async = redis.asyncio.Redis.from_pool(pool)
                self._owns_async = True
        return self._async

    def close(self) -> None:
        """Close the sync client if this object created it (clients passed in stay the caller's)."""
        with self._lock:
            client, self._sync = (self._sync, None) if self._owns_sync else (None, self._sync)
            self._owns_sync = False
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the clients this object created; call it from the event loop that used them."""
        with self._lock:
            client, self._async = (self._async, None) if self._owns_async else (None, self._async)
            self._owns_async = False
        retired, self._retired = self._retired, []
        for old in [*retired, client]:
            if old is not None:
                await old.aclose()
        self.close()

    def errors(self) -> tuple[type[BaseException], ...]:
        """What a command can raise when Redis cannot answer: RedisError, RedisClusterException
        (not a RedisError: "no node reachable", "slot not covered") and OSError."""
        redis = import_redis()
        return (redis.RedisError, redis.exceptions.RedisClusterException, OSError)


def redis_clients(
    url_or_client: Any, *, async_client: Any = None, cluster: bool | None = None, socket_timeout: float = 1.0
) -> tuple[Any, Any]:
    """``(sync client, asyncio client)`` for a URL or client (see :class:`RedisClients`; the asyncio
    one is None when only a sync client was given). Connects once to detect a URL's kind."""
    clients = RedisClients(
        url_or_client, async_client=async_client, cluster=cluster, socket_timeout=socket_timeout
    )
    return clients.sync(), clients.asyncio_client()
