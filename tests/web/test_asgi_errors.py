"""The HTTP 429 problem response when a halt escapes before the response started, under every way
Starlette and FastAPI handle errors; and the responses the middleware must leave alone."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI, HTTPException
from fastapi.exceptions import RequestValidationError
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from veronica_mw import CircuitBreaker, ExecutionConfig, ExecutionHalted, get_current_execution_context
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.types import ASGIApp, Message, Receive, Scope, Send

pytestmark = pytest.mark.anyio
CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=2, timeout_ms=60_000)


class AppError(Exception):
    """A framework's own exception type."""


def runaway() -> None:
    """Three tool calls, then a fourth that the kernel refuses (``step_limit``)."""
    ctx = get_current_execution_context()
    assert ctx is not None
    for _ in range(4):
        ctx.call_tool(lambda: "tool output")


async def escape(request: Request) -> Response:
    runaway()
    return PlainTextResponse("unreachable")


async def wrapped_cause(request: Request) -> Response:
    try:
        runaway()
    except ExecutionHalted as exc:
        raise AppError("tool chain failed") from exc
    return PlainTextResponse("unreachable")


async def wrapped_context(request: Request) -> Response:
    try:
        runaway()
    except ExecutionHalted:
        raise AppError("tool chain failed") from None  # only __context__ keeps the halt
    return PlainTextResponse("unreachable")


async def in_task_group(request: Request) -> Response:
    async with anyio.create_task_group() as tg:  # raises an ExceptionGroup around the halt
        tg.start_soon(anyio.to_thread.run_sync, runaway)
        await anyio.sleep_forever()
    return PlainTextResponse("unreachable")


ROUTES = [
    Route("/escape", escape),
    Route("/cause", wrapped_cause),
    Route("/context", wrapped_context),
    Route("/group", in_task_group),
]


def starlette_inner(debug: bool = False) -> ASGIApp:
    app = Starlette(debug=debug, routes=ROUTES)
    app.add_middleware(VeronicaASGIMiddleware, config=CONFIG)
    return app


def starlette_outer(debug: bool = False) -> ASGIApp:
    # Wrapped around the whole app: Starlette's ServerErrorMiddleware (inside) renders a 500 —
    # the debug traceback page with debug=True — and re-raises.
    return VeronicaASGIMiddleware(Starlette(debug=debug, routes=ROUTES), config=CONFIG)


def _with_handlers(app: Starlette) -> Starlette:
    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    async def validation_error(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "invalid"}, status_code=422)

    async def app_error(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "app error"}, status_code=500)

    async def anything(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "internal"}, status_code=500)

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(AppError, app_error)  # renders a 500 itself, does not re-raise
    app.add_exception_handler(Exception, anything)  # becomes ServerErrorMiddleware's handler
    return app


def fastapi_app(debug: bool, handlers: bool) -> FastAPI:
    app = FastAPI(debug=debug)
    for route in ROUTES:
        app.router.routes.append(route)
    return _with_handlers(app) if handlers else app  # type: ignore[return-value]


def fastapi_inner(debug: bool = False, handlers: bool = False) -> ASGIApp:
    app = fastapi_app(debug, handlers)
    app.add_middleware(VeronicaASGIMiddleware, config=CONFIG)
    return app


def fastapi_outer(debug: bool = False, handlers: bool = False) -> ASGIApp:
    return VeronicaASGIMiddleware(fastapi_app(debug, handlers), config=CONFIG)


APPS: dict[str, Callable[[], ASGIApp]] = {
    "starlette": starlette_inner,
    "starlette-debug": lambda: starlette_inner(debug=True),
    "starlette-outer": starlette_outer,
    "starlette-outer-debug": lambda: starlette_outer(debug=True),
    "fastapi": fastapi_inner,
    "fastapi-debug": lambda: fastapi_inner(debug=True),
    "fastapi-outer-debug": lambda: fastapi_outer(debug=True),
    "fastapi-handlers": lambda: fastapi_inner(handlers=True),
    "fastapi-outer-handlers": lambda: fastapi_outer(handlers=True),
    "fastapi-outer-debug-handlers": lambda: fastapi_outer(debug=True, handlers=True),
}


