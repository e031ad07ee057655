"""RedisBudgetBackend on a real redis-server: the Lua scripts follow the same rules as the local
backend (differential hypothesis test), are atomic under concurrent clients and processes, keep
tenant keys hashed, reclaim a crashed worker's reservations, and refuse on corrupted state."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from veronica_mw.pools._backend import BackendCorrupted, Op
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.redis_backend import RedisBudgetBackend

from ._model import RTTL, Model, op
from .conftest import Closer, RedisServer

pytestmark = pytest.mark.redis
WORKERS = Path(__file__).with_name("_workers.py")

_step = st.one_of(
    st.tuples(st.just("reserve"), st.integers(0, 400)),
    st.tuples(st.just("settle"), st.integers(0, 50)),
    st.tuples(st.just("advance"), st.sampled_from([1, 300, RTTL, 2 * RTTL])),
    st.tuples(st.just("window"), st.just(1)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, max_size=40))
def test_lua_matches_the_model(module_redis: RedisServer, steps: list[tuple[str, int]]) -> None:
    backend = RedisBudgetBackend(module_redis.url)
    try:
        _replay(backend, steps)
    finally:
        backend.close()


def _replay(backend: RedisBudgetBackend, steps: list[tuple[str, int]]) -> None:
    model = Model(1_000, limit_steps=12)
    bucket = f"m:1000ms:{{{uuid.uuid4().hex}}}"
    now, win, ids = 0, 1, []
    for i, (kind, value) in enumerate(steps):
        o = op(now, win, bucket)
        if kind == "reserve":
            got = backend.reserve(o, f"r{i}", value, 1_000, 12)
            assert got == model.reserve(o, f"r{i}", value)
            if got.ok:
                ids.append(f"r{i}")
        elif kind == "settle" and ids:
            rid = ids.pop(value % len(ids))
            assert backend.settle(o, rid, 7) == model.settle(o, rid, 7)
        elif kind == "advance":
            now += value
        elif kind == "window":
            win += 1
        assert backend.state(op(now, win, bucket)) == model.state(op(now, win, bucket))


def test_retried_scripts_count_once(redis_url: str, closer: Closer) -> None:
    backend = closer(RedisBudgetBackend(redis_url))
    o = op(0)
    assert backend.reserve(o, "a", 30, 100, -1).ok
    assert backend.reserve(o, "a", 30, 100, -1) == backend.state(o)  # a retry: still one hold
    assert backend.state(o).reserved == 30 and backend.state(o).steps == 1
    assert backend.settle(o, "a", 20) is True
    assert backend.settle(o, "a", 20) is False  # the reply was "lost" and the client retried
    assert backend.absorb(o, o.win, "tok", 5, 1) is True
    assert backend.absorb(o, o.win, "tok", 5, 1) is False
    assert backend.state(o)[1:] == (o.win, 25, 0, 2)


def test_large_amounts_stay_exact(redis_url: str, closer: Closer) -> None:
    # Lua's default number formatting would store 9e15 as "9e+15" and lose digits.
    backend = closer(RedisBudgetBackend(redis_url))
    big = 9_000_000_000_000_001
    assert backend.reserve(op(0), "a", big, 2**53 - 1, -1).ok
    assert backend.settle(op(0), "a", big - 1)
    assert backend.state(op(0)).spent == big - 1


def test_tenant_keys_are_hashed_and_namespaced(redis_url: str, closer: Closer) -> None:
    evil = "acme:*\n FLUSHALL {x} "
    pool = BudgetPool(
        1.0,
        window_s=60,
        key_func=lambda r: r,
        backend=closer(RedisBudgetBackend(redis_url, namespace="app1")),
    )
    ledger = pool.admit(evil).ledger
    assert ledger is not None and ledger.reserve(0.1)
    keys = sorted(k.decode() for k in closer(redis.Redis.from_url(redis_url)).keys("*"))
    digest = BudgetPool.hash_key(evil)
    assert keys == [f"app1:bp:default:60000ms:{{{digest}}}", f"app1:bp:default:60000ms:{{{digest}}}:exp"]
    assert all(re.fullmatch(r"app1:bp:default:60000ms:\{[0-9a-f]{32}\}(:exp)?", k) for k in keys)
    with pytest.raises(ValueError):
        RedisBudgetBackend(redis_url, namespace="a:b")
    with pytest.raises(ValueError):
        BudgetPool(1.0, window_s=60, key_func=lambda r: r, name="x y")


@pytest.mark.parametrize("bad", [b"abc", b"-5", b"1.5", b"inf", b"nan", b"1e400", b""])
def test_corrupted_values_refuse_safely(
    redis_url: str, bad: bytes, caplog: pytest.LogCaptureFixture, closer: Closer
) -> None:
    backend = closer(RedisBudgetBackend(redis_url))
    pool = BudgetPool(1.0, window_s=60, key_func=lambda r: r, backend=backend, on_backend_error="local")
    ledger = pool.ledger("t")
    assert ledger.reserve(0.1)
    ledger.settle(0.1, 0.1)
    key = backend.key(pool._op(BudgetPool.hash_key("t"))[0].bucket)
    closer(redis.Redis.from_url(redis_url)).hset(key, "spent", bad)
    adm = pool.admit("t")
    # Never a fallback to a fresh local bucket: corruption is not an outage.
    assert (adm.allowed, adm.status, adm.reason, adm.retry_after_s) == (False, 503, "policy_denied", None)
    assert "corrupted" in adm.detail
    assert ledger.reserve(0.0) is False and ledger.refusal_status == 503
    assert "stored 'spent' is not a non-negative integer" in caplog.text
    pool.reset("t")  # the operator's repair
    assert pool.admit("t").allowed and pool.usage("t").spent_usd == 0.0


def test_wrong_key_type_refuses(redis_url: str, closer: Closer) -> None:
    backend = closer(RedisBudgetBackend(redis_url))
    pool = BudgetPool(1.0, window_s=60, key_func=lambda r: r, backend=backend, on_backend_error="local")
    key = backend.key(pool._op(BudgetPool.hash_key("t"))[0].bucket)
    closer(redis.Redis.from_url(redis_url)).set(key, "oops")
    assert pool.admit("t").status == 503
    with pytest.raises(BackendCorrupted):
        backend.state(pool._op(BudgetPool.hash_key("t"))[0])
    pool.reset("t")
    assert pool.admit("t").allowed


def _run_workers(mode: str, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKERS), mode, json.dumps(p)], stdout=subprocess.PIPE, text=True
        )
        for p in payloads
    ]
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=120)  # hang guard
        assert proc.returncode == 0
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_lua_atomic_under_concurrent_processes(redis_url: str, closer: Closer) -> None:
    """4 processes x 8 clients x 10 rounds race for a 1000-unit bucket with 7-unit calls."""
    start = time.time() + 1.5
    base = {
        "url": redis_url,
        "bucket": "race:1ms:{x}",
        "amount": 7,
        "limit": 1_000,
        "threads": 8,
        "rounds": 10,
        "start_at": start,
    }
    results = _run_workers("raw", [base] * 4)
    state = closer(RedisBudgetBackend(redis_url)).state(
        Op("race:1ms:{x}", 1, int(time.time() * 1000), 600_000, 600_000)
    )
    assert sum(r["count"] for r in results) == 1_000 // 7 == state.steps
    assert state.spent == sum(r["settled"] for r in results) == 7 * (1_000 // 7)
    assert state.reserved == 0


def test_kernel_4_processes_x_50_requests_one_tenant(redis_url: str, closer: Closer) -> None:
    """The issue's acceptance test at kernel level: $1.00 pool, $0.03 calls, 200 concurrent requests."""
    start = time.time() + 2.0
    payload = {
        "url": redis_url,
        "limit": 1.0,
        "cost": 0.03,
        "threads": 50,
        "tenants": ["acme"],
        "start_at": start,
    }
    results = _run_workers("kernel", [payload] * 4)
    served = sum(r["ok"] for r in results)
    outcomes = [o for r in results for o in r["outcomes"]]
    assert served == 33
    assert set(outcomes) <= {"ok", "halted:budget_exceeded", "refused:429"}
    usage = BudgetPool(1.0, window_s=3600, key_func=str, backend=closer(RedisBudgetBackend(redis_url))).usage(
        "acme"
    )
    assert usage.spent_usd == pytest.approx(0.99, abs=1e-9)  # <= 1.00 and >= 0.97: nothing leaked
    assert usage.reserved_usd == 0 and usage.steps == 33


