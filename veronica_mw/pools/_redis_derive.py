"""How one redis-py client or URL leads to another: the kind of a client, a sync twin of an asyncio
client (standalone or cluster), a cluster client built from a standalone one that got ``MOVED``,
and the URL checks of :mod:`.redis_connect`. Connection settings (credentials, TLS) carry over."""

from __future__ import annotations

from typing import Any

SSL_KEYS = (
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_check_hostname",
)


def client_kind(client: Any) -> tuple[bool, bool]:
    """(is it asyncio, is it a cluster client) for a redis-py client, by its class."""
    module = type(client).__module__
    return module.startswith("redis.asyncio"), "cluster" in module.rsplit(".", 1)[-1]


def cluster_from(client: Any, options: dict[str, Any]) -> Any:
    """A sync RedisCluster to the server(s) ``client`` talks to (a standalone client that got
    MOVED, or an asyncio RedisCluster given alone)."""
    from redis.cluster import ClusterNode, RedisCluster

    if client_kind(client)[1]:  # an asyncio RedisCluster
        nodes = [
            ClusterNode(n.host, n.port)  # type: ignore[no-untyped-call]
            for n in client.nodes_manager.startup_nodes.values()
        ]
        kwargs = client.connection_kwargs
        ssl = "SSL" in getattr(kwargs.get("connection_class"), "__name__", "")
    else:
        kwargs = client.connection_pool.connection_kwargs
        nodes = [ClusterNode(kwargs["host"], kwargs["port"])]  # type: ignore[no-untyped-call]
        ssl = "SSL" in client.connection_pool.connection_class.__name__
    extra = {k: kwargs[k] for k in ("username", "password", *SSL_KEYS) if kwargs.get(k) is not None}
    return RedisCluster(startup_nodes=nodes, ssl=ssl, **extra, **options)


def standalone_kwargs(client: Any) -> dict[str, Any]:
    """Connection settings of a standalone (asyncio) client, for a sync client to the same server.
    Exotic setups (sentinels, custom connection classes) should pass both clients explicitly."""
    import redis

    kwargs = client.connection_pool.connection_kwargs
    keys = ("host", "port", "db", "username", "password", "path", *SSL_KEYS)
    derived: dict[str, Any] = {k: kwargs[k] for k in keys if k in kwargs}
    kind = client.connection_pool.connection_class.__name__
    if "path" in derived:
        derived["connection_class"] = redis.UnixDomainSocketConnection
    elif "SSL" in kind:
        derived["connection_class"] = redis.SSLConnection
    return derived


def cluster_enabled(info: Any) -> bool:
    """Whether an ``INFO cluster`` reply says the node runs in cluster mode."""
    return bool(int(info.get("cluster_enabled", 0))) if isinstance(info, dict) else False


def without_db(url: str) -> str:
    """The URL without its database: the kind probe must not SELECT (a cluster node refuses
    SELECT n > 0, which would read as "standalone")."""
    if url.startswith("unix://"):
        return url
    scheme, rest = url.split("://", 1)
    address, _, query = rest.partition("?")
    return f"{scheme}://{address.split('/', 1)[0]}" + (f"?{query}" if query else "")


def cluster_url(url: str) -> str:
    """``url`` if it can name a cluster; a cluster has only db 0: say so instead of redis-py's
    RedisClusterException at first use."""
    path = url.split("://", 1)[1].split("?", 1)[0]
    db = path.split("/", 1)[1] if "/" in path else ""
    if db not in ("", "0"):
        raise ValueError(f"a Redis Cluster has only database 0; drop '/{db}' from the URL")
    return url
