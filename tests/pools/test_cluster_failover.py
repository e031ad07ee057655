"""A Redis Cluster master SIGKILLed while tenants spend (on_backend_error="deny"): its tenants are
refused (503 + Retry-After before a request, policy_denied inside one) while the other masters'
tenants go on; service resumes by itself after the replica's promotion; the limit holds; a lost
settle is reclaimed by TTL and a replayed settle counts once."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.redis_backend import RedisBudgetBackend

from ..support.redis_cluster import LocalRedisCluster
from .conftest import Closer
from .test_cluster_pool import tenants_on_masters

pytestmark = pytest.mark.redis
LIMIT = 1.50
COST, HINT = 0.01, 0.02
RETRY_S = 0.2
TTL_S = 3.0
CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)


class Load:
    """Threads making requests (two calls each) for one tenant; every outcome is time-stamped."""

    def __init__(self, pool: BudgetPool, tenant: str, threads: int) -> None:
        self.pool, self.tenant = pool, tenant
        self.events: list[tuple[float, str]] = []
        self.retry_afters: list[float | None] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _note(self, kind: str) -> None:
        with self.lock:
            self.events.append((time.monotonic(), kind))

    def _body(self) -> str:
        time.sleep(0.02)  # the model call: it really ran, so it must be paid for
        self._note("ran")
        return "ok"

    def _run(self) -> None:
        options = WrapOptions(cost_estimate_hint=HINT, cost_fn=lambda r: COST)
        while not self.stop.is_set():
            admission = self.pool.admit(self.tenant)
            if not admission.allowed:
                self._note(f"refused:{admission.status}:{admission.reason}")
                with self.lock:
                    self.retry_afters.append(admission.retry_after_s)
                time.sleep(0.01)
                continue
            ctx = ExecutionContext(CONFIG, budget_parent=admission.ledger)
            for _ in range(2):
                try:
                    ctx.call_llm(self._body, options=options)
                except ExecutionHalted as halt:
                    self._note(f"halted:{halt.reason}")
                    break

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def exhausted(self) -> bool:
        return self.count("refused:429:budget_exceeded") + self.count("halted:budget_exceeded") > 0

    def count(self, kind: str, start: float = 0.0, end: float = float("inf")) -> int:
        with self.lock:
            return sum(1 for at, k in self.events if k == kind and start <= at < end)


def test_master_killed_under_load(redis_cluster: LocalRedisCluster, closer: Closer) -> None:
    placed = tenants_on_masters(redis_cluster)
    victim_port, other_port, _ = placed
    victim = redis_cluster.node(victim_port)
    doomed, healthy = placed[victim_port][0], placed[other_port][0]
    entry = redis_cluster.node(other_port)  # the URL the app was configured with stays up
    backend = closer(RedisBudgetBackend(entry.url, socket_timeout=0.5))
    pool = BudgetPool(
        LIMIT,
        window_s=3600,
        key_func=str,
        backend=backend,
        name="f" + uuid.uuid4().hex[:10],
        backend_retry_s=RETRY_S,
        reservation_ttl_s=TTL_S,
    )
    # A request admitted before the kill, whose call comes after it (checked below).
    straddling = pool.admit(doomed)
    assert straddling.allowed
    with Load(pool, doomed, threads=3) as load, Load(pool, healthy, threads=1) as other:
        time.sleep(0.5)
        assert load.count("ran") > 0
        redis_cluster.kill(victim)
        killed = time.monotonic()
        ctx = ExecutionContext(CONFIG, budget_parent=straddling.ledger)
        with pytest.raises(ExecutionHalted) as inside:
            ctx.call_llm(
                lambda: pytest.fail("ran while its master was down"),
                options=WrapOptions(cost_estimate_hint=HINT),
            )
        assert inside.value.reason == "policy_denied"
        redis_cluster.wait_promoted(victim)
        promoted = time.monotonic()
        deadline = promoted + 15.0  # hang guard: the tenant's window is spent well before
        while not load.exhausted() and time.monotonic() < deadline:
            time.sleep(0.05)
        resumed = min((at for at, k in load.events if k == "ran" and at > promoted), default=None)
    down = (killed + 0.05, promoted)
    # While its master was down the doomed tenant was refused before its requests started (503,
    # Retry-After = backend_retry_s), and its calls were not run...
    assert load.count("refused:503:policy_denied", *down) > 0
    # No call ran while the master was certainly down: a replica cannot be promoted before
    # cluster-node-timeout (1 s) has passed, whereas ``promoted`` is when this test *saw* the
    # promotion, which a loaded machine can delay past calls the new master already served.
    assert load.count("ran", killed + 0.5, min(promoted, killed + 1.0)) == 0
    assert all(r == RETRY_S for r in load.retry_afters[: load.count("refused:503:policy_denied")])
    # ... while the tenant on a healthy master kept being served.
    assert other.count("ran", *down) > 0
    # Service came back by itself after the promotion, and the tenant then spent its window.
    assert resumed is not None and resumed - promoted < 5.0
    assert load.exhausted(), (load.count("ran"), sorted({k for _, k in load.events}))
    time.sleep(TTL_S + 0.5)  # any reservation whose settle was lost is reclaimed by now
    usage = pool.usage(doomed)
    ran_usd = load.count("ran") * COST
    assert usage.reserved_usd == 0.0
    assert usage.spent_usd <= LIMIT + 1e-9
    # Never counted twice; at most the calls in flight when the master died (one per thread,
    # acknowledged but not yet replicated) can be missing from the count.
    assert ran_usd - 3 * COST - 1e-9 <= usage.spent_usd <= ran_usd + 1e-9
    assert ran_usd <= LIMIT + 3 * HINT + 1e-9


def _replicated(cluster: LocalRedisCluster, key: str) -> None:
    """Wait until the master of ``key`` has replicated every write so far (WAIT 1)."""
    master = cluster.master_of(key)
    assert int(master.call("WAIT", 1, 5000)) >= 1


def test_lost_settle_is_reclaimed_and_a_replayed_settle_counts_once(
    redis_cluster: LocalRedisCluster, closer: Closer
) -> None:
    placed = tenants_on_masters(redis_cluster, per_master=2)
    victim_port, other_port, _ = placed
    crashed, replayed = placed[victim_port]
    backend = closer(RedisBudgetBackend(redis_cluster.node(other_port).url, socket_timeout=0.5))
    pool = BudgetPool(
        1.0,
        window_s=3600,
        key_func=str,
        backend=backend,
        name="l" + uuid.uuid4().hex[:10],
        backend_retry_s=RETRY_S,
        reservation_ttl_s=2 * TTL_S,  # outlives the failover, so "still held" is seen before it ends
    )
    lost, kept = pool.ledger(crashed), pool.ledger(replayed)
    assert lost.reserve(0.40) and kept.reserve(0.30)
    reserved_at = time.monotonic()
    _replicated(redis_cluster, "{" + BudgetPool.hash_key(crashed) + "}")
    victim = redis_cluster.node(victim_port)
    redis_cluster.kill(victim)
    res_id = kept._holds[300_000_000][0].res_id  # the id its settle carries
    kept.settle(0.30, 0.25)  # the master is gone: queued, replayed once Redis answers
    # (the "lost" ledger's process dies here: its settle never comes)
    redis_cluster.wait_promoted(victim)
    time.sleep(RETRY_S + 0.05)
    deadline = time.monotonic() + 10.0
    while pool._failover.pending and time.monotonic() < deadline:  # the replay timer pushes it
        time.sleep(0.05)
    assert not pool._failover.pending
    usage = pool.usage(replayed)
    assert usage.spent_usd == pytest.approx(0.25) and usage.reserved_usd == 0.0
    o, _, _ = pool._op(BudgetPool.hash_key(replayed))
    assert backend.settle(o, res_id, 250_000_000) is False  # the same settle re-sent (a timeout's retry)
    assert pool.usage(replayed).spent_usd == pytest.approx(0.25)  # counted once
    assert pool.usage(crashed).reserved_usd == pytest.approx(0.40)  # still held ...
    assert time.monotonic() - reserved_at < 2 * TTL_S
    time.sleep(max(0.0, reserved_at + 2 * TTL_S + 0.2 - time.monotonic()))
    usage = pool.usage(crashed)  # ... until its TTL: reclaimed, and nothing was ever charged for it
    assert (usage.spent_usd, usage.reserved_usd) == (0.0, 0.0)
