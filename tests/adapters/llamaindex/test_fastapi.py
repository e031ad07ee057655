"""Inside a FastAPI request under VeronicaASGIMiddleware (real uvicorn on 127.0.0.1): the request's
context bounds the agent, and the halt becomes the middleware's HTTP 429."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage

from veronica_mw import ExecutionConfig
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...support.servers import UvicornServer
from .fakes import Counter, UsageLLM, looping_llm, ping_tool

pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_(computed_)?fields' attribute on the instance"),
]
HANG_GUARD_S = 20
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=2)


def _app(counters: list[Counter], llm: UsageLLM) -> FastAPI:
    app = FastAPI()

    @app.post("/agent")
    async def agent() -> dict[str, Any]:
        counter = Counter()
        counters.append(counter)
        run = FunctionAgent(tools=[ping_tool(counter)], llm=looping_llm(counter)).run("check the service")
        return {"answer": str(await run)}  # the agent never stops by itself: only the halt ends it

    @app.post("/chat")
    def chat() -> dict[str, Any]:  # a sync endpoint: FastAPI runs it in a worker thread
        while True:
            llm.chat([ChatMessage(role="user", content="again")])

    @app.get("/once")
    async def once() -> dict[str, Any]:
        response = await llm.achat([ChatMessage(role="user", content="hi")])
        return {"answer": response.message.content}

    app.add_middleware(VeronicaASGIMiddleware, config=LIMITS)
    return app


@pytest.fixture
def server() -> Iterator[tuple[str, list[Counter], UsageLLM]]:
    counters: list[Counter] = []
    llm = UsageLLM()
    with VeronicaLlamaIndexHandler():  # process-wide, bound to each request's context at call time
        with UvicornServer(_app(counters, llm), hang_guard_s=HANG_GUARD_S) as uv:
            yield uv.url, counters, llm


def test_agent_request_halts_with_429(server: tuple[str, list[Counter], UsageLLM]) -> None:
    url, counters, _ = server
    with httpx.Client(base_url=url, timeout=HANG_GUARD_S) as client:
        first, second = client.post("/agent"), client.post("/agent")
    for response in (first, second):
        assert response.status_code == 429
        assert response.headers["content-type"].startswith("application/problem+json")
        body = response.json()
        assert (body["reason"], body["steps_used"]) == ("step_limit", 5)
    # each request had its own budget of 5 steps: model, tool, model, tool, model
    assert [(c.llm, c.tool) for c in counters] == [(3, 2), (3, 2)]


def test_sync_endpoint_model_loop_halts_with_429(server: tuple[str, list[Counter], UsageLLM]) -> None:
    url, _, llm = server
    with httpx.Client(base_url=url, timeout=HANG_GUARD_S) as client:
        response = client.post("/chat")
        assert response.status_code == 429 and response.json()["reason"] == "step_limit"
        assert llm.calls == 5
        ok = client.get("/once")  # a fresh request, a fresh budget
    assert ok.status_code == 200 and ok.json() == {"answer": "ok"}
    assert llm.calls == 6
