"""Worker processes for the multi-process budget tests; run as ``python _workers.py <mode> <json>``.

Each prints one JSON line with what it observed, so the parent can check exact totals.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any


def _wait(start_at: float) -> None:
    # A shared wall-clock start: every process and thread fires at (nearly) the same moment.
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)


def slow_call() -> str:
    time.sleep(0.002)  # in flight long enough for the other requests to reserve meanwhile
    return "ok"


def kernel(args: dict[str, Any]) -> dict[str, Any]:
    """``threads`` concurrent requests, each its own ExecutionContext drawing from the tenant pool."""
    from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
    from veronica_mw.pools.budget_pool import BudgetPool
    from veronica_mw.pools.redis_backend import RedisBudgetBackend

    pool = BudgetPool(
        args["limit"], window_s=3600, key_func=lambda r: r, backend=RedisBudgetBackend(args["url"])
    )
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)
    cost = args["cost"]
    results: list[str] = []
    lock = threading.Lock()

    def request(tenant: str) -> None:
        adm = pool.admit(tenant)
        if not adm.allowed:
            outcome = f"refused:{adm.status}"
        else:
            ctx = ExecutionContext(config, budget_parent=adm.ledger)
            try:
                with ctx:
                    ctx.call_llm(
                        slow_call,
                        options=WrapOptions(cost_estimate_hint=cost, cost_fn=lambda r: cost),
                    )
                outcome = "ok"
            except ExecutionHalted as exc:
                outcome = f"halted:{exc.reason}"
        with lock:
            results.append(outcome)

    tenants = args["tenants"]
    threads = [
        threading.Thread(target=request, args=(tenants[i % len(tenants)],)) for i in range(args["threads"])
    ]
    _wait(args["start_at"])
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"ok": results.count("ok"), "outcomes": results}


def akernel(args: dict[str, Any]) -> dict[str, Any]:
    """Like :func:`kernel` on the async path: ``threads`` concurrent asyncio tasks, redis.asyncio,
    optionally with a lease (``lease`` USD)."""
    import asyncio

    from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
    from veronica_mw.pools.budget_pool import BudgetPool
    from veronica_mw.pools.redis_backend import RedisBudgetBackend

    backend = RedisBudgetBackend(args["url"])
    pool = BudgetPool(
        args["limit"], window_s=3600, key_func=lambda r: r, backend=backend, lease_usd=args.get("lease")
    )
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)
    cost = args["cost"]
    options = WrapOptions(cost_estimate_hint=cost, cost_fn=lambda r: cost)

    async def slow() -> str:
        await asyncio.sleep(0.002)
        return "ok"

    async def request(tenant: str) -> str:
        adm = await pool.aadmit(tenant)
        if not adm.allowed:
            return f"refused:{adm.status}"
        ctx = ExecutionContext(config, budget_parent=adm.ledger)
        try:
            async with ctx:
                await ctx.acall_llm(slow, options=options)
            return "ok"
        except ExecutionHalted as exc:
            return f"halted:{exc.reason}"

    async def main() -> list[str]:
        tenants = args["tenants"]
        await asyncio.sleep(max(0.0, args["start_at"] - time.time()))
        try:
            return list(
                await asyncio.gather(*(request(tenants[i % len(tenants)]) for i in range(args["threads"])))
            )
        finally:
            await pool.aflush()
            await backend.aclose()

    results = asyncio.run(main())
    return {"ok": results.count("ok"), "outcomes": results}


def raw(args: dict[str, Any]) -> dict[str, Any]:
    """Hammer reserve/settle on one bucket from ``threads`` clients (each its own connection)."""
    from veronica_mw.pools._backend import Op
    from veronica_mw.pools.redis_backend import RedisBudgetBackend

    settled: list[int] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        backend = RedisBudgetBackend(args["url"])
        for i in range(args["rounds"]):
            op = Op(args["bucket"], 1, int(time.time() * 1000), 600_000, 600_000)
            rid = f"{os.getpid()}-{n}-{i}"
            if backend.reserve(op, rid, args["amount"], args["limit"], -1).ok:
                assert backend.settle(op, rid, args["amount"])
                with lock:
                    settled.append(args["amount"])

    threads = [threading.Thread(target=client, args=(n,)) for n in range(args["threads"])]
    _wait(args["start_at"])
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"settled": sum(settled), "count": len(settled)}


def crash(args: dict[str, Any]) -> None:
    """Reserve through the kernel, report, then die mid-call without settling (a crashed worker)."""
    from veronica_mw import ExecutionConfig, ExecutionContext, WrapOptions
    from veronica_mw.pools.budget_pool import BudgetPool
    from veronica_mw.pools.redis_backend import RedisBudgetBackend

    pool = BudgetPool(
        args["limit"],
        window_s=3600,
        key_func=lambda r: r,
        backend=RedisBudgetBackend(args["url"]),
        reservation_ttl_s=args["ttl"],
    )
    ctx = ExecutionContext(ExecutionConfig(1.0, 5, 0), budget_parent=pool.ledger(args["tenant"]))

    def die() -> None:
        print(json.dumps({"reserved": True}), flush=True)
        os._exit(0)

    with ctx:
        ctx.call_llm(die, options=WrapOptions(cost_estimate_hint=args["cost"]))


def probe(args: dict[str, Any]) -> dict[str, Any]:
    """``threads`` callers ask a HALF_OPEN distributed breaker for a probe at the same moment."""
    from veronica_mw.pools.distributed_breaker import DistributedCircuitBreaker

    allowed: list[bool] = []
    lock = threading.Lock()

    def caller() -> None:
        breaker = DistributedCircuitBreaker(
            args["url"], name=args["name"], failure_threshold=1, recovery_timeout=args["recovery"]
        )
        decision = breaker.check()
        with lock:
            allowed.append(decision.allowed)

    threads = [threading.Thread(target=caller) for _ in range(args["threads"])]
    _wait(args["start_at"])
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"allowed": allowed.count(True), "denied": allowed.count(False)}


if __name__ == "__main__":
    mode, payload = sys.argv[1], json.loads(sys.argv[2])
    result = {"kernel": kernel, "akernel": akernel, "raw": raw, "crash": crash, "probe": probe}[mode](payload)
    print(json.dumps(result), flush=True)
