"""The ExecutionHalted of a context nested in a request is the request's refusal: a 429 (or the tenant
pool's status) problem+json with the request's usage and limits, never a 500 -- in ASGI (Starlette,
FastAPI), WSGI (Flask) and WebSocket sessions (close 1008)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from werkzeug.test import Client

from veronica_mw import BudgetPool, ExecutionConfig, ExecutionContext, WrapOptions
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

from .conftest import LiveServer

REQUEST = ExecutionConfig(max_cost_usd=1.0, max_steps=100, max_retries_total=0)
ROOMY = ExecutionConfig(max_cost_usd=1000.0, max_steps=1000, max_retries_total=0)
SPEND = WrapOptions(cost_estimate_hint=0.3, cost_fn=lambda _: 0.3)


class Calls:
    """How many times the endpoint's model really ran."""

    def __init__(self) -> None:
        self.ran = 0

    def model(self) -> str:
        self.ran += 1
        return "answer"

    def spend(self, n: int) -> None:
        """The endpoint's own generous context (nested in the request's), n calls of 0.3."""
        with ExecutionContext(ROOMY, name="sub-agent") as sub:
            for _ in range(n):
                sub.call_llm(self.model, options=SPEND)


def http(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def starlette_app(calls: Calls) -> Starlette:
    async def endpoint(request: Request) -> JSONResponse:
        calls.spend(int(request.path_params["n"]))
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/spend/{n:int}", endpoint)])


def fastapi_app(calls: Calls) -> FastAPI:
    app = FastAPI()

    @app.get("/spend/{n}")
    def endpoint(n: int) -> dict[str, bool]:
        calls.spend(n)
        return {"ok": True}

    return app


def assert_request_refusal(status: int, body: dict[str, Any], expected: int = 429) -> None:
    assert status == expected
    assert body["reason"] == "budget_exceeded"
    # The request's usage and limits: three calls of 0.3 against the request's 1.0.
    assert (body["steps_used"], body["cost_usd_used"]) == (3, pytest.approx(0.9))
    assert body["limits"]["max_cost_usd"] == 1.0


@pytest.mark.anyio
@pytest.mark.parametrize("make", [starlette_app, fastapi_app])
async def test_asgi_a_nested_halt_is_the_requests_429(make: Any) -> None:
    calls = Calls()
    app = VeronicaASGIMiddleware(make(calls), config=REQUEST)
    async with http(app) as client:
        ok = await client.get("/spend/3")
        refused = await client.get("/spend/5")
    assert ok.status_code == 200
    assert refused.headers["content-type"] == "application/problem+json"
    assert_request_refusal(refused.status_code, refused.json())
    assert calls.ran == 6  # the 4th call of the second request never ran


@pytest.mark.anyio
async def test_asgi_a_nested_halt_under_a_tenant_pool_gets_the_pools_answer() -> None:
    calls = Calls()
    pool = BudgetPool(1.0, window_s=3600, key_func=lambda scope: "tenant")
    roomy_request = ExecutionConfig(max_cost_usd=50.0, max_steps=100, max_retries_total=0)
    app = VeronicaASGIMiddleware(starlette_app(calls), config=roomy_request, budget_pool=pool)
    async with http(app) as client:
        refused = await client.get("/spend/5")
    assert refused.status_code == 429 and refused.headers["content-type"] == "application/problem+json"
    body = refused.json()
    assert body["reason"] == "budget_exceeded" and body["limits"]["max_cost_usd"] == 50.0
    assert (body["steps_used"], body["cost_usd_used"]) == (3, pytest.approx(0.9))
    assert calls.ran == 3


def flask_app(calls: Calls) -> Flask:
    app = Flask(__name__)

    @app.get("/spend/<int:n>")
    def endpoint(n: int) -> dict[str, bool]:
        calls.spend(n)
        return {"ok": True}

    return app


def test_wsgi_a_nested_halt_is_the_requests_429() -> None:
    calls = Calls()
    flask = flask_app(calls)
    flask.wsgi_app = VeronicaWSGIMiddleware(flask.wsgi_app, config=REQUEST)  # type: ignore[method-assign]
    client = Client(flask)
    assert client.get("/spend/3").status_code == 200
    refused = client.get("/spend/5")
    assert refused.headers["content-type"] == "application/problem+json"
    assert_request_refusal(refused.status_code, json.loads(refused.get_data()))
    assert calls.ran == 6


def test_wsgi_a_nested_halt_under_a_tenant_pool_gets_the_pools_answer() -> None:
    calls = Calls()
    pool = BudgetPool(1.0, window_s=3600, key_func=lambda environ: "tenant")
    flask = flask_app(calls)
    roomy_request = ExecutionConfig(max_cost_usd=50.0, max_steps=100, max_retries_total=0)
    flask.wsgi_app = VeronicaWSGIMiddleware(  # type: ignore[method-assign]
        flask.wsgi_app, config=roomy_request, budget_pool=pool
    )
    refused = Client(flask).get("/spend/5")
    body = json.loads(refused.get_data())
    assert refused.status_code == 429 and body["reason"] == "budget_exceeded"
    assert (body["steps_used"], body["limits"]["max_cost_usd"]) == (3, 50.0)
    assert calls.ran == 3


@pytest.mark.anyio
async def test_websocket_a_nested_halt_closes_the_session_with_1008(live_server: Any) -> None:
    calls = Calls()

    async def agent(ws: WebSocket) -> None:
        await ws.accept()
        while True:
            await ws.receive_text()
            calls.spend(1)
            await ws.send_text("spent")

    app = VeronicaASGIMiddleware(Starlette(routes=[WebSocketRoute("/ws", agent)]), config=REQUEST)
    server: LiveServer = live_server(app)
    answers: list[str] = []
    async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        with pytest.raises(ConnectionClosed) as closed:
            for _ in range(10):
                await ws.send("go")
                answers.append(str(await ws.recv()))
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert closed.value.rcvd.reason == "budget_exceeded"
    # Each message is a step of the session too: 3 model calls of 0.3 fit, the 4th does not.
    assert calls.ran == 3 and answers == ["spent"] * 3
