"""Per-request overhead of VeronicaWSGIMiddleware. Prints JSON: ``python benchmarks/bench_wsgi.py [--quick]``.

Three stacks around the same app: the bare app, a *minimal wrapper* that only keeps a ContextVar set
while the app runs and while its body is iterated (the least any body-lifetime containment can do),
and the middleware with a static ``ExecutionConfig``. Each is driven two ways: called directly like a
server does (call, iterate, close) and through werkzeug's test client. Figures are microseconds per
request, the best of several interleaved rounds. ``ratio_vs_minimal`` is middleware time divided by
minimal-wrapper time (target: within 2x); ``overhead_us`` is middleware time minus bare time, and
``overhead_ratio_vs_minimal`` compares the two overheads.

The middleware arms a request's context (its deadline timer) only when the request uses it, so
``direct_plain_context_used`` repeats ``direct_plain`` with an app that calls
``get_current_execution_context()`` once (for the bare app and the minimal wrapper it returns None).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from flask import Flask
from werkzeug.test import Client

from veronica_mw import ExecutionConfig, get_current_execution_context
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=100, max_retries_total=2, timeout_ms=30_000)
_current: ContextVar[object | None] = ContextVar("bench_current", default=None)


class MinimalWrapper:
    """Keeps a ContextVar set during the app call and each next()/close() of its body; nothing else."""

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        marker = object()
        token = _current.set(marker)
        try:
            result = self.app(environ, start_response)
        finally:
            _current.reset(token)
        return _MinimalBody(marker, result)


class _MinimalBody:
    __slots__ = ("_marker", "_result", "_it")

    def __init__(self, marker: object, result: Iterable[bytes]) -> None:
        self._marker = marker
        self._result = result
        self._it = iter(result)

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        token = _current.set(self._marker)
        try:
            return next(self._it)
        finally:
            _current.reset(token)

    def close(self) -> None:
        close = getattr(self._result, "close", None)
        if close is not None:
            token = _current.set(self._marker)
            try:
                close()
            finally:
                _current.reset(token)


def plain_app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


def context_app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    get_current_execution_context()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


def streaming_app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return (b"chunk" for _ in range(10))


def flask_app() -> WSGIApplication:
    app = Flask("bench")

    @app.get("/")
    def index() -> str:
        return "hello"

    return app.wsgi_app


def _start_response(
    status: str, headers: list[tuple[str, str]], exc_info: Any = None
) -> Callable[[bytes], Any]:
    return _discard


def _discard(data: bytes) -> None:
    return None


def direct(app: WSGIApplication) -> Callable[[int], None]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "QUERY_STRING": "",
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
    }

    def run(n: int) -> None:
        for _ in range(n):
            result = app(dict(environ), _start_response)
            for _chunk in result:
                pass
            close = getattr(result, "close", None)
            if close is not None:
                close()

    return run


def via_client(app: WSGIApplication) -> Callable[[int], None]:
    client = Client(app)

    def run(n: int) -> None:
        for _ in range(n):
            client.get("/").close()

    return run


def compare(
    app: WSGIApplication, driver: Callable[[WSGIApplication], Callable[[int], None]], n: int, repeats: int
) -> dict[str, float]:
    stacks = {
        "bare_us": driver(app),
        "minimal_wrapper_us": driver(MinimalWrapper(app)),
        "veronica_us": driver(VeronicaWSGIMiddleware(app, config=CONFIG)),
    }
    for run in stacks.values():
        run(max(1, n // 10))  # warm up
    samples: dict[str, list[float]] = {name: [] for name in stacks}
    # Interleaved rounds, so a burst of load on a shared machine hits every stack alike; the
    # fastest round is the least disturbed one (timeit's reasoning).
    for _ in range(repeats):
        for name, run in stacks.items():
            gc.collect()
            start = time.perf_counter()
            run(n)
            samples[name].append((time.perf_counter() - start) / n * 1e6)
    bare, minimal, veronica = (round(min(samples[name]), 3) for name in stacks)
    return {
        "bare_us": bare,
        "minimal_wrapper_us": minimal,
        "veronica_us": veronica,
        "overhead_us": round(veronica - bare, 3),
        "minimal_overhead_us": round(minimal - bare, 3),
        "ratio_vs_minimal": round(veronica / minimal, 3),
        "overhead_ratio_vs_minimal": round((veronica - bare) / (minimal - bare), 3),
        "ratio_vs_bare": round(veronica / bare, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    args = parser.parse_args()
    n, repeats = (500, 3) if args.quick else (20_000, 7)
    client_n = max(100, n // 10)
    results = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "config": CONFIG.as_dict(),
        "direct_plain": compare(plain_app, direct, n, repeats),
        "direct_plain_context_used": compare(context_app, direct, n, repeats),
        "direct_streaming_10_chunks": compare(streaming_app, direct, n, repeats),
        "werkzeug_client_plain": compare(plain_app, via_client, client_n, repeats),
        "werkzeug_client_flask": compare(flask_app(), via_client, client_n, repeats),
    }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
