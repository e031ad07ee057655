"""Contexts nested in a request (ASGI, WSGI) or a WebSocket session never escape its limits, and
soft limits reach the middlewares' ``on_warn`` and the ``x-veronica-warning`` header."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import anyio
import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from werkzeug.test import Client

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionEvent,
    ExecutionHalted,
    get_current_execution_context,
)
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

from .conftest import LiveServer

REQUEST = ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=0)
ROOMY = ExecutionConfig(max_cost_usd=1.0, max_steps=100, max_retries_total=0)
WARNED = ExecutionConfig(max_cost_usd=1.0, max_steps=4, max_retries_total=0, warn_at=(0.5, 0.75))


def sub_agent_calls(n: int) -> dict[str, Any]:
    """App code that builds its own context (a sub-agent with generous limits) and calls n times."""
    request_ctx = get_current_execution_context()
    with ExecutionContext(ROOMY, name="sub-agent") as sub:
        for _ in range(n):
            sub.call_llm(lambda: "answer")
    assert request_ctx is not None
    steps = request_ctx.get_snapshot().step_count
    return {"parent_is_request": sub.parent is request_ctx, "request_steps": steps}


def http(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def starlette_app() -> Starlette:
    async def calls(request: Request) -> JSONResponse:
        return JSONResponse(sub_agent_calls(int(request.path_params["n"])))

    async def slow(request: Request) -> JSONResponse:
        request_ctx = get_current_execution_context()
        assert request_ctx is not None
        inner = ExecutionContext(ROOMY)
        deadline = time.monotonic() + 30  # hang guard only
        while not request_ctx.aborted and time.monotonic() < deadline:
            await anyio.sleep(0.005)  # the request's deadline fires meanwhile
        inner.call_llm(lambda: "never runs")
        return JSONResponse({})

    return Starlette(routes=[Route("/calls/{n:int}", calls), Route("/slow", slow)])


# -- ASGI ----------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_asgi_a_context_built_in_the_endpoint_counts_in_the_request() -> None:
    app = VeronicaASGIMiddleware(starlette_app(), config=REQUEST)
    async with http(app) as client:
        ok = await client.get("/calls/3")
        refused = await client.get("/calls/5")
    assert ok.json() == {"parent_is_request": True, "request_steps": 3}
    assert refused.status_code == 429
    body = refused.json()
    # The client sees the request's own limits: it was the request's step limit that was reached.
    assert (body["reason"], body["steps_used"], body["limits"]["max_steps"]) == ("step_limit", 3, 3)


@pytest.mark.anyio
async def test_asgi_the_request_timeout_stops_calls_in_nested_contexts() -> None:
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0, timeout_ms=50)
    app = VeronicaASGIMiddleware(starlette_app(), config=config)
    async with http(app) as client:
        response = await client.get("/slow")
    assert response.status_code == 429 and response.json()["reason"] == "timeout"


@pytest.mark.anyio
async def test_asgi_a_request_served_inside_an_entered_context_is_its_child() -> None:
    app = VeronicaASGIMiddleware(starlette_app(), config=ExecutionConfig(1.0, 100, 0))
    with ExecutionContext(ExecutionConfig(1.0, 2, 0), name="job") as job:
        async with http(app) as client:
            response = await client.get("/calls/5")
    assert response.status_code == 429 and "ancestor 'job'" in response.json()["detail"]
    assert job.get_snapshot().step_count == 2 and [c.name for c in job.children] == ["/calls/5"]


@pytest.mark.anyio
async def test_asgi_on_warn_and_the_warning_header(caplog: pytest.LogCaptureFixture) -> None:
    events: list[ExecutionEvent] = []
    app = VeronicaASGIMiddleware(starlette_app(), config=WARNED, usage_headers=True, on_warn=events.append)
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        async with http(app) as client:
            quiet = await client.get("/calls/1")
            warned = await client.get("/calls/3")
    assert "x-veronica-warning" not in quiet.headers
    assert warned.headers["x-veronica-warning"] == "steps 0.75"
    assert [(e.data["dimension"], e.data["fraction"], e.data["used"]) for e in events] == [
        ("steps", 0.5, 2),
        ("steps", 0.75, 3),
    ]
    assert all(e.kind == "soft_limit" and e.data["context"] == "/calls/3" for e in events)
    assert len([r for r in caplog.records if "soft_limit" in r.getMessage()]) == 2


def test_middlewares_reject_a_non_callable_on_warn() -> None:
    with pytest.raises(TypeError, match="on_warn"):
        VeronicaASGIMiddleware(starlette_app(), config=WARNED, on_warn="print")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_warn"):
        VeronicaWSGIMiddleware(Flask(__name__), config=WARNED, on_warn=1)  # type: ignore[arg-type]


# -- WSGI ----------------------------------------------------------------------------------------------


def flask_app() -> Flask:
    app = Flask(__name__)

    @app.get("/calls/<int:n>")
    def calls(n: int) -> dict[str, Any]:
        return sub_agent_calls(n)

    return app


def test_wsgi_a_context_built_in_the_view_counts_in_the_request() -> None:
    flask = flask_app()
    flask.wsgi_app = VeronicaWSGIMiddleware(flask.wsgi_app, config=REQUEST)  # type: ignore[method-assign]
    client = Client(flask)
    ok = client.get("/calls/3")
    refused = client.get("/calls/4")
    assert ok.json == {"parent_is_request": True, "request_steps": 3}
    assert refused.status_code == 429
    body = json.loads(refused.get_data())
    assert (body["reason"], body["steps_used"], body["limits"]["max_steps"]) == ("step_limit", 3, 3)


def test_wsgi_on_warn_and_the_warning_header() -> None:
    events: list[ExecutionEvent] = []
    flask = flask_app()
    flask.wsgi_app = VeronicaWSGIMiddleware(  # type: ignore[method-assign]
        flask.wsgi_app, config=WARNED, usage_headers=True, on_warn=events.append
    )
    response = Client(flask).get("/calls/2")
    assert response.status_code == 200
    assert response.headers["x-veronica-warning"] == "steps 0.5"
    assert [(e.data["dimension"], e.data["fraction"]) for e in events] == [("steps", 0.5)]


def test_wsgi_a_raising_on_warn_is_logged_and_the_request_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: ExecutionEvent) -> None:
        raise RuntimeError("pager down")

    flask = flask_app()
    flask.wsgi_app = VeronicaWSGIMiddleware(flask.wsgi_app, config=WARNED, on_warn=broken)  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="veronica_mw"):
        response = Client(flask).get("/calls/4")
    assert response.status_code == 200 and response.json == {"parent_is_request": True, "request_steps": 4}
    assert any("on_warn callback" in r.getMessage() for r in caplog.records)


# -- WebSocket -----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_websocket_session_timeout_stops_calls_in_a_nested_context(live_server: Any) -> None:
    seen: dict[str, Any] = {}
    done = threading.Event()

    async def agent(ws: WebSocket) -> None:
        try:
            await ws.accept()
            session = get_current_execution_context()
            assert session is not None
            inner = ExecutionContext(ROOMY, name="agent")
            deadline = time.monotonic() + 30  # hang guard only
            while not session.aborted and time.monotonic() < deadline:
                await anyio.sleep(0.005)
            try:
                inner.call_llm(lambda: "never runs")
            except ExecutionHalted as halted:
                seen["halt"] = (halted.reason, inner.parent is session)
        finally:
            done.set()

    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0, timeout_ms=100)
    server: LiveServer = live_server(
        VeronicaASGIMiddleware(Starlette(routes=[WebSocketRoute("/agent", agent)]), config=config)
    )
    async with connect(server.ws_url("/agent"), proxy=None, open_timeout=10) as ws:
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert await anyio.to_thread.run_sync(done.wait, 10)
    assert seen["halt"] == ("timeout", True)
    assert ws.close_code == 1008 and ws.close_reason == "timeout"
