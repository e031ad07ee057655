"""Building a middleware instruments the SDKs: a FastAPI (real uvicorn) or Flask app calling the
OpenAI SDK directly in a loop answers 429 after the limit, and the provider saw exactly as many
requests as were allowed. ``instrument=False`` leaves the SDK alone."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import flask
import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

import veronica_mw
from veronica_mw import ExecutionConfig, VeronicaASGIMiddleware, VeronicaWSGIMiddleware
from veronica_mw import instrumentation as registry

from ...support.fake_provider import FakeProvider
from ...web.conftest import LiveServer, live_server

__all__ = ["live_server"]

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "loop"}]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=0)


@pytest.fixture(autouse=True)
def not_instrumented() -> Iterator[None]:
    veronica_mw.uninstrument()
    assert registry.instrumented() == ()
    yield
    veronica_mw.uninstrument()


def _fastapi(server: FakeProvider, **options: Any) -> FastAPI:
    app = FastAPI()
    args: dict[str, Any] = {"base_url": server.openai_url, "api_key": "test", "max_retries": 0}

    @app.get("/sync")
    def sync_loop() -> dict[str, int]:  # runs in the threadpool
        calls = 0
        with openai.OpenAI(**args) as client:
            for _ in range(10):
                client.chat.completions.create(model=MODEL, messages=MESSAGES)
                calls += 1
        return {"calls": calls}

    @app.get("/async")
    async def async_loop() -> dict[str, int]:
        calls = 0
        async with openai.AsyncOpenAI(**args) as aclient:
            for _ in range(10):
                await aclient.chat.completions.create(model=MODEL, messages=MESSAGES)
                calls += 1
        return {"calls": calls}

    @app.get("/stream")
    async def relay() -> StreamingResponse:
        async def tokens() -> AsyncIterator[str]:
            async with openai.AsyncOpenAI(**args) as aclient:
                for _ in range(10):
                    stream = await aclient.chat.completions.create(
                        model=MODEL, messages=MESSAGES, stream=True
                    )
                    async for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            yield chunk.choices[0].delta.content

        return StreamingResponse(tokens(), media_type="text/plain")

    app.add_middleware(VeronicaASGIMiddleware, config=LIMITS, **options)
    return app


@pytest.mark.parametrize("path", ["/sync", "/async"])
def test_fastapi_app_answers_429_after_the_limit(live_server: Callable[..., LiveServer], path: str) -> None:
    with FakeProvider() as server:
        live = live_server(_fastapi(server))
        response = httpx.get(live.http_url + path, timeout=60)
        assert response.status_code == 429
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["reason"] == "step_limit"
        assert server.count() == 3
        assert registry.instrumented()  # the middleware did it: nobody called instrument()
        assert httpx.get(live.http_url + path, timeout=60).status_code == 429  # a fresh budget per request
        assert server.count() == 6


def test_a_streamed_response_ends_cleanly_at_the_limit(live_server: Callable[..., LiveServer]) -> None:
    with FakeProvider() as server:
        live = live_server(_fastapi(server))
        response = httpx.get(live.http_url + "/stream", timeout=60)
        assert response.status_code == 200  # the headers went out before the halt
        assert response.text == server.reply * 3
        assert server.count() == 3


def test_instrument_false_leaves_the_sdk_alone(live_server: Callable[..., LiveServer]) -> None:
    with FakeProvider() as server:
        live = live_server(_fastapi(server, instrument=False))
        response = httpx.get(live.http_url + "/sync", timeout=60)
        assert response.status_code == 200 and response.json() == {"calls": 10}
        assert server.count() == 10 and registry.instrumented() == ()


def test_flask_app_answers_429_after_the_limit() -> None:
    with FakeProvider() as server:
        app = flask.Flask(__name__)

        @app.get("/loop")
        def loop() -> str:
            with openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0) as client:
                for _ in range(10):
                    client.chat.completions.create(model=MODEL, messages=MESSAGES)
            return "unreachable"

        app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=LIMITS)  # type: ignore[method-assign]
        response = app.test_client().get("/loop")
        assert response.status_code == 429 and response.get_json()["reason"] == "step_limit"
        assert server.count() == 3


def test_the_middleware_patches_an_sdk_imported_after_it() -> None:
    # A fresh interpreter: the middleware is built before the app imports openai at all.
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import sys
        from veronica_mw import ExecutionConfig, VeronicaWSGIMiddleware
        VeronicaWSGIMiddleware(lambda e, s: [], config=ExecutionConfig(1, 1, 0))
        assert "openai" not in sys.modules
        import openai
        from openai._base_client import SyncAPIClient
        print(getattr(SyncAPIClient.request, "__veronica_mw_patch__", False))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
