"""ASGI middleware overhead and WebSocket containment latency; prints JSON.

    python benchmarks/bench_asgi.py [--requests 20000] [--http-requests 3000] [--ws-runs 5]

Per-request overhead of ``VeronicaASGIMiddleware`` against the bare app and against a minimal
pass-through middleware that only sets/resets a ContextVar and wraps ``send`` to know whether the
response started — (a) calling the middleware directly around a minimal ASGI app, (b) through
httpx's ``ASGITransport``; plus the latency from the limit to the 1008 close frame on a real
WebSocket (uvicorn + websockets on 127.0.0.1). Best of several rounds, to damp scheduler noise.

``--audit`` measures instead an ``AuditLog`` (no bodies) on the middleware: ``audit.per_request_us``
is a request whose endpoint makes one ``call_llm`` (4 audit records: context start, call start and
end, context end), with and without the log, interleaved; ``request_path_added_us`` their
difference (the writer thread runs meanwhile, competing for the GIL, as in production).
``audit.writer`` drives such requests flat out from one thread for a few seconds with a small queue:
``sustained_records_per_s`` is what the one writer thread wrote per second while the queue was
full (the rate past which records are dropped and counted), ``dropped`` how many were, and
``request_us_while_dropping`` the request time meanwhile — the request path never waits for the
disk, so it is no slower than with a free-running writer.

The middleware builds a request's context only when the request asks for it, so the direct calls
are measured twice: ``direct_call`` (the endpoint never asks: most requests of an app) and
``direct_call_context_used`` (the endpoint calls ``get_current_execution_context()`` once, which
for the middleware builds the context; for the bare app and the minimal middleware it returns None).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from contextvars import ContextVar
from typing import Any

import httpx

from veronica_mw import ExecutionConfig, ExecutionContext, get_current_execution_context
from veronica_mw.cli._demo_websocket import run_websocket_runaway
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.types import ASGIApp, Message, Receive, Scope, Send

CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=20, max_retries_total=3, timeout_ms=0)
_minimal_var: ContextVar[object] = ContextVar("minimal", default=None)
_START: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/plain")],
}
_BODY: Message = {"type": "http.response.body", "body": b"ok", "more_body": False}


async def bare_app(scope: Scope, receive: Receive, send: Send) -> None:
    await send(_START)
    await send(_BODY)


async def context_app(scope: Scope, receive: Receive, send: Send) -> None:
    get_current_execution_context()
    await send(_START)
    await send(_BODY)


class MinimalMiddleware:
    """The reference: a ContextVar set/reset and a send wrapper tracking response start."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def wrapped(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        token = _minimal_var.set(object())
        try:
            await self.app(scope, receive, wrapped)
        finally:
            _minimal_var.reset(token)


def _stacks(app: ASGIApp) -> dict[str, ASGIApp]:
    return {
        "bare": app,
        "minimal": MinimalMiddleware(app),
        "veronica": VeronicaASGIMiddleware(app, config=CONFIG),
    }


async def _direct_round(app: ASGIApp, n: int) -> float:
    scope: Scope = {"type": "http", "path": "/", "method": "GET", "headers": [], "query_string": b""}

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        return None

    start = time.perf_counter()
    for _ in range(n):
        await app(scope, receive, send)
    return (time.perf_counter() - start) / n


async def _httpx_round(app: ASGIApp, n: int) -> float:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        await client.get("/")  # warm-up
        start = time.perf_counter()
        for _ in range(n):
            await client.get("/")
        return (time.perf_counter() - start) / n


def _summary(per_request: dict[str, float]) -> dict[str, Any]:
    bare, minimal, veronica = per_request["bare"], per_request["minimal"], per_request["veronica"]
    over_min, over_ver = minimal - bare, veronica - bare
    return {
        "per_request_us": {k: round(v * 1e6, 3) for k, v in per_request.items()},
        "requests_per_s": {k: round(1 / v) for k, v in per_request.items()},
        "overhead_us_vs_bare": {"minimal": round(over_min * 1e6, 3), "veronica": round(over_ver * 1e6, 3)},
        "overhead_ratio_veronica_to_minimal": round(over_ver / over_min, 2) if over_min > 0 else None,
    }


