"""VeronicaWSGIMiddleware behind a real werkzeug server on 127.0.0.1: concurrency, streaming over a
socket, client disconnects, no ContextVar leaking between requests on one server thread, bad input."""

from __future__ import annotations

import http.client
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask, Response, request, stream_with_context

from veronica_mw import ExecutionConfig, ExecutionContext, WrapOptions, get_current_execution_context
from veronica_mw.web.wsgi import ENVIRON_KEY, VeronicaWSGIMiddleware

from .wsgi_support import HANG_GUARD_S, Probe, drop_connection, get, open_stream, read_until, serve, timers

DISCONNECT_GUARD = 100_000  # chunks; a stream that is never cut off would hit this and fail the test


def make_app(config: Any) -> tuple[Probe, dict[str, Any]]:
    app = Flask(__name__)
    state: dict[str, Any] = {
        "chunk_ctx": [],
        "gen_closed": 0,
        "barrier": threading.Barrier(4, timeout=HANG_GUARD_S),
    }

    @app.get("/together")
    def together() -> dict[str, Any]:
        before = get_current_execution_context()
        state["barrier"].wait()  # all four requests are inside their views at once
        after = get_current_execution_context()
        assert before is after is request.environ[ENVIRON_KEY]
        return {"ctx": id(after), "chain": after.chain_id if after else None}

    @app.get("/stream/<int:n>")
    def stream(n: int) -> Response:
        def body() -> Iterator[str]:
            try:
                for i in range(n):
                    ctx = get_current_execution_context()
                    state["chunk_ctx"].append(ctx)
                    assert ctx is not None
                    ctx.call_llm(lambda: "tok", options=WrapOptions(cost_estimate_hint=0.001))
                    yield f"{i}:{ctx.chain_id}\n"
            finally:
                state["gen_closed"] += 1
                state["ctx_at_close"] = get_current_execution_context()

        return Response(stream_with_context(body()), mimetype="text/plain")

    @app.get("/endless")
    def endless() -> Response:
        state["endless_ctx"] = get_current_execution_context()

        def body() -> Iterator[bytes]:
            try:
                for _ in range(DISCONNECT_GUARD):
                    state["chunk_ctx"].append(get_current_execution_context())
                    yield b"x" * 1024
            finally:
                state["gen_closed"] += 1
                state["ctx_at_close"] = get_current_execution_context()

        return Response(body(), mimetype="application/octet-stream")

    @app.get("/halt")
    def halt() -> str:
        ctx = get_current_execution_context()
        assert ctx is not None
        for _ in range(ctx.config.max_steps + 1):
            ctx.call_llm(lambda: "tok")
        return "unreachable"

    probe = Probe(VeronicaWSGIMiddleware(app.wsgi_app, config=config))
    return probe, state


ROOMY = ExecutionConfig(max_cost_usd=1.0, max_steps=50, max_retries_total=0, timeout_ms=60_000)


def test_concurrent_requests_on_a_threaded_server_each_see_their_own_context() -> None:
    probe, _ = make_app(ROOMY)
    with serve(probe) as server:
        replies: list[Any] = []

        def fetch() -> None:
            replies.append(get(server, "/together"))

        threads = [threading.Thread(target=fetch) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(HANG_GUARD_S)
    assert [r.status for r in replies] == [200] * 4
    assert len({r.json()["chain"] for r in replies}) == 4
    assert probe.seen_on_entry == [None] * 4


def test_streamed_body_over_a_socket_sees_one_live_context_until_closed() -> None:
    probe, state = make_app(ROOMY)
    before = timers()
    with serve(probe) as server:
        reply = get(server, "/stream/4")
        assert probe.closed.wait(HANG_GUARD_S)
    lines = reply.body.decode().splitlines()
    chains = {line.split(":")[1] for line in lines}
    assert reply.status == 200 and len(lines) == 4 and len(chains) == 1
    ctx = state["chunk_ctx"][0]
    assert isinstance(ctx, ExecutionContext) and state["chunk_ctx"] == [ctx] * 4
    assert ctx.get_snapshot().step_count == 4
    assert (state["gen_closed"], state["ctx_at_close"]) == (1, ctx)
    assert timers() == before


def test_client_disconnect_mid_stream_still_closes_the_app_iterable_and_ends_the_context() -> None:
    probe, state = make_app(ROOMY)
    before = timers()
    with serve(probe) as server:
        sock = open_stream(server, "/endless")
        assert b"xxxx" in read_until(sock, b"xxxx")
        drop_connection(sock)
        assert probe.closed.wait(HANG_GUARD_S)
        assert probe.close_calls == 1
        assert get(server, "/stream/1").status == 200  # the server is fine
        assert probe.closed.wait(HANG_GUARD_S)
    assert state["gen_closed"] == 2
    assert len(state["chunk_ctx"]) < DISCONNECT_GUARD
    assert state["endless_ctx"] is not None and state["chunk_ctx"][0] is state["endless_ctx"]
    assert timers() == before


def test_no_context_leaks_to_the_next_request_on_the_same_server_thread() -> None:
    probe, state = make_app(ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0))
    with serve(probe, threaded=False) as server:
        assert get(server, "/stream/2").status == 200
        assert get(server, "/halt").status == 429
        sock = open_stream(server, "/endless")
        read_until(sock, b"xxxx")
        drop_connection(sock)
        assert probe.closed.wait(HANG_GUARD_S)
        partial = get(server, "/stream/5")  # the step limit cuts this one after two chunks
        last = get(server, "/together-missing")
    assert probe.seen_on_entry == [None] * 5
    assert partial.status == 200 and len(partial.body.splitlines()) == 2
    assert last.status == 404


