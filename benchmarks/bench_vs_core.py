"""veronica-mw vs veronica-core 3.10, measured side by side in one process. Prints JSON.

``python benchmarks/bench_vs_core.py [--quick] [--rounds N]`` (needs ``pip install -r
benchmarks/requirements.txt``: veronica-core is a benchmark-only dependency).

Rows (microseconds per operation, the best of ``--rounds`` interleaved rounds; ``ratio`` =
veronica-mw / veronica-core, lower is better):

* ``wrap_llm_call``: one ``ctx.wrap_llm_call(stub)`` round trip in a context with large limits
  that records every call (a fresh one per 5,000 calls; target ratio <= 0.05);
* ``context_create_enter_exit_timeout``: ``with ExecutionContext(config with timeout_ms=30000):
  pass`` (target <= 0.05);
* ``wsgi_werkzeug_overhead``: per-request overhead of each project's WSGI middleware over the bare
  app, driven by werkzeug's test client (overhead = middleware time - bare time; target <= 0.10).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import platform
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

try:
    import veronica_core as core
except ImportError:  # pragma: no cover - a benchmark-only dependency
    raise SystemExit("veronica-core is not installed: pip install -r benchmarks/requirements.txt") from None
from werkzeug.test import Client

import veronica_mw as mw

LIMITS = {"max_cost_usd": 1e12, "max_steps": 10**12, "max_retries_total": 10**6}


def best_of(stacks: dict[str, Callable[[int], None]], n: int, rounds: int) -> dict[str, float]:
    """Microseconds per op of each stack: interleaved rounds, fastest round (timeit's reasoning)."""
    for run in stacks.values():
        run(max(1, n // 10))  # warm up
    samples: dict[str, list[float]] = {name: [] for name in stacks}
    for _ in range(rounds):
        for name, run in stacks.items():
            gc.collect()
            start = time.perf_counter()
            run(n)
            samples[name].append((time.perf_counter() - start) / n * 1e6)
    return {name: round(min(values), 3) for name, values in samples.items()}


def _stub() -> None:
    return None


def wrap_loop(module: Any) -> Callable[[int], None]:
    config = module.ExecutionConfig(**LIMITS)

    def run(n: int) -> None:
        # A fresh context every 5,000 calls: both projects record every call of a context up to
        # 10,000 (veronica-core then stops recording, which would make it look faster).
        for start in range(0, n, 5_000):
            wrap = module.ExecutionContext(config).wrap_llm_call
            for _ in range(min(5_000, n - start)):
                wrap(_stub)

    return run


def lifecycle_loop(module: Any) -> Callable[[int], None]:
    config = module.ExecutionConfig(**LIMITS, timeout_ms=30_000)
    make = module.ExecutionContext

    def run(n: int) -> None:
        for _ in range(n):
            with make(config):
                pass

    return run


def _plain_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


def client_loop(app: Any) -> Callable[[int], None]:
    client = Client(app)

    def run(n: int) -> None:
        for _ in range(n):
            client.get("/").close()

    return run


def row(ours: float, theirs: float, target: float, unit: str = "us") -> dict[str, float | str]:
    return {
        f"veronica_mw_{unit}": ours,
        f"veronica_core_{unit}": theirs,
        "ratio": round(ours / theirs, 4),
        "target_ratio": target,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    n = 5_000 if args.quick else 50_000
    # veronica-core logs a warning per call once a context's node cap is reached; a benchmark of
    # a long-lived context must not time the logging.
    logging.getLogger("veronica_core").setLevel(logging.CRITICAL)
    logging.disable(logging.WARNING)

    wrap = best_of({"mw": wrap_loop(mw), "core": wrap_loop(core)}, n, rounds)
    life = best_of({"mw": lifecycle_loop(mw), "core": lifecycle_loop(core)}, n // 10, rounds)
    config_mw = mw.ExecutionConfig(max_cost_usd=1.0, max_steps=100, max_retries_total=2, timeout_ms=30_000)
    config_core = core.ExecutionConfig(
        max_cost_usd=1.0, max_steps=100, max_retries_total=2, timeout_ms=30_000
    )
    wsgi = best_of(
        {
            "bare": client_loop(_plain_app),
            "mw": client_loop(mw.VeronicaWSGIMiddleware(_plain_app, config=config_mw)),
            "core": client_loop(core.VeronicaWSGIMiddleware(_plain_app, config=config_core)),
        },
        n // 20,
        rounds,
    )
    ours, theirs = wsgi["mw"] - wsgi["bare"], wsgi["core"] - wsgi["bare"]
    report = {
        "benchmark": "veronica_mw_vs_veronica_core",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "veronica_core": getattr(core, "__version__", "?"),
        "rounds": rounds,
        "wrap_llm_call": row(wrap["mw"], wrap["core"], 0.05),
        "context_create_enter_exit_timeout": row(life["mw"], life["core"], 0.05),
        "wsgi_werkzeug_overhead": {
            **row(round(ours, 3), round(theirs, 3), 0.10, "overhead_us"),
            "bare_us": wsgi["bare"],
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
