"""CrewAI's ``LLM`` over the instrumented OpenAI SDK inside concurrent FastAPI requests under
VeronicaASGIMiddleware (real uvicorn): the CrewAI hooks and the SDK instrumentation both see every
model request and count it once, so each request gets its 429 at exactly its own ``max_steps`` and
the fake provider receives exactly ``max_steps`` x requests requests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from crewai import LLM
from fastapi import FastAPI

import veronica_mw
from veronica_mw import ExecutionConfig
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ....support.concurrent_requests import assert_step_limit_refusals, post_all
from ....support.fake_provider import FakeProvider
from ....support.servers import UvicornServer

STEPS = 3
REQUESTS = 8


def build(url: str) -> FastAPI:
    app = FastAPI()

    @app.post("/agent")
    def run() -> dict[str, int]:  # a sync endpoint: Starlette's thread pool, the request's context
        llm = LLM(model="openai/gpt-4o-mini", base_url=url, api_key="test", max_retries=0)
        answered = 0
        for i in range(50):  # a runaway loop: the request's limit stops it
            llm.call(f"question {i}")
            answered += 1
        return {"answered": answered}

    return app


@pytest.fixture
def served() -> Iterator[tuple[str, FakeProvider]]:
    assert {"crewai", "openai"} <= set(veronica_mw.instrument())
    try:
        with FakeProvider() as provider:
            config = ExecutionConfig(max_cost_usd=10.0, max_steps=STEPS, max_retries_total=0)
            app = VeronicaASGIMiddleware(build(provider.openai_url), config=config)
            with UvicornServer(app) as server:
                yield server.url, provider
    finally:
        veronica_mw.uninstrument()


def test_concurrent_requests_each_stop_at_their_limit(served: tuple[str, FakeProvider]) -> None:
    url, provider = served
    assert_step_limit_refusals(post_all(url + "/agent", REQUESTS), STEPS)
    # Counted twice (the hooks' step and the SDK's), 3 steps would allow 1 or 2 requests each.
    assert provider.count() == STEPS * REQUESTS