def test_halt_before_the_body_is_a_429_over_the_wire() -> None:
    probe, _ = make_app(ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0))
    with serve(probe) as server:
        reply = get(server, "/halt")
    assert reply.status == 429
    assert reply.headers["content-type"] == "application/problem+json"
    assert "retry-after" not in reply.headers
    assert reply.json()["reason"] == "step_limit"


def test_halt_mid_stream_ends_a_chunked_body_cleanly_over_the_wire(caplog: pytest.LogCaptureFixture) -> None:
    probe, state = make_app(ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=0))
    with caplog.at_level(logging.WARNING, logger="veronica_mw"), serve(probe) as server:
        reply = get(server, "/stream/10")  # http.client raises IncompleteRead on a broken chunked body
        assert probe.closed.wait(HANG_GUARD_S)
    assert reply.status == 200
    assert len(reply.body.decode().splitlines()) == 3
    assert state["gen_closed"] == 1
    messages = [r.getMessage() for r in caplog.records if r.name == "veronica_mw"]
    assert len(messages) == 1 and "reason=step_limit" in messages[0]


def test_malformed_environ_and_failing_config_never_take_the_server_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def pick(environ: dict[str, Any]) -> ExecutionConfig:
        if environ.get("HTTP_X_BREAK") == "config":
            raise RuntimeError("tenant service down")
        return ExecutionConfig(
            max_cost_usd=1.0, max_steps=int(environ["PATH_INFO"].count("/")), max_retries_total=0
        )

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        ctx = environ.get(ENVIRON_KEY)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"steps": ctx.config.max_steps if ctx else None}).encode()]

    wrapped = VeronicaWSGIMiddleware(app, config=pick)

    def mangler(environ: dict[str, Any], start_response: Any) -> Any:
        # Simulates a buggy server/proxy layer in front of the middleware.
        if environ.get("HTTP_X_BREAK") == "environ":
            del environ["PATH_INFO"]
            environ["SCRIPT_NAME"] = None
        return wrapped(environ, start_response)

    with caplog.at_level(logging.ERROR, logger="veronica_mw"), serve(mangler) as server:
        broken_environ = get(server, "/a/b", headers={"X-Break": "environ"})
        broken_config = get(server, "/a/b", headers={"X-Break": "config"})
        healthy = get(server, "/a/b")
    assert (broken_environ.status, broken_environ.json()) == (200, {"steps": 0})
    assert (broken_config.status, broken_config.json()) == (200, {"steps": 0})
    assert (healthy.status, healthy.json()) == (200, {"steps": 2})
    assert len([r for r in caplog.records if r.name == "veronica_mw"]) == 2


def test_http_client_sees_a_complete_response_after_a_refusal() -> None:
    probe, _ = make_app(ExecutionConfig(max_cost_usd=1.0, max_steps=0, max_retries_total=0))
    with serve(probe) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=HANG_GUARD_S)
        conn.request("GET", "/stream/3")
        response = conn.getresponse()
        body = response.read()
        conn.close()
    assert response.status == 429
    assert int(response.getheader("content-length") or -1) == len(body)
    assert json.loads(body)["reason"] == "step_limit"
