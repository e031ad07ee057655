"""Tenant pools on a real 6-node Redis Cluster: a plain URL to any one node (sync, asyncio, leases),
every accepted client form, one slot per script, a lease that never grows past its slice, OOM
replies failing closed for the tenants on that master only, and usage() never raising."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster
from redis.crc import key_slot

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from veronica_mw.pools import _redis_lua
from veronica_mw.pools._backend import NANO, LeaseSync
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.distributed_breaker import DistributedCircuitBreaker
from veronica_mw.pools.redis_backend import RedisBudgetBackend

from ..support.redis_cluster import LocalRedisCluster
from ._model import op
from .conftest import Closer, RedisServer

pytestmark = pytest.mark.redis
CONFIG = ExecutionConfig(max_cost_usd=5.0, max_steps=100, max_retries_total=0)
CALL = WrapOptions(cost_estimate_hint=0.03, cost_fn=lambda r: 0.03)


def tenants_on_masters(cluster: LocalRedisCluster, per_master: int = 1) -> dict[int, list[str]]:
    """Tenant keys grouped by the port of the master serving their bucket's hash tag."""
    found: dict[int, list[str]] = {m.port: [] for m in cluster.masters()}
    for i in range(10_000):
        tenant = f"tenant-{uuid.uuid4().hex[:6]}-{i}"
        port = cluster.master_of("{" + BudgetPool.hash_key(tenant) + "}").port
        if len(found[port]) < per_master:
            found[port].append(tenant)
        if all(len(v) == per_master for v in found.values()):
            return found
    raise AssertionError("could not place tenants on every master")


def pool_on(backend: Any, limit: float = 0.30, **kwargs: Any) -> BudgetPool:
    name = "p" + uuid.uuid4().hex[:12]  # the cluster is shared by the session: a fresh pool per test
    return BudgetPool(limit, window_s=3600, key_func=str, backend=backend, name=name, **kwargs)


def spend_all_sync(pool: BudgetPool, tenant: str) -> int:
    """Requests until the tenant is refused; the number of calls that really ran."""
    ran = 0
    for _ in range(50):
        admission = pool.admit(tenant)
        if not admission.allowed:
            assert admission.status == 429, admission
            return ran
        ctx = ExecutionContext(CONFIG, budget_parent=admission.ledger)
        try:
            ctx.call_llm(lambda: "ok", options=CALL)
            ran += 1
        except ExecutionHalted as halt:
            assert halt.reason == "budget_exceeded", halt.reason
            return ran
    raise AssertionError("never refused")


async def spend_all_async(pool: BudgetPool, tenant: str) -> int:
    ran = 0
    for _ in range(50):
        admission = await pool.aadmit(tenant)
        if not admission.allowed:
            assert admission.status == 429, admission
            return ran
        ctx = ExecutionContext(CONFIG, budget_parent=admission.ledger)
        try:
            await ctx.acall_llm(lambda: "ok", options=CALL)
            ran += 1
        except ExecutionHalted as halt:
            assert halt.reason == "budget_exceeded", halt.reason
            return ran
    raise AssertionError("never refused")


@pytest.mark.parametrize("node", [0, 4])
@pytest.mark.parametrize("lease", [None, 0.10])
def test_plain_url_to_one_node_sync(
    redis_cluster: LocalRedisCluster, closer: Closer, node: int, lease: Any
) -> None:
    backend = closer(RedisBudgetBackend(redis_cluster.nodes[node].url))
    pool = pool_on(backend, lease_usd=lease)
    tenants = [t for ts in tenants_on_masters(redis_cluster).values() for t in ts]  # one per master
    for tenant in tenants:
        assert spend_all_sync(pool, tenant) == 10  # $0.30 / $0.03, on every master
    pool.flush()
    for tenant in tenants:
        usage = pool.usage(tenant)
        assert usage.spent_usd == pytest.approx(0.30)
        assert (usage.reserved_usd, usage.source) == (0.0, "backend")


@pytest.mark.anyio
@pytest.mark.parametrize("lease", [None, 0.10])
async def test_plain_url_to_one_node_asyncio(redis_cluster: LocalRedisCluster, lease: Any) -> None:
    backend = RedisBudgetBackend(redis_cluster.nodes[1].url)
    pool = pool_on(backend, lease_usd=lease)
    tenants = [t for ts in tenants_on_masters(redis_cluster).values() for t in ts]
    assert [await spend_all_async(pool, t) for t in tenants] == [10, 10, 10]
    await pool.aflush()
    assert await backend.clients.aclient() is None  # the sync cluster client, in a thread
    await backend.aclose()
    for tenant in tenants:
        assert pool.usage(tenant).spent_usd == pytest.approx(0.30)
    backend.close()


