"""DistributedCircuitBreaker on a real Redis: the same state machine as CircuitBreaker (differential
hypothesis test), one HALF_OPEN probe across processes, corrupted state, and Redis outages."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veronica_mw import CircuitBreaker, CircuitState, ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.pools.distributed_breaker import DistributedCircuitBreaker
from veronica_mw.pools.redis_backend import RedisBudgetBackend

from .conftest import Closer, RedisServer

pytestmark = pytest.mark.redis
WORKERS = Path(__file__).with_name("_workers.py")


def state_of(breaker: CircuitBreaker) -> CircuitState:
    return breaker.state  # a call, so mypy does not narrow the property across state changes


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


_ops = st.lists(
    st.sampled_from(["check", "success", "failure", "release", "advance", "advance_far", "reset"]),
    max_size=40,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_same_state_machine_as_the_local_breaker(module_redis: RedisServer, ops: list[str]) -> None:
    clock = Clock()
    local = CircuitBreaker(3, 10.0, clock=clock)
    shared = DistributedCircuitBreaker(
        module_redis.url, name=uuid.uuid4().hex, failure_threshold=3, recovery_timeout=10.0, clock=clock
    )
    try:
        _compare(local, shared, clock, ops)
    finally:
        shared.close()


def _compare(local: CircuitBreaker, shared: DistributedCircuitBreaker, clock: Clock, ops: list[str]) -> None:
    for op in ops:
        if op == "check":
            a, b = local.check(), shared.check()
            assert (a.allowed, a.reason, a.rate_limit_ms) == (b.allowed, b.reason, b.rate_limit_ms)
        elif op == "advance":
            clock.now += 4.0
        elif op == "advance_far":
            clock.now += 25.0
        else:
            getattr(
                local,
                {
                    "success": "record_success",
                    "failure": "record_failure",
                    "release": "release_probe",
                    "reset": "reset",
                }[op],
            )()
            getattr(
                shared,
                {
                    "success": "record_success",
                    "failure": "record_failure",
                    "release": "release_probe",
                    "reset": "reset",
                }[op],
            )()
        assert shared.state == local.state
        assert shared.failure_count == local.failure_count
        assert shared.retry_after_s() == pytest.approx(local.retry_after_s(), abs=1e-3)


def test_one_half_open_probe_across_processes(redis_url: str, closer: Closer) -> None:
    breaker = closer(
        DistributedCircuitBreaker(redis_url, name="upstream", failure_threshold=1, recovery_timeout=0.5)
    )
    breaker.record_failure()
    assert state_of(breaker) == CircuitState.OPEN
    start = time.time() + 2.0  # past the recovery timeout: every caller sees HALF_OPEN at once
    payload = {"url": redis_url, "name": "upstream", "recovery": 30.0, "threads": 10, "start_at": start}
    # recovery=30 in the workers: a probe taken stays in flight for the whole test
    breaker_fast = closer(
        DistributedCircuitBreaker(redis_url, name="upstream", failure_threshold=1, recovery_timeout=0.5)
    )
    time.sleep(0.6)
    assert state_of(breaker_fast) == CircuitState.HALF_OPEN
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKERS), "probe", json.dumps(payload)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    results = [json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1]) for p in procs]
    assert sum(r["allowed"] for r in results) == 1
    assert sum(r["denied"] for r in results) == 39
    breaker_fast.record_success()  # the probe reports back: closed for everyone
    assert state_of(closer(DistributedCircuitBreaker(redis_url, name="upstream"))) == CircuitState.CLOSED


def test_shared_across_contexts_through_the_kernel(redis_url: str, closer: Closer) -> None:
    backend = closer(RedisBudgetBackend(redis_url))
    a = closer(DistributedCircuitBreaker(backend, name="llm", failure_threshold=2, recovery_timeout=60.0))
    b = closer(DistributedCircuitBreaker(backend, name="llm", failure_threshold=2, recovery_timeout=60.0))
    config = ExecutionConfig(1.0, 10, 5)

    def fail() -> None:
        raise ConnectionError("upstream down")

    for breaker in (a, b):  # one failure in each "process" opens the shared circuit
        ctx = ExecutionContext(config, circuit_breaker=breaker)
        with ctx, pytest.raises(ConnectionError):
            ctx.call_llm(fail)
    ctx = ExecutionContext(config, circuit_breaker=a)
    with ctx, pytest.raises(ExecutionHalted) as info:
        ctx.call_llm(lambda: "x")
    assert info.value.reason == "circuit_open"
    assert 59.0 < (info.value.retry_after_s or 0) <= 60.0


@pytest.mark.parametrize(
    "field,value", [("state", "weird"), ("failures", "-1"), ("opened", "nan"), ("probe", "abc")]
)
def test_corrupted_state_fails_safe_into_open(
    redis_url: str, field: str, value: str, caplog: pytest.LogCaptureFixture, closer: Closer
) -> None:
    clock = Clock()
    breaker = closer(DistributedCircuitBreaker(redis_url, name="c", recovery_timeout=5.0, clock=clock))
    breaker.record_success()
    closer(redis.Redis.from_url(redis_url)).hset("veronica:cb:c", field, value)
    assert breaker.check().allowed is False
    assert state_of(breaker) == CircuitState.OPEN
    assert "corrupted state" in caplog.text
    clock.now += 5.0
    assert breaker.check().allowed is True  # recovers through one probe
    assert breaker.check().allowed is False
    breaker.record_success()
    assert state_of(breaker) == CircuitState.CLOSED


def test_wrong_key_type_is_rewritten_open(redis_url: str, closer: Closer) -> None:
    closer(redis.Redis.from_url(redis_url)).set("veronica:cb:w", "garbage")
    breaker = closer(DistributedCircuitBreaker(redis_url, name="w"))
    assert breaker.check().allowed is False
    assert state_of(breaker) == CircuitState.OPEN


def test_redis_outage_local_fallback_and_deny(redis_server: RedisServer, closer: Closer) -> None:
    local = closer(
        DistributedCircuitBreaker(redis_server.url, name="x", failure_threshold=1, backend_retry_s=0.2)
    )
    deny = closer(
        DistributedCircuitBreaker(
            redis_server.url, name="x", failure_threshold=1, backend_retry_s=0.2, on_backend_error="deny"
        )
    )
    assert local.check().allowed and deny.check().allowed
    redis_server.kill()
    assert local.check().allowed  # in-process breaker takes over
    local.record_failure()
    assert local.check().allowed is False and local.state == CircuitState.OPEN
    decision = deny.check()
    assert (decision.allowed, decision.rate_limit_ms) == (False, 200)
    assert "unavailable" in decision.reason
    assert state_of(deny) == CircuitState.OPEN
    redis_server.start()
    time.sleep(0.25)
    assert deny.check().allowed  # Redis is back and its state (closed) rules again
    assert state_of(local) == CircuitState.CLOSED


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        DistributedCircuitBreaker("redis://127.0.0.1:1", on_backend_error="allow")
    with pytest.raises(ValueError):
        DistributedCircuitBreaker("redis://127.0.0.1:1", name="a b")
    with pytest.raises(ValueError):
        DistributedCircuitBreaker("redis://127.0.0.1:1", failure_threshold=0)
