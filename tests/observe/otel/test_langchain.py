"""LangChain runs inside a FastAPI request under OpenTelemetryMiddleware: the zero-config handler's
steps become spans under the server span (sync and async endpoints), and a halt is a 429 with the
halt event. The model is LangChain's own list fake, reporting usage and a model name."""

from __future__ import annotations

import importlib
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langchain_core.messages import BaseMessage
from langchain_core.tools import tool

from veronica_mw import ExecutionConfig
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...adapters.langchain.fakes import MODEL, PRICE, CountingChatModel, priced_message
from ...web.conftest import LiveServer, live_server
from .otel_support import Telemetry, attrs, otel

__all__ = ["live_server", "otel"]

pytestmark = pytest.mark.anyio
# The zero-config hook: LangChain runs inside a request under the middleware are contained.
importlib.import_module("veronica_mw.adapters.langchain")


class NamedModel(CountingChatModel):
    """The list fake with a model name, as a provider's chat model has (LangChain reports it as
    the run's ``ls_model_name``: the request model)."""

    model_name: str = MODEL


@tool
def search(query: str) -> str:
    """Look something up."""
    return f"3 documents about {query}"


def build(otel: Telemetry, model: NamedModel, max_steps: int) -> Any:
    app = FastAPI()

    @app.get("/sync")
    def sync_agent() -> dict[str, Any]:  # runs in the threadpool; handlers run on its thread
        first = model.invoke("plan")
        found = search.invoke({"query": "otel"})
        second = model.invoke(f"answer from {found}")
        return {"answers": [first.content, second.content]}

    @app.get("/async")
    async def async_agent() -> dict[str, Any]:  # sync handlers run in LangChain's executor
        first = await model.ainvoke("plan")
        found = await search.ainvoke({"query": "otel"})
        second = await model.ainvoke(f"answer from {found}")
        return {"answers": [first.content, second.content]}

    config = ExecutionConfig(max_cost_usd=1.0, max_steps=max_steps, max_retries_total=0)
    inner = VeronicaASGIMiddleware(app, config=config)
    return otel.asgi(inner)


def replies(n: int) -> list[BaseMessage]:
    return [priced_message(f"reply {i}") for i in range(n)]


@pytest.mark.parametrize("path", ["/sync", "/async"])
async def test_langchain_steps_are_spans_under_the_server_span(
    otel: Telemetry, live_server: Any, path: str
) -> None:
    model = NamedModel(responses=replies(2))
    server: LiveServer = live_server(build(otel, model, max_steps=5))
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as client:
        response = await client.get(path)
    assert response.status_code == 200 and model.calls == 2
    (request,) = otel.server_spans()
    chats, tools = otel.spans(f"chat {MODEL}"), otel.spans("execute_tool search")
    assert len(chats) == 2 and len(tools) == 1
    for span in [*chats, *tools]:
        assert span.parent is not None and span.parent.span_id == request.context.span_id
    for span in chats:
        assert attrs(span)["gen_ai.usage.input_tokens"] == 1000
        assert attrs(span)["gen_ai.usage.output_tokens"] == 500
        assert attrs(span)["gen_ai.usage.cost.amount"] == pytest.approx(PRICE)
        assert attrs(span)["gen_ai.response.model"] == MODEL
        assert attrs(span)["veronica.operation_name"] == "NamedModel"
    assert sorted(int(attrs(s)["veronica.step"]) for s in [*chats, *tools]) == [1, 2, 3]
    assert attrs(tools[0])["gen_ai.tool.name"] == "search"


async def test_a_langchain_run_past_its_limit_is_a_429_with_the_halt_event(
    otel: Telemetry, live_server: Any
) -> None:
    model = NamedModel(responses=replies(2))
    server: LiveServer = live_server(build(otel, model, max_steps=2))
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as client:
        response = await client.get("/async")
    assert response.status_code == 429 and response.json()["reason"] == "step_limit"
    assert model.calls == 1  # the second model call was refused before it ran
    (request,) = otel.server_spans()
    assert [(e.name, attrs(e)["veronica.reason"]) for e in request.events] == [
        ("veronica.halt", "step_limit")
    ]
    assert len(otel.spans(f"chat {MODEL}")) == 1 and len(otel.spans("execute_tool search")) == 1
    assert otel.halts() == {"step_limit": 1}