@pytest.mark.anyio
@pytest.mark.parametrize("form", ["plain-client", "cluster-client", "async-cluster-alone", "both"])
async def test_every_client_form(redis_cluster: LocalRedisCluster, form: str) -> None:
    url = redis_cluster.nodes[2].url
    given: list[Any] = []
    if form == "plain-client":  # a standalone client to one node: switched to cluster mode on MOVED
        given.append(redis.Redis.from_url(url))
        backend = RedisBudgetBackend(given[0])
    elif form == "cluster-client":
        given.append(redis.cluster.RedisCluster.from_url(url))
        backend = RedisBudgetBackend(given[0])
    elif form == "async-cluster-alone":  # the sync path (admission, sync calls) gets a derived twin
        given.append(redis.asyncio.cluster.RedisCluster.from_url(url))
        backend = RedisBudgetBackend(given[0])
    else:
        given += [redis.cluster.RedisCluster.from_url(url), redis.asyncio.cluster.RedisCluster.from_url(url)]
        backend = RedisBudgetBackend(given[0], async_client=given[1])
    pool = pool_on(backend)
    tenants = [t for ts in tenants_on_masters(redis_cluster).values() for t in ts]
    assert [spend_all_sync(pool, t) for t in tenants[:2]] == [10, 10]
    assert await spend_all_async(pool, tenants[2]) == 10
    assert [pool.usage(t).spent_usd for t in tenants] == [pytest.approx(0.30)] * 3
    await backend.aclose()
    for client in given:
        if isinstance(client, redis.asyncio.cluster.RedisCluster):
            await client.aclose()
        else:
            client.close()


