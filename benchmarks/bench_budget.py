"""Tenant budget pool throughput; prints JSON. ``python benchmarks/bench_budget.py [--quick] [--redis-url U]``

1. ``round_trips_per_s``: reserve + commit pairs per second through a pool ledger (exactly what the
   kernel does around each call), in-process backend vs Redis on 127.0.0.1, from 1 and from 4
   processes (4 processes: the sum of all four; with the in-process backend each process has its own
   pool, with Redis they share one tenant bucket).
2. ``fastapi_requests_per_s``: an async FastAPI endpoint making two (instant) model calls, served by
   one uvicorn worker and driven over 32 keep-alive sockets by a minimal asyncio HTTP client: bare
   app, middleware without a pool, middleware + in-process pool, middleware + Redis pool, and
   middleware + Redis pool with a lease (``lease_usd``, where the installed veronica-mw has it).
   The client runs on the same machine, so absolute figures are a floor; the ratios are what to
   read: ``redis_pool_vs_local_pool`` (target >= 0.7) and ``redis_pool_lease_vs_local_pool``.
3. ``in_process_request_us``: the same endpoint's request (two ``acall_llm``) driven straight through
   the ASGI middleware in this process (no HTTP, no client): bare app, middleware, and middleware +
   in-process pool (the kernel with ``LocalBudgetBackend``: admission, a reservation and a settle per
   call), microseconds per request, best of the rounds. ``--in-process`` prints only these.

Without ``--redis-url`` a private ``redis-server`` is started on a free port (the binary must exist).
``--cluster`` adds ``cluster_pool`` and ``cluster_pool_lease``: the same app on a private 6-node Redis
Cluster (3 masters + 3 replicas, tests/support/redis_cluster.py) given as a plain URL to one node.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import multiprocessing
import os
import pathlib
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from veronica_mw import ExecutionConfig, WrapOptions, get_current_execution_context
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.redis_backend import RedisBudgetBackend

HERE = os.path.dirname(os.path.abspath(__file__))


def _pool(redis_url: str | None) -> BudgetPool:
    backend = RedisBudgetBackend(redis_url) if redis_url else None
    return BudgetPool(1e6, window_s="day", key_func=str, backend=backend, name="bench")


def _round_trips(redis_url: str | None, seconds: float, tenant: str) -> int:
    ledger = _pool(redis_url).ledger(tenant)
    done = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(50):
            if not ledger.reserve(0.001):
                raise RuntimeError("benchmark pool refused a reservation")
            ledger.settle(0.001, 0.001)
        done += 50
    return done


def _worker(args: tuple[str | None, float, str, Any]) -> int:
    redis_url, seconds, tenant, start_at = args
    time.sleep(max(0.0, start_at - time.time()))
    return _round_trips(redis_url, seconds, tenant)


def round_trips(redis_url: str | None, processes: int, seconds: float) -> float:
    if processes == 1:
        _round_trips(redis_url, min(0.2, seconds), "warmup")
        return _round_trips(redis_url, seconds, f"t1-{time.time()}") / seconds
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 1.5  # past every child's import time
    with ctx.Pool(processes) as pool:
        counts = pool.map(_worker, [(redis_url, seconds, f"t4-{start_at}", start_at)] * processes)
    return sum(counts) / seconds


# -- the FastAPI app (built in the uvicorn subprocess from BENCH_MODE / BENCH_REDIS_URL) ---------------


def make_app() -> Any:
    from fastapi import FastAPI

    from veronica_mw.web.asgi import VeronicaASGIMiddleware

    mode = os.environ["BENCH_MODE"]
    windows: list[float] = []  # BENCH_PROBE: the worst loop oversleep of each 0.25 s window

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        task = asyncio.ensure_future(_probe(windows)) if os.environ.get("BENCH_PROBE") else None
        yield
        if task is not None:
            task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.get("/lag")
    async def lag() -> list[float]:
        taken = list(windows)
        windows.clear()
        return taken
    options = WrapOptions(cost_estimate_hint=0.001, cost_fn=lambda r: 0.001)

    @app.get("/chat")
    async def chat() -> dict[str, str]:
        ctx = get_current_execution_context()
        if ctx is not None:
            await ctx.acall_llm(lambda: "ok", options=options)
            await ctx.acall_llm(lambda: "ok", options=options)
        return {"reply": "ok"}

    if mode == "bare":
        return app
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)
    pool = None
    if mode != "middleware":
        url = os.environ.get("BENCH_REDIS_URL") if mode.startswith("redis_pool") else None
        url = os.environ.get("BENCH_CLUSTER_URL") if mode.startswith("cluster_pool") else url
        lease: dict[str, float] = {"lease_usd": 0.5} if mode.endswith("_pool_lease") else {}
        pool = BudgetPool(
            1e6,
            window_s="day",
            key_func=lambda scope: "bench-tenant",
            backend=RedisBudgetBackend(url) if url else None,
            name="benchweb",
            **lease,  # type: ignore[arg-type]
        )
    return VeronicaASGIMiddleware(app, config=config, budget_pool=pool, exclude_paths=["/lag"])


async def _probe(windows: list[float], window_s: float = 0.25) -> None:
    """Sleep 5 ms in a loop; record how late the loop woke us, worst per window (seconds)."""
    worst, window_end = 0.0, time.perf_counter() + window_s
    while True:
        start = time.perf_counter()
        await asyncio.sleep(0.005)
        now = time.perf_counter()
        worst = max(worst, now - start - 0.005)
        if now >= window_end:
            windows.append(worst)
            worst, window_end = 0.0, now + window_s


async def _asgi_round(app: Any, n: int) -> float:
    scope = {"type": "http", "path": "/chat", "method": "GET", "headers": [], "query_string": b""}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    start = time.perf_counter()
    for _ in range(n):
        await app(scope, receive, send)
    return (time.perf_counter() - start) / n


def _asgi_chat_app() -> Any:
    options = WrapOptions(cost_estimate_hint=0.001, cost_fn=lambda r: 0.001)
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
    body = {"type": "http.response.body", "body": b"ok", "more_body": False}

    async def chat(scope: Any, receive: Any, send: Any) -> None:
        ctx = get_current_execution_context()
        if ctx is not None:
            await ctx.acall_llm(lambda: "ok", options=options)
            await ctx.acall_llm(lambda: "ok", options=options)
        await send(start)
        await send(body)

    return chat


class _FreeParent:
    """A budget parent that approves everything at no cost: what the kernel's budget-parent path
    costs on its own (``kernel_parent`` row), apart from any pool."""

    blocking_free = True

    def reserve(self, amount_usd: float) -> bool:
        return True

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        return None

    async def areserve(self, amount_usd: float) -> bool:
        return True

    async def asettle(self, reserved_usd: float, actual_usd: float) -> None:
        return None


class _FreePool:
    async def aadmit(self, scope: Any) -> Any:
        from veronica_mw.pools.budget_pool import Admission

        return Admission(True, ledger=_FreeParent())  # type: ignore[arg-type]


def in_process_requests(rounds: int, n: int) -> dict[str, Any]:
    """µs per request of the chat endpoint called straight through the ASGI middleware."""
    from veronica_mw.web.asgi import VeronicaASGIMiddleware

    app = _asgi_chat_app()
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)
    pool = BudgetPool(1e6, window_s="day", key_func=lambda scope: "bench-tenant", name="benchlocal")
    stacks = {
        "bare": app,
        "middleware": VeronicaASGIMiddleware(app, config=config),
        "kernel_parent": VeronicaASGIMiddleware(app, config=config, budget_pool=_FreePool()),  # type: ignore[arg-type]
        "local_pool": VeronicaASGIMiddleware(app, config=config, budget_pool=pool),
    }
    best = {name: float("inf") for name in stacks}

    async def run() -> None:
        for stack in stacks.values():
            await _asgi_round(stack, min(n, 2000))  # warm-up
        for _ in range(rounds):  # interleaved: a burst of load hits every stack alike
            for name, stack in stacks.items():
                best[name] = min(best[name], await _asgi_round(stack, n))

    asyncio.run(run())
    per = {k: round(v * 1e6, 3) for k, v in best.items()}
    return {
        "per_request_us": per,
        "local_pool_added_us": round(per["local_pool"] - per["middleware"], 3),
        # Of which the kernel's budget-parent path (a free parent) and the pool itself:
        "kernel_parent_path_us": round(per["kernel_parent"] - per["middleware"], 3),
        "pool_itself_us": round(per["local_pool"] - per["kernel_parent"], 3),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


FAILED: dict[str, int] = {}  # non-200 answers seen by _drive, by status line (a stalled loop's
# Redis calls time out: with on_backend_error="deny" those requests are answered 503)


async def _drive(url: str, seconds: float, concurrency: int) -> int:
    """Keep-alive GET /chat on ``concurrency`` raw connections; returns the 200 responses counted
    (others are counted in ``FAILED``).

    A hand-rolled HTTP/1.1 loop: an httpx client needs several times the server's CPU per request,
    so with it this benchmark would measure the client.
    """
    host, port = url.removeprefix("http://").split(":")
    request = f"GET /chat HTTP/1.1\r\nhost: {host}\r\n\r\n".encode()
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.perf_counter() < deadline:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                if head.startswith(b"HTTP/1.1 200"):
                    done += 1
                else:
                    status = head.split(b"\r\n", 1)[0].decode("latin-1")
                    FAILED[status] = FAILED.get(status, 0) + 1
        finally:
            writer.close()
            await writer.wait_closed()

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return done


class Server:
    """One single-worker uvicorn process serving :func:`make_app` in ``mode``."""

    def __init__(self, mode: str, redis_url: str, probe: bool = False, cluster_url: str = "") -> None:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "BENCH_MODE": mode, "BENCH_REDIS_URL": redis_url}
        env["BENCH_CLUSTER_URL"] = cluster_url
        if probe:
            env["BENCH_PROBE"] = "1"
        args = [
            sys.executable,
            "-m",
            "uvicorn",
            "bench_budget:make_app",
            "--factory",
            "--app-dir",
            HERE,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        self.proc = subprocess.Popen(args, env=env)
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.url + "/chat", timeout=1).raise_for_status()
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("uvicorn did not start") from None
                time.sleep(0.05)

    def rps(self, seconds: float) -> float:
        return asyncio.run(_drive(self.url, seconds, 32)) / seconds

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _start_redis(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: install it or pass --redis-url")
    port = _free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
        ],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.02)
    raise SystemExit("redis-server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best of each is kept")
    parser.add_argument("--http-only", action="store_true", help="skip the round-trips figures")
    parser.add_argument("--cluster", action="store_true", help="also on a private 6-node Redis Cluster")
    parser.add_argument("--in-process", action="store_true", help="only the in-process request figures")
    parser.add_argument("--requests", type=int, default=20_000, help="in-process requests per round")
    opts = parser.parse_args()
    seconds = 0.5 if opts.quick else 2.0
    rounds = 1 if opts.quick else opts.rounds
    requests = 2_000 if opts.quick else opts.requests
    if opts.in_process:
        inproc = in_process_requests(max(rounds, 3), requests)
        print(json.dumps({"python": platform.python_version(), "in_process_request_us": inproc}, indent=2))
        return
    redis_proc = None
    trips: dict[str, float] = {}
    rps: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        redis_url = opts.redis_url
        if redis_url is None:
            redis_proc, redis_url = _start_redis(tmp)
        modes = ["bare", "middleware", "local_pool", "redis_pool"]
        if "lease_usd" in inspect.signature(BudgetPool).parameters:
            modes.append("redis_pool_lease")
        cluster = None
        if opts.cluster:
            sys.path.insert(0, os.path.dirname(HERE))
            from tests.support.redis_cluster import LocalRedisCluster

            cluster = LocalRedisCluster(pathlib.Path(tmp) / "cluster")
            cluster.start()
            modes += ["cluster_pool", "cluster_pool_lease"]
        cluster_url = cluster.url if cluster is not None else ""
        servers = {mode: Server(mode, redis_url, cluster_url=cluster_url) for mode in modes}
        try:
            for _ in range(rounds):  # interleaved, best of: background load hits every figure alike
                for name, url, procs in (
                    ()
                    if opts.http_only
                    else (
                        ("in_process", None, 1),
                        ("in_process", None, 4),
                        ("redis", redis_url, 1),
                        ("redis", redis_url, 4),
                    )
                ):
                    key = f"{name}_{procs}_proc{'s' if procs > 1 else ''}"
                    trips[key] = max(trips.get(key, 0.0), round_trips(url, procs, seconds))
                for mode, server in servers.items():
                    rps[mode] = max(rps.get(mode, 0.0), server.rps(seconds))
        finally:
            for server in servers.values():
                server.stop()
            if redis_proc is not None:
                redis_proc.terminate()
                redis_proc.wait(10)
            if cluster is not None:
                cluster.stop()
    inproc = in_process_requests(max(rounds, 3), requests)
    result: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "seconds_per_figure": seconds,
        "rounds": rounds,
        "round_trips_per_s": {k: round(v) for k, v in trips.items()},
        "fastapi_requests_per_s": {k: round(v) for k, v in rps.items()},
        "redis_pool_vs_no_pool": round(rps["redis_pool"] / rps["middleware"], 3),
        "redis_pool_vs_local_pool": round(rps["redis_pool"] / rps["local_pool"], 3),
        "in_process_request_us": inproc,
    }
    if "redis_pool_lease" in rps:
        result["redis_pool_lease_vs_local_pool"] = round(rps["redis_pool_lease"] / rps["local_pool"], 3)
    if "cluster_pool" in rps:
        result["cluster_pool_vs_redis_pool"] = round(rps["cluster_pool"] / rps["redis_pool"], 3)
        result["cluster_pool_lease_vs_redis_pool_lease"] = round(
            rps["cluster_pool_lease"] / rps["redis_pool_lease"], 3
        )
    if FAILED:
        result["non_200_responses"] = dict(FAILED)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
