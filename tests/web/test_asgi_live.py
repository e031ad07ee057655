"""HTTP through a real uvicorn server: halts after the response started (streaming LLM tokens),
429s on the wire, and concurrent requests over real sockets."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from veronica_mw import ExecutionConfig, ExecutionContext, get_current_execution_context
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.types import ASGIApp, Receive, Scope, Send

from .conftest import LiveServer

pytestmark = pytest.mark.anyio
Start = Callable[..., LiveServer]
CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)


def ctx() -> ExecutionContext:
    context = get_current_execution_context()
    assert context is not None
    return context


def fake_llm_token(i: int) -> str:
    return f"token{i} "


async def stream_async(request: Request) -> Response:
    async def tokens() -> AsyncIterator[str]:
        for i in range(100):  # a runaway generation: the sixth model call is refused
            yield ctx().call_llm(fake_llm_token, i)
            await asyncio.sleep(0)

    return StreamingResponse(tokens(), media_type="text/event-stream")


async def stream_sync(request: Request) -> Response:
    def tokens() -> Iterator[str]:  # iterated in the threadpool
        for i in range(100):
            yield ctx().call_llm(fake_llm_token, i)

    return StreamingResponse(tokens(), media_type="text/plain")


async def escape(request: Request) -> Response:
    for _ in range(10):
        ctx().call_tool(lambda: None)
    return Response("unreachable")


ROUTES = [Route("/stream", stream_async), Route("/stream-sync", stream_sync), Route("/escape", escape)]


def inner() -> ASGIApp:
    app = Starlette(routes=ROUTES)
    app.add_middleware(VeronicaASGIMiddleware, config=CONFIG)
    return app


def outer() -> ASGIApp:
    return VeronicaASGIMiddleware(Starlette(routes=ROUTES), config=CONFIG)


async def raw_streamer(scope: Scope, receive: Receive, send: Send) -> None:
    """A bare ASGI app (no framework) streaming until the halt escapes."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    for i in range(100):
        body = ctx().call_llm(fake_llm_token, i).encode()
        await send({"type": "http.response.body", "body": body, "more_body": True})


async def wait_for_log(server: LiveServer, level: int, count: int) -> list[str]:
    with anyio.fail_after(5):  # hang guard only
        while len(records := server.records("veronica_mw", level)) < count:
            await anyio.sleep(0.01)
    return [r.getMessage() for r in records]


def raw() -> ASGIApp:
    return VeronicaASGIMiddleware(raw_streamer, config=CONFIG)


@pytest.mark.parametrize("make_app", [inner, outer, raw])
@pytest.mark.parametrize("path", ["/stream", "/stream-sync"])
async def test_halt_mid_stream_ends_the_stream_cleanly(live_server: Start, make_app: Any, path: str) -> None:
    server = live_server(make_app())
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as client:
        async with client.stream("GET", path) as response:
            assert response.status_code == 200
            # A torn chunked body would raise httpx.RemoteProtocolError here.
            text = "".join([chunk async for chunk in response.aiter_text()])
    assert text == "token0 token1 token2 token3 token4 "
    warnings = await wait_for_log(server, logging.WARNING, 1)
    assert len(warnings) == 1
    assert "halted after the response started (reason=step_limit" in warnings[0]
    await anyio.sleep(0.1)
    assert server.protocol_errors() == []


async def test_escaped_halt_is_a_429_on_the_wire(live_server: Start) -> None:
    server = live_server(outer())
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as client:
        response = await client.get("/escape")
    assert response.status_code == 429
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["reason"] == "step_limit"
    await anyio.sleep(0.1)
    assert server.protocol_errors() == []
    assert server.records("veronica_mw", logging.WARNING) == []  # a 429 is an answer, not an incident


async def test_concurrent_requests_over_real_sockets_stay_isolated(live_server: Start) -> None:
    async def work(request: Request) -> Response:
        context, n = ctx(), int(request.path_params["n"])
        for _ in range(n):
            context.call_tool(lambda: None)
            await asyncio.sleep(0.001)
        return JSONResponse({"chain": context.chain_id, "steps": context.get_snapshot().step_count})

    app = Starlette(routes=[Route("/work/{n}", work)])
    config = ExecutionConfig(max_cost_usd=1, max_steps=8, max_retries_total=0)
    app.add_middleware(VeronicaASGIMiddleware, config=config)
    server = live_server(app)
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False, limits=limits) as client:
        responses = await asyncio.gather(*(client.get(f"/work/{i % 8 + 1}") for i in range(100)))
    bodies = [r.json() for r in responses]
    assert [b["steps"] for b in bodies] == [i % 8 + 1 for i in range(100)]
    assert len({b["chain"] for b in bodies}) == 100