class KeyRecorder(RedisBudgetBackend):
    """Records the keys each script is run with (the keys the code computes, not ours)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.calls: list[tuple[str, list[str]]] = []

    def _run(self, name: str, source: str, keys: Any, args: Any) -> list[int]:
        self.calls.append((name, list(keys)))
        return super()._run(name, source, keys, args)


def test_every_script_keeps_its_keys_in_one_slot(redis_cluster: LocalRedisCluster, closer: Closer) -> None:
    backend = closer(KeyRecorder(redis_cluster.url))
    pool = pool_on(backend, lease_usd=0.05)
    ledger = pool.ledger("slot-tenant")
    ctx = ExecutionContext(CONFIG, budget_parent=ledger)
    ctx.call_llm(lambda: "ok", options=CALL)  # lease
    pool.flush()
    plain = pool_on(backend)
    assert plain.admit("slot-tenant").allowed  # state
    ExecutionContext(CONFIG, budget_parent=plain.ledger("slot-tenant")).call_llm(lambda: "ok", options=CALL)
    o, _, _ = plain._op(BudgetPool.hash_key("slot-tenant"))
    backend.absorb(o, o.win, uuid.uuid4().hex, 5, 1)  # absorb (its token key too)
    plain.reset("slot-tenant")
    scripts = {name for name in dir(_redis_lua) if name.isupper() and not name.startswith("_")}
    assert {name.upper() for name, _ in backend.calls} == scripts  # every script was run
    for name, keys in backend.calls:
        assert len({key_slot(k.encode()) for k in keys}) == 1, (name, keys)
        assert len(keys) >= 2 or name == "state"
    # The breaker's script takes one key; the scripts ran on the real cluster (no CROSSSLOT).
    breaker = closer(DistributedCircuitBreaker(redis_cluster.url, name="slot" + uuid.uuid4().hex[:8]))
    assert breaker.check().allowed and len([breaker._key]) == 1


@pytest.mark.parametrize("where", ["standalone", "cluster"])
def test_a_long_lived_lease_never_holds_more_than_its_slice(
    where: str, request: pytest.FixtureRequest, closer: Closer
) -> None:
    if where == "standalone":
        url: str = request.getfixturevalue("redis_url")
    else:
        url = request.getfixturevalue("redis_cluster").url
    backend = closer(RedisBudgetBackend(url))
    pool = pool_on(backend, limit=100.0, lease_usd=0.25, lease_sync_s=0.02, lease_idle_s=30.0)
    probe = pool_on(backend, limit=100.0)
    probe.name = pool.name  # reads the same bucket without a lease of its own
    lease_cap = 0.25 + 0.03  # the slice plus one call's hint
    ledger = pool.ledger("long-lived")
    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=50.0, max_steps=1000, max_retries_total=0), budget_parent=ledger
    )
    most_held = 0.0
    for _ in range(60):  # ~1.5 s: dozens of periodic syncs by the keeper thread
        ctx.call_llm(lambda: "ok", options=WrapOptions(cost_estimate_hint=0.03, cost_fn=lambda r: 0.01))
        time.sleep(0.025)
        most_held = max(most_held, probe.usage("long-lived").reserved_usd)
        lease = pool._leases.get(BudgetPool.hash_key("long-lived"))  # type: ignore[union-attr]
        assert lease.held / NANO <= lease_cap + 1e-9
    assert most_held <= lease_cap + 1e-9
    pool.flush()
    usage = probe.usage("long-lived")
    assert usage.spent_usd == pytest.approx(0.60) and usage.reserved_usd == 0.0


def test_lease_plan_tops_up_to_the_slice_only() -> None:
    from veronica_mw.pools._lease import Lease

    lease = Lease("k")
    lease.held, lease.spent = 250, 40  # 210 left of a 250 slice
    sync, _ = lease.plan(-1, 250, False)  # the keeper's periodic sync
    assert isinstance(sync, LeaseSync)
    assert (sync.keep, sync.extra) == (210, 40)  # back up to 250, not 210 + 250
    lease.unsure = None
    lease.inflight = 30
    sync, _ = lease.plan(60, 250, False)  # a call that does not fit in what is left
    assert (sync.keep, sync.ask, sync.extra) == (30, 60, 220)  # at most 250 + the call's 60


def test_oom_on_one_master_fails_closed_for_its_tenants_only(
    redis_cluster: LocalRedisCluster, closer: Closer
) -> None:
    backend = closer(RedisBudgetBackend(redis_cluster.url))
    pool = pool_on(backend, backend_retry_s=0.2)
    placed = tenants_on_masters(redis_cluster)
    full_port, *other_ports = placed
    full, others = placed[full_port][0], [placed[p][0] for p in other_ports]
    for tenant in [full, *others]:
        assert pool.admit(tenant).allowed  # every bucket exists before the master fills up
    master = redis_cluster.node(full_port)
    master.call("CONFIG", "SET", "maxmemory-policy", "noeviction")
    master.call("CONFIG", "SET", "maxmemory", "1")  # every write is refused with OOM
    try:
        ledger = pool.ledger(full)
        assert not ledger.reserve(0.03)  # fail closed: refused, nothing held
        assert ledger.refusal_status == 503
        for tenant in others:  # the other masters' tenants are not affected
            assert spend_all_sync(pool, tenant) == 10
        time.sleep(0.25)  # past backend_retry_s: tried again, still full, still refused
        again = pool.ledger(full)
        assert not again.reserve(0.03) and again.refusal_status == 503
    finally:
        master.call("CONFIG", "SET", "maxmemory", "0")
    time.sleep(0.25)  # backend_retry_s: the bucket is tried again
    assert spend_all_sync(pool, full) == 10  # service resumes by itself, nothing was counted meanwhile
    assert pool.usage(full).spent_usd == pytest.approx(0.30)


def test_oom_on_a_standalone_redis_fails_closed(redis_server: RedisServer, closer: Closer) -> None:
    backend = closer(RedisBudgetBackend(redis_server.url))
    pool = pool_on(backend, backend_retry_s=0.2)
    client = closer(redis.Redis.from_url(redis_server.url))
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")
    try:
        admission = pool.admit("t")
        assert (admission.allowed, admission.status) == (False, 503)
    finally:
        client.config_set("maxmemory", "0")
    time.sleep(0.25)
    assert spend_all_sync(pool, "t") == 10


def test_usage_answers_down_when_the_client_itself_breaks(closer: Closer) -> None:
    class Broken(RedisBudgetBackend):
        def state(self, op: Any) -> Any:
            raise AttributeError("'RedisCluster' object has no attribute 'connection_pool'")

    pool = pool_on(Broken("redis://127.0.0.1:1/0"))
    assert pool.usage("t").source == "down"


def test_cluster_exceptions_count_as_an_outage(closer: Closer) -> None:
    # Nothing listens there: the cluster client cannot even bootstrap (RedisClusterException).
    backend = closer(RedisBudgetBackend("redis://127.0.0.1:1/0", cluster=True, socket_timeout=0.2))
    pool = pool_on(backend, backend_retry_s=0.2)
    admission = pool.admit("t")
    assert (admission.allowed, admission.status) == (False, 503)
    assert not pool.ledger("t").reserve(0.01)
    asyncio.run(_async_refused(pool))


async def _async_refused(pool: BudgetPool) -> None:
    await asyncio.sleep(0.25)
    admission = await pool.aadmit("t")
    assert (admission.allowed, admission.status) == (False, 503)
    await pool.backend.aclose()  # type: ignore[attr-defined]


def test_sessions_see_the_same_op_on_sync_and_async(redis_cluster: LocalRedisCluster, closer: Closer) -> None:
    # A reservation made on the sync path is settled on the asyncio path: same keys, same slot.
    backend = closer(RedisBudgetBackend(redis_cluster.url))
    o = op(int(time.time() * 1000), bucket=f"x:1000ms:{{{uuid.uuid4().hex}}}")
    assert backend.reserve(o, "r1", 50, 1000, -1).ok
    assert asyncio.run(_settle(backend, o)) is True
    assert backend.state(o)[2:4] == (40, 0)


async def _settle(backend: RedisBudgetBackend, o: Any) -> bool:
    done = await backend.asettle(o, "r1", 40)
    await backend.aclose()
    return done
