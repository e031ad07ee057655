"""Kernel micro-benchmarks. Prints JSON; run with ``python benchmarks/bench_kernel.py [--quick]``.

Each figure is the median of several repeats of a tight loop, in microseconds per operation.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable

from veronica_mw import (
    AgentStepGuard,
    BudgetEnforcer,
    CircuitBreaker,
    ExecutionConfig,
    ExecutionContext,
    PolicyContext,
    PolicyPipeline,
)


def per_op_us(fn: Callable[[int], None], n: int, repeats: int = 5) -> float:
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn(n)
        samples.append((time.perf_counter() - start) / n * 1e6)
    return round(statistics.median(samples), 3)


def big_config(timeout_ms: float = 0) -> ExecutionConfig:
    return ExecutionConfig(
        max_cost_usd=1e12, max_steps=10**12, max_retries_total=10**6, timeout_ms=timeout_ms
    )


def bench_wrap(pipeline: PolicyPipeline | None) -> Callable[[int], None]:
    ctx = ExecutionContext(big_config(), pipeline=pipeline, divergence_threshold=0)

    def stub() -> None:
        return None

    def run(n: int) -> None:
        wrap = ctx.wrap_llm_call
        for _ in range(n):
            wrap(stub)

    return run


def bench_wrap_nested(depth: int) -> Callable[[int], None]:
    """``wrap_llm_call`` in the innermost of ``depth`` nested contexts (each call counts in all)."""
    ctx = ExecutionContext(big_config(), divergence_threshold=0, parent=None)
    for level in range(1, depth):
        ctx = ExecutionContext(big_config(), divergence_threshold=0, parent=ctx, name=f"level-{level}")

    def stub() -> None:
        return None

    def run(n: int) -> None:
        wrap = ctx.wrap_llm_call
        for _ in range(n):
            wrap(stub)

    return run


def bench_two_phase(n: int) -> None:
    ctx = ExecutionContext(big_config(), divergence_threshold=0)
    begin = ctx.begin_call
    for _ in range(n):
        begin("llm").commit()


def bench_lifecycle(timeout_ms: float) -> Callable[[int], None]:
    config = big_config(timeout_ms)

    def run(n: int) -> None:
        for _ in range(n):
            with ExecutionContext(config):
                pass

    return run


def bench_spend(n: int) -> None:
    budget = BudgetEnforcer(1e12)
    spend = budget.spend
    for _ in range(n):
        spend(0.0001)


def bench_breaker(n: int) -> None:
    breaker = CircuitBreaker(5, 30.0)
    check = breaker.check
    pctx = PolicyContext()
    for _ in range(n):
        check(pctx)


def memory_after(calls: int) -> dict[str, float]:
    ctx = ExecutionContext(big_config(), divergence_threshold=0)

    def stub() -> None:
        return None

    tracemalloc.start()
    for _ in range(20_000):  # warm-up: fill the graph's ring buffer (traced, so refills net out)
        ctx.wrap_llm_call(stub)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(calls):
        ctx.wrap_llm_call(stub)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {
        "calls_after_warmup": calls,
        "retained_growth_kib": round((after - before) / 1024, 1),
        "retained_total_kib": round(after / 1024, 1),
    }


def one_context_after(calls: int) -> dict[str, float]:
    """Everything one context retains after ``calls`` wrapped calls (its graph ring, aggregates...)."""
    config = big_config()

    def stub() -> None:
        return None

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ctx = ExecutionContext(config, divergence_threshold=0)
    wrap = ctx.wrap_llm_call
    for _ in range(calls):
        wrap(stub)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del ctx
    retained = after - before
    return {
        "calls": calls,
        "retained_mib": round(retained / 2**20, 3),
        "bytes_per_ring_node": round(retained / min(calls, 10_000)),
        "target_mib": 2.0,
    }


def nested_row(n: int) -> float | None:
    try:
        return per_op_us(bench_wrap_nested(3), n)
    except TypeError:  # a veronica-mw without nested contexts (``parent=``): no such row
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    args = parser.parse_args()
    n = 20_000 if args.quick else 200_000
    three = PolicyPipeline([BudgetEnforcer(1e12), AgentStepGuard(10**12), CircuitBreaker(5, 30.0)])
    results = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "us_per_op": {
            "wrap_llm_call": per_op_us(bench_wrap(None), n),
            "wrap_llm_call_3_policy_pipeline": per_op_us(bench_wrap(three), n),
            "wrap_llm_call_nested_3_deep": nested_row(n),
            "begin_call_commit": per_op_us(bench_two_phase, n),
            "BudgetEnforcer.spend": per_op_us(bench_spend, n),
            "CircuitBreaker.check": per_op_us(bench_breaker, n),
            "context_create_enter_exit": per_op_us(bench_lifecycle(0), n // 4),
            "context_create_enter_exit_timeout": per_op_us(bench_lifecycle(30_000), n // 4),
        },
        "memory": memory_after(100_000 if args.quick else 1_000_000),
        "memory_one_context": one_context_after(200_000),
    }
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
