"""RedisClients / redis_clients against a real 6-node Redis Cluster and a real standalone Redis: every
accepted form (URL to any node, forced cluster=, clients and their asyncio twins) reaches every slot."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from veronica_mw.pools.redis_connect import RedisClients, redis_clients

from ..support.redis_cluster import LocalRedisCluster
from .conftest import RedisServer

# Keys spread over all three masters' slot ranges (no hash tag): a client stuck on one node fails.
KEYS = [f"connect-test:{i}" for i in range(30)]


def _roundtrip(client: object, tag: str) -> None:
    for key in KEYS:
        client.set(f"{key}:{tag}", tag)  # type: ignore[attr-defined]
    assert [client.get(f"{key}:{tag}") for key in KEYS] == [tag.encode()] * len(KEYS)  # type: ignore[attr-defined]


async def _aroundtrip(client: object, tag: str) -> None:
    for key in KEYS:
        await client.set(f"{key}:{tag}", tag)  # type: ignore[attr-defined]
    assert [await client.get(f"{key}:{tag}") for key in KEYS] == [tag.encode()] * len(KEYS)  # type: ignore[attr-defined]


def test_fixture_is_three_masters_with_one_replica_each(redis_cluster: LocalRedisCluster) -> None:
    masters = redis_cluster.masters()
    assert len(masters) == 3
    assert all(len(redis_cluster.replicas_of(m)) == 1 for m in masters)
    assert len({redis_cluster.master_of(k).port for k in KEYS}) == 3  # the keys really spread


@pytest.mark.parametrize("node", range(6))
def test_url_to_any_node_is_detected_as_a_cluster(redis_cluster: LocalRedisCluster, node: int) -> None:
    clients = RedisClients(redis_cluster.nodes[node].url)
    try:
        assert isinstance(clients.sync(), redis.cluster.RedisCluster)
        assert clients.cluster is True
        _roundtrip(clients.sync(), f"url{node}")
    finally:
        clients.close()


@pytest.mark.anyio
async def test_asyncio_detection_of_a_cluster_url(redis_cluster: LocalRedisCluster) -> None:
    clients = RedisClients(redis_cluster.url)
    try:
        # Detected with an asyncio probe; a URL-built cluster is then driven by the sync client
        # (in a thread on the asyncio path): redis-py's asyncio cluster client breaks under bursts.
        assert await clients.aclient() is None
        assert clients.cluster is True and clients._sync is None
        _roundtrip(clients.sync(), "aurl")
    finally:
        await clients.aclose()


@pytest.mark.anyio
async def test_asyncio_standalone_url(redis_server: RedisServer) -> None:
    clients = RedisClients(redis_server.url)
    try:
        client = await clients.aclient()
        assert type(client) is redis.asyncio.Redis and clients.cluster is False
        await _aroundtrip(client, "astandalone")
    finally:
        await clients.aclose()


def test_standalone_url_stays_standalone(redis_server: RedisServer) -> None:
    sync, _ = redis_clients(redis_server.url)
    try:
        assert type(sync) is redis.Redis
        _roundtrip(sync, "standalone")
    finally:
        sync.close()


def test_forced_cluster_on_a_url_and_on_a_plain_client(redis_cluster: LocalRedisCluster) -> None:
    plain = redis.Redis.from_url(redis_cluster.nodes[3].url)
    for source in (redis_cluster.nodes[2].url, plain):
        clients = RedisClients(source, cluster=True)
        try:
            assert isinstance(clients.sync(), redis.cluster.RedisCluster)
            _roundtrip(clients.sync(), "forced")
        finally:
            clients.close()
    plain.close()


def test_a_moved_reply_switches_a_plain_client_to_cluster_mode(redis_cluster: LocalRedisCluster) -> None:
    plain = redis.Redis.from_url(redis_cluster.url)
    clients = RedisClients(plain)
    assert clients.cluster is False  # a plain client: taken as standalone until the server says MOVED
    with pytest.raises(redis.exceptions.MovedError):
        for key in KEYS:
            clients.sync().set(key, "x")
    assert clients.moved()
    assert isinstance(clients.sync(), redis.cluster.RedisCluster)
    _roundtrip(clients.sync(), "moved")
    clients.close()
    assert plain.ping()  # the user's client is left open
    plain.close()


@pytest.mark.anyio
async def test_asyncio_cluster_client_alone_serves_the_sync_path(redis_cluster: LocalRedisCluster) -> None:
    aclient = redis.asyncio.cluster.RedisCluster.from_url(redis_cluster.url)
    clients = RedisClients(aclient)
    try:
        assert clients.cluster is True
        assert await clients.aclient() is aclient
        sync = clients.sync()
        assert isinstance(sync, redis.cluster.RedisCluster)
        _roundtrip(sync, "derived")
        await _aroundtrip(aclient, "given")
    finally:
        await clients.aclose()
        await aclient.aclose()


def test_sync_cluster_client_and_helper_pair(redis_cluster: LocalRedisCluster) -> None:
    given = redis.cluster.RedisCluster.from_url(redis_cluster.url)
    sync, aclient = redis_clients(given)
    assert sync is given and aclient is None  # no asyncio twin given: the async path uses a thread
    _roundtrip(sync, "given")
    given.close()


def test_bad_inputs_are_refused_with_what_to_pass(redis_cluster: LocalRedisCluster) -> None:
    with pytest.raises(ValueError, match="redis://"):
        RedisClients("http://127.0.0.1:1")
    with pytest.raises(TypeError, match="redis-py client"):
        RedisClients(object())
    with pytest.raises(TypeError, match="cluster must be"):
        RedisClients(redis_cluster.url, cluster="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="database 0"):
        RedisClients(redis_cluster.url.replace("/0", "/3")).sync()
    with pytest.raises(ValueError, match="unix://"):
        RedisClients("unix:///tmp/redis.sock", cluster=True)