def client(app: ASGIApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def assert_step_limit_problem(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text[:300]
    assert response.headers["content-type"] == "application/problem+json"
    assert "retry-after" not in response.headers  # waiting does not give steps back
    body = response.json()
    assert body["reason"] == "step_limit"
    assert body["type"] == "urn:veronica-mw:halt:step_limit"
    assert body["status"] == 429
    assert (body["steps_used"], body["cost_usd_used"], body["retries_used"]) == (3, 0.0, 0)
    assert body["limits"] == CONFIG.as_dict()
    assert body["limits"]["max_steps"] == 3
    assert int(response.headers["content-length"]) == len(response.content)


@pytest.mark.parametrize("name", list(APPS))
@pytest.mark.parametrize("path", ["/escape", "/cause", "/context", "/group"])
async def test_escaped_halt_becomes_a_429_problem(name: str, path: str) -> None:
    async with client(APPS[name]()) as http:
        response = await http.get(path)
    assert_step_limit_problem(response)


async def test_app_that_catches_the_halt_keeps_its_own_response() -> None:
    async def partial(request: Request) -> Response:
        try:
            runaway()
        except ExecutionHalted as exc:
            return JSONResponse({"partial": exc.partial_result, "reason": exc.reason}, status_code=200)
        return PlainTextResponse("unreachable")

    async def payment(request: Request) -> Response:
        try:
            runaway()
        except ExecutionHalted as exc:
            raise HTTPException(status_code=402, detail=f"out of budget: {exc.reason}") from exc
        return PlainTextResponse("unreachable")

    app = FastAPI(routes=[Route("/partial", partial), Route("/payment", payment)])
    app.add_middleware(VeronicaASGIMiddleware, config=CONFIG)
    async with client(app) as http:
        first = await http.get("/partial")
        second = await http.get("/payment")
    assert (first.status_code, first.json()) == (200, {"partial": "tool output", "reason": "step_limit"})
    assert (second.status_code, second.json()) == (402, {"detail": "out of budget: step_limit"})


async def test_error_responses_without_a_halt_are_left_alone() -> None:
    async def unavailable(request: Request) -> Response:
        return PlainTextResponse("upstream down", status_code=503)

    async def crash(request: Request) -> Response:
        raise KeyError("bug")

    app = VeronicaASGIMiddleware(
        Starlette(routes=[Route("/503", unavailable), Route("/crash", crash)]), config=CONFIG
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        kept = await http.get("/503")
        crashed = await http.get("/crash")
    assert (kept.status_code, kept.text) == (503, "upstream down")
    assert (crashed.status_code, crashed.text) == (500, "Internal Server Error")
    with pytest.raises(KeyError):  # and the crash still propagates to the server
        async with client(app) as http:
            await http.get("/crash")


async def test_open_circuit_answers_429_with_retry_after() -> None:
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=30.0)

    async def chat(request: Request) -> Response:
        ctx = get_current_execution_context()
        assert ctx is not None

        def upstream() -> Any:
            raise ConnectionError("provider down")

        try:
            ctx.call_llm(upstream)
        except ConnectionError:
            return PlainTextResponse("bad gateway", status_code=502)
        return PlainTextResponse("unreachable")

    app = Starlette(routes=[Route("/chat", chat)])
    app.add_middleware(VeronicaASGIMiddleware, config=CONFIG, circuit_breaker=breaker)
    async with client(app) as http:
        first = await http.get("/chat")  # the failure opens the shared breaker
        second = await http.get("/chat")  # a new request's context is refused by it
    assert first.status_code == 502
    assert second.status_code == 429
    assert second.json()["reason"] == "circuit_open"
    assert 29 <= int(second.headers["retry-after"]) <= 30


async def test_an_apps_own_500_is_sent_once_complete_not_when_the_app_returns() -> None:
    forwarded: list[Message] = []
    seen_by_app: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"own error", "more_body": False})
        seen_by_app.append(len(forwarded))  # e.g. background work still running here

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        forwarded.append(message)

    await VeronicaASGIMiddleware(app, config=CONFIG)({"type": "http", "path": "/"}, receive, send)
    assert seen_by_app == [2]
    assert [m.get("status") for m in forwarded] == [500, None] and forwarded[1]["body"] == b"own error"


async def test_halt_in_a_background_task_keeps_the_sent_response(caplog: pytest.LogCaptureFixture) -> None:
    async def endpoint(request: Request) -> Response:
        return PlainTextResponse("done", background=BackgroundTask(runaway))

    app = Starlette(routes=[Route("/", endpoint)])
    app.add_middleware(VeronicaASGIMiddleware, config=CONFIG)
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        async with client(app) as http:
            response = await http.get("/")
    assert (response.status_code, response.text) == (200, "done")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert messages[0].startswith("veronica_mw: / halted after the response completed (reason=step_limit)")


async def test_halted_context_turns_an_unrelated_crash_into_a_429_and_still_raises() -> None:
    async def lost_chain(request: Request) -> Response:
        try:
            runaway()
        except ExecutionHalted:
            pass
        raise AppError("the framework dropped the halt")  # no __cause__/__context__ left

    app = Starlette(routes=[Route("/", lost_chain)])
    app.add_middleware(VeronicaASGIMiddleware, config=CONFIG)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        response = await http.get("/")
    assert_step_limit_problem(response)
    with pytest.raises(AppError):  # the crash itself still reaches the server's error log
        async with client(app) as http:
            await http.get("/")
