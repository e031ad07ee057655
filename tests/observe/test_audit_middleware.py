"""``audit=`` on the middlewares: HTTP requests and WebSocket sessions with their method and path, and
the requests a tenant budget pool refused before they had a context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket
from werkzeug.test import Client

from veronica_mw import AuditLog, BudgetPool, ExecutionConfig, WrapOptions, get_current_execution_context
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

from .conftest import read_records, run_cli

CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0, timeout_ms=60_000)
COST = WrapOptions(operation_name="chat", cost_estimate_hint=0.001, cost_fn=lambda r: 0.001)


def tenant_pool() -> BudgetPool:
    """One tenant (the X-Tenant header) with room for exactly one $0.001 call per hour."""

    def key(request: Any) -> str | None:
        if isinstance(request, dict) and "headers" in request:  # an ASGI scope
            return next((v.decode() for k, v in request["headers"] if k == b"x-tenant"), None)
        value = request.get("HTTP_X_TENANT")  # a WSGI environ
        return value if isinstance(value, str) else None

    return BudgetPool(0.001, window_s=3600, key_func=key)


def call() -> str:
    ctx = get_current_execution_context()
    assert ctx is not None
    result: str = ctx.call_llm(lambda: "ok", options=COST)
    return result


async def http_view(request: Request) -> JSONResponse:
    return JSONResponse({"answer": call()})


async def ws_view(websocket: WebSocket) -> None:
    await websocket.accept()
    text = await websocket.receive_text()
    ctx = get_current_execution_context()
    assert ctx is not None
    ctx.call_llm(lambda: text)
    await websocket.send_text(text.upper())
    await websocket.close()


def test_asgi_http_websocket_and_refusals(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    app = Starlette(routes=[Route("/chat", http_view, methods=["POST"]), WebSocketRoute("/ws", ws_view)])
    wrapped = VeronicaASGIMiddleware(app, config=CONFIG, audit=log, budget_pool=tenant_pool())
    with TestClient(wrapped) as client:
        assert client.post("/chat?key=query-value", headers={"x-tenant": "acme"}).status_code == 200
        assert client.post("/chat", headers={"x-tenant": "acme"}).status_code == 429  # the pool is spent
        with client.websocket_connect("/ws") as ws:  # no tenant header: not pooled
            ws.send_text("hi")
            assert ws.receive_text() == "HI"
    assert log.close()
    records = read_records(tmp_path)
    assert [r["attributes"] for r in records if r["type"] == "context_started"] == [
        {"method": "POST", "path": "/chat"},
        {"method": "WEBSOCKET", "path": "/ws"},
    ]
    (refused,) = (r for r in records if r["type"] == "refused")
    assert (refused["reason"], refused["status"]) == ("budget_exceeded", 429)
    # the window's usage and the limit in force
    spent = "tenant budget for this window is spent ($0.001000 of $0.001000 spent, steps 1)"
    assert refused["detail"] == spent
    assert b"query-value" not in b"".join(Path(f).read_bytes() for f in log.files)
    code, out, _ = run_cli("audit", "show", tmp_path)
    assert code == 0 and out.splitlines()[-1] == "refused before a context: 1 budget_exceeded (HTTP 429)"


def test_wsgi_refusals(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    flask = Flask(__name__)
    flask.get("/chat")(lambda: {"answer": call()})
    flask.wsgi_app = VeronicaWSGIMiddleware(  # type: ignore[method-assign]
        flask.wsgi_app, config=CONFIG, audit=log, budget_pool=tenant_pool()
    )
    client = Client(flask)
    codes = []
    for _ in range(3):
        response = client.get("/chat", headers={"X-Tenant": "acme"})
        codes.append(response.status_code)
        response.close()
    assert codes == [200, 429, 429]
    assert log.close()
    kinds = [r["type"] for r in read_records(tmp_path)]
    assert kinds.count("refused") == 2 and kinds.count("context_started") == kinds.count("context_ended") == 1


def test_a_request_that_makes_no_call_still_has_its_record(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")

    async def plain(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    asgi = VeronicaASGIMiddleware(Starlette(routes=[Route("/plain", plain)]), config=CONFIG, audit=log)
    flask = Flask(__name__)
    flask.add_url_rule("/plain-wsgi", "plain", lambda: "ok")
    flask.wsgi_app = VeronicaWSGIMiddleware(flask.wsgi_app, config=CONFIG, audit=log)  # type: ignore[method-assign]
    with TestClient(asgi) as client:
        assert client.get("/plain").status_code == 200
    response = Client(flask).get("/plain-wsgi")
    assert response.status_code == 200
    response.close()  # what a server does once the body is sent: the request ends here
    log.close()
    records = read_records(tmp_path)
    started = [r["attributes"] for r in records if r["type"] == "context_started"]
    assert started == [{"method": "GET", "path": "/plain"}, {"method": "GET", "path": "/plain-wsgi"}]
    ended = [r for r in records if r["type"] == "context_ended"]
    assert [e["usage"]["steps"] for e in ended] == [0, 0]