@pytest.mark.parametrize("lease", [None, 0.09])
def test_async_path_4_processes_x_50_requests_one_tenant(
    redis_url: str, closer: Closer, lease: float | None
) -> None:
    """The same on the async path (redis.asyncio); with a lease, exact books and at most what the
    three other processes hold unused (0.09 + one call each) left unspent."""
    payload = {
        "url": redis_url,
        "limit": 1.0,
        "cost": 0.03,
        "threads": 50,
        "tenants": ["acme"],
        "start_at": time.time() + 2.0,
        "lease": lease,
    }
    results = _run_workers("akernel", [payload] * 4)
    served = sum(r["ok"] for r in results)
    outcomes = [o for r in results for o in r["outcomes"]]
    assert set(outcomes) <= {"ok", "halted:budget_exceeded", "refused:429"}
    usage = BudgetPool(1.0, window_s=3600, key_func=str, backend=closer(RedisBudgetBackend(redis_url))).usage(
        "acme"
    )
    assert usage.spent_usd == pytest.approx(0.03 * served, abs=1e-9) and usage.spent_usd <= 1.0
    assert usage.reserved_usd == 0 and usage.steps == served  # every lease given back at exit
    if lease is None:
        assert served == 33
    else:
        assert 33 - 3 * 4 <= served <= 33


