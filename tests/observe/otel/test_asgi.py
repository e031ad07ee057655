"""FastAPI under OpenTelemetryMiddleware (opentelemetry-instrumentation-asgi) around
VeronicaASGIMiddleware, served by a real uvicorn: spans parented to the server span, halt events
for 429s, 503s and WebSocket 1008 closes, and the halts counter."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from genai_prices import Usage, calc_price
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from veronica_mw import (
    BudgetPool,
    ExecutionConfig,
    LocalBudgetBackend,
    WrapOptions,
    get_current_execution_context,
)
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.types import ASGIApp

from ...web.conftest import LiveServer, live_server
from .otel_support import Telemetry, attrs, children_of, otel

__all__ = ["live_server", "otel"]  # fixtures, re-exported for pytest

pytestmark = pytest.mark.anyio
MODEL = "gpt-4o-mini"
GPT = WrapOptions(operation_name="fake-llm", model=MODEL, provider="openai")
PRICE = float(calc_price(Usage(input_tokens=120, output_tokens=30), model_ref=MODEL).total_price)
CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)


def fake_llm(prompt: str) -> dict[str, Any]:
    """A chat completion as a provider reports it: text, model and usage."""
    return {"text": f"echo {prompt}", "model": MODEL, "usage": {"input_tokens": 120, "output_tokens": 30}}


def search(query: str) -> str:
    return f"3 documents about {query}"


def build(otel: Telemetry, *, pool: Any = None) -> ASGIApp:
    app = FastAPI()
    ran = app.state.ran = {"tool": 0}

    @app.get("/agent")
    def agent(loops: int = 0) -> dict[str, Any]:
        ctx = get_current_execution_context()
        assert ctx is not None
        plan = ctx.call_llm(fake_llm, "plan", options=GPT)
        found = ctx.call_tool(search, "otel", options=WrapOptions(operation_name="search"))
        answer = ctx.call_llm(fake_llm, found, options=GPT)
        for _ in range(loops):  # a runaway tool loop: past max_steps the middleware answers 429
            ctx.call_tool(search, "again", options=WrapOptions(operation_name="search"))
        ran["tool"] += 1
        return {"plan": plan["text"], "answer": answer["text"]}

    @app.websocket("/ws")
    async def chat(websocket: WebSocket) -> None:
        await websocket.accept()
        session = get_current_execution_context()
        assert session is not None
        try:
            while True:
                prompt = await websocket.receive_text()
                reply = await session.acall_llm(fake_llm, prompt, options=GPT)
                await websocket.send_text(reply["text"])
        except WebSocketDisconnect:
            return

    inner = VeronicaASGIMiddleware(app, config=CONFIG, budget_pool=pool)
    # The OTel middleware outside, veronica-mw inside: the server span is current in the app.
    return otel.asgi(inner)


async def test_model_and_tool_spans_are_children_of_the_server_span(
    otel: Telemetry, live_server: Any
) -> None:
    server: LiveServer = live_server(build(otel))
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as client:
        response = await client.get("/agent")
    assert response.status_code == 200
    (request,) = otel.server_spans()
    spans = otel.spans()
    chats = otel.spans(f"chat {MODEL}")
    tool = otel.span("execute_tool search")
    assert len(chats) == 2
    assert {s.name for s in children_of(request, spans)} >= {f"chat {MODEL}", "execute_tool search"}
    assert all(s.parent is not None and s.parent.span_id == request.context.span_id for s in [*chats, tool])
    assert all(s.context.trace_id == request.context.trace_id for s in spans)
    chain_id = attrs(chats[0])["veronica.chain_id"]
    for step, span in zip((1, 3), chats, strict=True):
        assert attrs(span) == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": MODEL,
            "gen_ai.response.model": MODEL,
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 30,
            "gen_ai.usage.cost.amount": pytest.approx(PRICE, rel=1e-9),
            "gen_ai.usage.cost.currency": "USD",
            "veronica.cost_usd": pytest.approx(PRICE, rel=1e-9),
            "veronica.chain_id": chain_id,
            "veronica.step": step,
            "veronica.status": "ok",
            "veronica.operation_name": "fake-llm",
        }
    assert attrs(tool)["veronica.step"] == 2 and attrs(tool)["gen_ai.tool.name"] == "search"
    assert attrs(request)["veronica.chain_id"] == chain_id  # set when the context started
    assert not request.events
    assert server.protocol_errors() == []


async def test_a_request_past_its_step_limit_gets_a_429_and_a_halt_event(
    otel: Telemetry, live_server: Any
) -> None:
    server: LiveServer = live_server(build(otel))
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as client:
        response = await client.get("/agent", params={"loops": 10})
    assert response.status_code == 429 and response.json()["reason"] == "step_limit"
    (request,) = otel.server_spans()
    status = attrs(request).get("http.response.status_code", attrs(request).get("http.status_code"))
    assert status == 429
    (event,) = request.events
    assert event.name == "veronica.halt"
    assert dict(event.attributes or {}) == {
        "veronica.reason": "step_limit",
        "veronica.detail": "max_steps=5 reached",
        "veronica.steps_used": 5,
        "veronica.cost_usd_used": pytest.approx(2 * PRICE, rel=1e-9),
        "veronica.chain_id": attrs(request)["veronica.chain_id"],
    }
    assert (
        len(otel.spans("execute_tool search")) == 3
    )  # the two admitted loop steps; the refused one has none
    assert otel.halts() == {"step_limit": 1}


async def test_pool_refusals_429_and_503_are_halt_events_too(otel: Telemetry, live_server: Any) -> None:
    class Down:
        async def aadmit(self, scope: Any) -> Any:
            raise ConnectionError("budget store unreachable")

    spent = BudgetPool(0.0, window_s=60, key_func=lambda scope: "acme", backend=LocalBudgetBackend())
    for pool in (spent, Down()):
        server: LiveServer = live_server(build(otel, pool=pool))
        async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as client:
            assert (await client.get("/agent")).status_code == (429 if pool is spent else 503)
    over, down = otel.server_spans(2)
    assert [attrs(e)["veronica.reason"] for e in over.events] == ["budget_exceeded"]
    assert [attrs(e)["veronica.reason"] for e in down.events] == ["policy_denied"]
    assert attrs(down.events[0])["veronica.steps_used"] == 0
    assert not otel.spans(f"chat {MODEL}")  # refused before the app ran
    assert otel.halts() == {"budget_exceeded": 1, "policy_denied": 1}


async def test_websocket_messages_are_counted_not_traced_and_the_1008_close_is_an_event(
    otel: Telemetry, live_server: Any
) -> None:
    server: LiveServer = live_server(build(otel))
    replies: list[str] = []
    with anyio.fail_after(10):
        async with connect(server.ws_url("/ws"), proxy=None) as ws:
            try:
                for i in range(10):
                    await ws.send(f"hi {i}")
                    replies.append(str(await ws.recv()))
            except ConnectionClosed:
                pass
    # receive + model call + send = 3 steps a message: the second reply is the refused sixth step.
    assert len(replies) == 1 and ws.close_code == 1008
    (session,) = otel.server_spans()
    assert not otel.spans("execute_tool websocket.receive") and not otel.spans("execute_tool websocket.send")
    assert len(otel.spans(f"chat {MODEL}")) == 2
    assert attrs(session)["veronica.websocket.messages_received"] == 2
    assert attrs(session)["veronica.websocket.messages_sent"] == 1
    assert [(e.name, dict(e.attributes or {})["veronica.reason"]) for e in session.events] == [
        ("veronica.halt", "step_limit")
    ]
    calls = otel.values(otel.collect()["veronica.calls"])
    assert calls == {frozenset({("gen_ai.operation.name", "chat"), ("veronica.status", "ok")}): 2}
