"""``checks=`` on both middlewares: a ``halt`` check answers 502 problem+json naming the check."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from flask import Flask

from veronica_mw import (
    ExecutionConfig,
    ExecutionHalted,
    JsonOutput,
    MaxLength,
    RetryContainer,
    VeronicaASGIMiddleware,
    VeronicaWSGIMiddleware,
    get_current_execution_context,
)

LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=2)


class Script:
    """A fake model answering from a list, counting its calls."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return self.answers.pop(0)

    async def acall(self) -> str:
        return self()


def fastapi_app(model: Script, checks: list[Any]) -> FastAPI:
    app = FastAPI()

    @app.get("/answer")
    async def answer() -> dict[str, Any]:
        ctx = get_current_execution_context()
        assert ctx is not None
        text = await RetryContainer(max_retries=5, backoff_base=0.0).aexecute(ctx.acall_llm, model.acall)
        return {"answer": json.loads(text)}

    app.add_middleware(VeronicaASGIMiddleware, config=LIMITS, checks=checks)
    return app


async def get(app: Any, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        return await client.get(path)


@pytest.mark.anyio
async def test_fastapi_halt_check_answers_502_with_the_check() -> None:
    model = Script("I think the answer is 42")
    response = await get(fastapi_app(model, [(JsonOutput(), "halt")]), "/answer")
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["reason"] == "verification_failed" and body["status"] == 502
    assert body["title"] == "Model output failed verification"
    assert body["check"] == "json_output"
    assert body["check_message"].startswith("not valid JSON")
    assert "json_output" in body["detail"]
    assert model.calls == 1 and body["steps_used"] == 1


@pytest.mark.anyio
async def test_fastapi_retry_check_reasks_within_the_budget() -> None:
    model = Script("nope", "nope again", '{"a": 1}')
    response = await get(fastapi_app(model, [JsonOutput()]), "/answer")
    assert response.status_code == 200 and response.json() == {"answer": {"a": 1}}
    assert model.calls == 3
    spent = Script("nope", "nope", "nope", '{"a": 1}')
    response = await get(fastapi_app(spent, [JsonOutput()]), "/answer")
    assert response.status_code == 429 and response.json()["reason"] == "retry_limit"
    assert spent.calls == 3  # first attempt + max_retries_total=2


def flask_app(model: Script, checks: list[Any]) -> Flask:
    app = Flask(__name__)

    @app.get("/answer")
    def answer() -> dict[str, Any]:
        ctx = get_current_execution_context()
        assert ctx is not None
        return {"answer": ctx.call_llm(model)}

    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=LIMITS, checks=checks)  # type: ignore[method-assign]
    return app


def test_flask_halt_check_answers_502() -> None:
    model = Script("x" * 50)
    client = flask_app(model, [(MaxLength(10), "halt")]).test_client()
    response = client.get("/answer")
    assert response.status_code == 502
    body = response.get_json()
    assert (body["reason"], body["check"]) == ("verification_failed", "max_length")
    assert body["check_message"] == "50 characters, more than 10"
    ok = flask_app(Script("short"), [(MaxLength(10), "halt")]).test_client().get("/answer")
    assert ok.status_code == 200 and ok.get_json() == {"answer": "short"}


def test_an_app_that_catches_the_halt_keeps_its_answer() -> None:
    app = Flask(__name__)

    @app.get("/")
    def index() -> tuple[str, int]:
        ctx = get_current_execution_context()
        assert ctx is not None
        try:
            ctx.call_llm(lambda: "not json")
        except ExecutionHalted as halt:
            return f"fallback ({halt.reason})", 200
        return "unreachable", 500

    app.wsgi_app = VeronicaWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, config=LIMITS, checks=[(JsonOutput(), "halt")]
    )
    response = app.test_client().get("/")
    assert (response.status_code, response.text) == (200, "fallback (verification_failed)")


def test_middlewares_validate_checks_at_startup() -> None:
    with pytest.raises(ValueError, match="on_fail"):
        VeronicaASGIMiddleware(FastAPI(), config=LIMITS, checks=[(JsonOutput(), "never")])
    with pytest.raises(TypeError, match="lists"):
        VeronicaWSGIMiddleware(Flask(__name__).wsgi_app, config=LIMITS, checks="json")
    with pytest.raises(TypeError, match="RuntimePolicy"):
        VeronicaASGIMiddleware(FastAPI(), config=LIMITS, policies=[object()])  # type: ignore[list-item]