def test_two_tenants_never_touch_each_other(redis_url: str, closer: Closer) -> None:
    start = time.time() + 2.0
    payload = {
        "url": redis_url,
        "limit": 0.30,
        "cost": 0.03,
        "threads": 40,
        "tenants": ["a", "b"],
        "start_at": start,
    }
    _run_workers("kernel", [payload] * 2)
    pool = BudgetPool(0.30, window_s=3600, key_func=str, backend=closer(RedisBudgetBackend(redis_url)))
    for tenant in ("a", "b"):
        assert pool.usage(tenant).spent_usd == pytest.approx(0.30, abs=1e-9)
        assert pool.usage(tenant).steps == 10
    assert pool.usage("c").spent_usd == 0.0


def test_crashed_worker_reservation_is_reclaimed(redis_url: str, closer: Closer) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(WORKERS),
            "crash",
            json.dumps({"url": redis_url, "limit": 0.10, "cost": 0.08, "ttl": 30.0, "tenant": "t"}),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(proc.stdout.splitlines()[0]) == {"reserved": True}
    offset = [0.0]
    pool = BudgetPool(
        0.10,
        window_s=3600,
        key_func=str,
        backend=closer(RedisBudgetBackend(redis_url)),
        reservation_ttl_s=30.0,
        clock=lambda: time.time() + offset[0],
    )
    config = ExecutionConfig(1.0, 5, 0)
    assert pool.usage("t").reserved_usd == pytest.approx(0.08)
    ctx = ExecutionContext(config, budget_parent=pool.ledger("t"))
    with pytest.raises(ExecutionHalted) as info, ctx:
        ctx.call_llm(lambda: "x", options=WrapOptions(cost_estimate_hint=0.05))
    assert info.value.reason == "budget_exceeded"
    assert info.value.retry_after_s == pytest.approx(1.0)  # only an in-flight hold stands in the way
    offset[0] = 31.0  # the dead worker's reservation has outlived its TTL
    assert pool.usage("t").reserved_usd == 0.0
    assert pool.usage("t").spent_usd == 0.0
    ctx = ExecutionContext(config, budget_parent=pool.ledger("t"))
    with ctx:
        ctx.call_llm(lambda: "x", options=WrapOptions(cost_estimate_hint=0.05, cost_fn=lambda r: 0.04))
    assert pool.usage("t").spent_usd == pytest.approx(0.04)


def test_late_commit_after_reclaim_counts_exactly_once(redis_url: str, closer: Closer) -> None:
    backend = closer(RedisBudgetBackend(redis_url))
    assert backend.reserve(op(0), "slow", 50, 100, -1).ok
    assert backend.state(op(RTTL)).reserved == 0  # reclaimed
    assert backend.settle(op(RTTL + 1), "slow", 40) is True  # the worker was only slow: book it
    assert backend.settle(op(RTTL + 2), "slow", 40) is False
    assert backend.state(op(RTTL + 3)).spent == 40


def test_client_kinds(redis_url: str) -> None:
    import asyncio

    import redis.asyncio as aredis

    async def main() -> None:
        sync_client, async_client = redis.Redis.from_url(redis_url), aredis.Redis.from_url(redis_url)
        for client in (sync_client, async_client, redis_url):
            backend = RedisBudgetBackend(client)
            pool = BudgetPool(1.0, window_s=60, key_func=str, backend=backend)
            ledger = pool.ledger("k")
            assert ledger.reserve(0.25)  # sync path (derived from the asyncio client if needed)
            ledger.settle(0.25, 0.25)
            adm = await pool.aadmit("k")  # asyncio client, or a thread for a sync-only backend
            assert adm.allowed and adm.ledger is not None
            await backend.aclose()
        assert pool.usage("k").spent_usd == pytest.approx(0.75)
        sync_client.close()
        await async_client.aclose()

    asyncio.run(main())
    with pytest.raises(TypeError):
        RedisBudgetBackend(42)
    with pytest.raises(ValueError):
        RedisBudgetBackend("http://127.0.0.1")