async def _measure(kind: str, n: int, rounds: int, app: ASGIApp = bare_app) -> dict[str, Any]:
    measure = _direct_round if kind == "direct" else _httpx_round
    stacks = _stacks(app)
    best = {name: float("inf") for name in stacks}
    for _ in range(rounds):
        for name, stack in stacks.items():  # interleaved, so drift hits all three alike
            best[name] = min(best[name], await measure(stack, n))
    return _summary(best)


def _context_cost_us(rounds: int, n: int = 50_000) -> float:
    """Best per-context cost of what the middleware does with the kernel: create, enter, exit."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            with ExecutionContext(CONFIG):
                pass
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def _one_call_app() -> ASGIApp:
    from veronica_mw import WrapOptions

    options = WrapOptions(operation_name="chat", model="gpt-4o-mini", cost_estimate_hint=0.0001)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_current_execution_context()
        if ctx is not None:
            ctx.call_llm(lambda: "ok", options=options)
        await send(_START)
        await send(_BODY)

    return app


def _audit(rounds: int, n: int, seconds: float) -> dict[str, Any]:
    from veronica_mw import AuditLog

    _call_app = _one_call_app()
    with tempfile.TemporaryDirectory() as tmp:
        audit = AuditLog(f"{tmp}/free", queue_size=100_000)
        stacks = {
            "no_audit": VeronicaASGIMiddleware(_call_app, config=CONFIG),
            "audit": VeronicaASGIMiddleware(_call_app, config=CONFIG, audit=audit),
        }

        async def measure() -> dict[str, float]:
            best = {name: float("inf") for name in stacks}
            for _ in range(rounds):  # interleaved; the writer drains between rounds
                for name, stack in stacks.items():
                    best[name] = min(best[name], await _direct_round(stack, n))
                audit.flush()
            return best

        best = asyncio.run(measure())
        free_dropped = audit.dropped
        audit.close()
        # Flat out with a small queue: the writer falls behind and records are dropped.
        small = AuditLog(f"{tmp}/small", queue_size=1_000)
        app = VeronicaASGIMiddleware(_call_app, config=CONFIG, audit=small)

        async def flood() -> tuple[int, float]:
            requests, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                await _direct_round(app, 200)
                requests += 200
            return requests, time.perf_counter() - start

        written_before = small.stats()["written"]
        requests, elapsed = asyncio.run(flood())
        written = small.stats()["written"] - written_before  # while the queue was full (before flush)
        dropped = small.dropped
        small.close()
    per = {k: round(v * 1e6, 3) for k, v in best.items()}
    return {
        "per_request_us": per,
        "request_path_added_us": round(per["audit"] - per["no_audit"], 3),
        "dropped_with_room": free_dropped,
        "writer": {
            "seconds": round(elapsed, 2),
            "records_offered_per_s": round(requests * 4 / elapsed),
            "sustained_records_per_s": round(written / elapsed),
            "dropped": dropped,
            "request_us_while_dropping": round(elapsed / requests * 1e6, 3),
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="direct calls per round")
    parser.add_argument("--http-requests", type=int, default=3_000, help="httpx requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ws-runs", type=int, default=5)
    parser.add_argument("--audit", action="store_true", help="only the audit-log figures")
    args = parser.parse_args(argv)
    if args.audit:
        return {"python": sys.version.split()[0], "audit": _audit(args.rounds, args.requests // 4, 3.0)}
    latencies = []
    for _ in range(args.ws_runs):
        run = run_websocket_runaway()
        assert run["close_code"] == 1008 and run["contained_ops"] == 10, run
        latencies.append(run["latency_ms"])
    direct = asyncio.run(_measure("direct", args.requests, args.rounds))
    used = asyncio.run(_measure("direct", args.requests, args.rounds, context_app))
    result = {
        "python": sys.version.split()[0],
        "direct_call": direct,
        "direct_call_context_used": used,
        "httpx_asgi_transport": asyncio.run(_measure("httpx", args.http_requests, args.rounds)),
        # For reference: what the kernel's context costs on its own (created, entered, exited).
        "execution_context_create_enter_exit_us": round(_context_cost_us(args.rounds), 3),
        "websocket_limit_to_close_ms": {
            "runs": args.ws_runs,
            "median": round(statistics.median(latencies), 3),
            "min": round(min(latencies), 3),
            "max": round(max(latencies), 3),
        },
    }
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
