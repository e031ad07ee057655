"""Event-loop lag of a FastAPI app under load while Redis replies are delayed. Prints JSON.

``python benchmarks/bench_loop_lag.py [--quick] [--delay-ms 30] [--rounds 3]``

The app of ``bench_budget.py`` (two model calls per request, tenant pool) runs in one uvicorn
worker with a probe task that sleeps 5 ms in a loop and records how late the loop wakes it; the
figure is the median over 0.25 s windows of each window's worst oversleep, while 32 keep-alive
clients drive it. Redis is reached through a local TCP proxy that delays every reply by
``--delay-ms``. Rows: ``local_pool`` (the in-process pool: the control), ``redis_pool`` and
``redis_pool_lease``. Target: redis rows < 20 ms, or the control + 10 ms. A private
``redis-server`` is started (the binary must exist).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "pools"))  # the delaying proxy of the loop-lag test

from _delay_proxy import DelayProxy  # noqa: E402
from bench_budget import FAILED, Server, _drive, _start_redis  # noqa: E402

from veronica_mw.pools.budget_pool import BudgetPool  # noqa: E402


def lag_of(server: Server, seconds: float) -> dict[str, float]:
    httpx.get(server.url + "/lag", timeout=30)  # forget the idle windows
    FAILED.clear()
    done = asyncio.run(_drive(server.url, seconds, 32))
    windows = httpx.get(server.url + "/lag", timeout=30).json()
    return {
        "non_200_responses": sum(FAILED.values()),
        "median_window_worst_ms": round(statistics.median(windows) * 1000, 2),
        "max_ms": round(max(windows) * 1000, 2),
        "windows": len(windows),
        "requests_per_s": round(done / seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    opts = parser.parse_args()
    seconds = 1.0 if opts.quick else 3.0
    rounds = 1 if opts.quick else opts.rounds
    modes = ["local_pool", "redis_pool"]
    if "lease_usd" in inspect.signature(BudgetPool).parameters:
        modes.append("redis_pool_lease")
    samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        redis_proc, redis_url = _start_redis(tmp)
        port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
        try:
            with DelayProxy(port, opts.delay_ms / 1000) as proxy:
                servers = {mode: Server(mode, proxy.url, probe=True) for mode in modes}
                try:
                    for _ in range(rounds):
                        for mode, server in servers.items():
                            samples[mode].append(lag_of(server, seconds))
                finally:
                    for server in servers.values():
                        server.stop()
        finally:
            redis_proc.terminate()
            redis_proc.wait(10)
    rows = {
        mode: {key: round(statistics.median(s[key] for s in runs), 2) for key in runs[0]}
        for mode, runs in samples.items()
    }
    control = rows["local_pool"]["median_window_worst_ms"]
    report = {
        "benchmark": "event_loop_lag_with_delayed_redis",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "redis_delay_ms": opts.delay_ms,
        "seconds_per_sample": seconds,
        "rounds": rounds,
        "rows": rows,
        "target_ms": max(20.0, control + 10.0),
        "redis_pool_minus_control_ms": round(rows["redis_pool"]["median_window_worst_ms"] - control, 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
