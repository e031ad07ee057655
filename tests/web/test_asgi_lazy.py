"""The ASGI middleware builds a request's context only when the request uses it (real FastAPI and
Starlette apps through httpx's ASGITransport): a request that never asks builds none and schedules
no timer, every copy of the request's contextvars context gets the one context built on first use,
and its deadline counts from the request start however late it is built."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
from fastapi import BackgroundTasks, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    SharedTimeoutPool,
    WrapOptions,
    get_current_execution_context,
)
from veronica_mw.kernel.context import PendingContext, current_context
from veronica_mw.web.asgi import VeronicaASGIMiddleware

pytestmark = pytest.mark.anyio

TIMED = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0, timeout_ms=60_000)


def http(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def timers() -> int:
    """Scheduled context deadlines."""
    return len(SharedTimeoutPool.default())


def request_pending() -> PendingContext:
    """What the middleware put in the ContextVar for this request (without resolving it)."""
    pending = current_context.get()
    assert isinstance(pending, PendingContext)
    return pending


def llm_call() -> str:
    ctx = get_current_execution_context()
    assert ctx is not None
    return ctx.call_llm(lambda: "answer", options=WrapOptions(cost_estimate_hint=0.01))


async def test_a_request_that_never_uses_its_context_builds_none_and_schedules_no_timer() -> None:
    seen: dict[str, Any] = {}

    async def page(request: Request) -> PlainTextResponse:
        seen["pending"] = request_pending()
        seen["timers_in_request"] = timers()
        return PlainTextResponse("static page")

    async def agent(request: Request) -> PlainTextResponse:
        seen["agent_pending"] = request_pending()
        seen["timers_in_agent"] = timers()
        return PlainTextResponse(llm_call())

    app = Starlette(routes=[Route("/page", page), Route("/agent", agent)])
    app.add_middleware(VeronicaASGIMiddleware, config=TIMED)
    before = timers()
    async with http(app) as client:
        page_reply = await client.get("/page")
        agent_reply = await client.get("/agent")
    assert (page_reply.status_code, page_reply.text) == (200, "static page")
    assert seen["pending"].ctx is None  # never built
    assert seen["timers_in_request"] == before  # and no deadline was scheduled for it
    # The same middleware builds one, on first use, for a request that makes a call.
    assert (agent_reply.status_code, agent_reply.text) == (200, "answer")
    ctx = seen["agent_pending"].ctx
    assert isinstance(ctx, ExecutionContext) and ctx.get_snapshot().step_count == 1
    assert seen["timers_in_agent"] == before  # resolved after this count was taken
    assert timers() == before  # its timer was removed at the end of the request
    assert current_context.get() is None


async def test_threadpool_endpoint_and_background_tasks_share_the_context_built_on_first_use() -> None:
    seen: list[tuple[str, ExecutionContext | None, int]] = []
    app = FastAPI()

    @app.get("/work")
    def work(tasks: BackgroundTasks) -> dict[str, Any]:  # a sync endpoint: runs in the threadpool
        pending = request_pending()
        assert pending.ctx is None  # nothing asked for the context before this endpoint
        llm_call()  # builds it, here, on a worker thread
        seen.append(("endpoint", get_current_execution_context(), threading.get_ident()))

        def later_sync() -> None:  # threadpool again, after the response
            llm_call()
            seen.append(("sync task", get_current_execution_context(), threading.get_ident()))

        async def later_async() -> None:  # on the event loop
            llm_call()
            seen.append(("async task", get_current_execution_context(), threading.get_ident()))

        tasks.add_task(later_sync)
        tasks.add_task(later_async)
        seen.append(("pending", pending.ctx, 0))
        return {"built_on_worker": threading.get_ident() != loop_thread}

    loop_thread = threading.get_ident()
    app.add_middleware(VeronicaASGIMiddleware, config=TIMED)
    async with http(app) as client:
        reply = await client.get("/work")
    assert reply.json() == {"built_on_worker": True}
    assert [name for name, _, _ in seen] == ["endpoint", "pending", "sync task", "async task"]
    ctx = seen[0][1]
    assert isinstance(ctx, ExecutionContext)
    assert all(seen_ctx is ctx for _, seen_ctx, _ in seen)  # one context, built once
    assert ctx.get_snapshot().step_count == 3  # every call counted against it
    assert seen[3][2] == loop_thread


async def test_timeout_counts_from_the_request_start_when_the_context_is_first_used_late() -> None:
    timeout_ms = 150.0
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0, timeout_ms=timeout_ms)
    app = FastAPI()
    calls: list[str] = []

    @app.get("/slow-async")
    async def slow_async() -> dict[str, str]:
        await asyncio.sleep(timeout_ms / 1000 * 1.5)  # past the deadline before the context exists
        assert request_pending().ctx is None
        calls.append("async")
        return {"answer": llm_call()}

    @app.get("/slow-sync")
    def slow_sync() -> dict[str, str]:
        time.sleep(timeout_ms / 1000 * 1.5)
        calls.append("sync")
        return {"answer": llm_call()}

    app.add_middleware(VeronicaASGIMiddleware, config=config)
    before = timers()
    async with http(app) as client:
        replies = [await client.get(path) for path in ("/slow-async", "/slow-sync")]
    assert calls == ["async", "sync"]
    for reply in replies:
        assert reply.status_code == 429
        body = reply.json()
        assert (body["reason"], body["steps_used"]) == ("timeout", 0)
        assert body["limits"]["timeout_ms"] == timeout_ms
    assert timers() == before


async def test_usage_headers_needed_after_the_app_returned_build_a_context_without_a_timer() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        # A halt of some other context escapes before the app used its own: the 429 is built after
        # the app returned, and its usage headers need the request's context.
        raise ExecutionHalted("policy_denied", detail="refused upstream")

    before = timers()
    async with http(VeronicaASGIMiddleware(app, config=TIMED, usage_headers=True)) as client:
        reply = await client.get("/")
    assert reply.status_code == 429 and reply.json()["reason"] == "policy_denied"
    assert reply.headers["x-veronica-steps"] == "0/10"
    assert reply.headers["x-veronica-chain-id"]
    assert timers() == before  # built for the headers, but not armed: nothing would remove it


async def test_a_context_the_user_entered_is_not_taken_for_an_outer_middleware() -> None:
    seen: list[ExecutionContext | None] = []

    async def endpoint(request: Request) -> PlainTextResponse:
        seen.append(get_current_execution_context())
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", endpoint)])
    app.add_middleware(VeronicaASGIMiddleware, config=TIMED)
    outer = ExecutionContext(TIMED)
    with outer:  # httpx's ASGITransport runs the app in this task, under this context
        async with http(app) as client:
            reply = await client.get("/")
    assert reply.status_code == 200
    assert seen[0] is not None and seen[0] is not outer  # the request still got its own context
    assert seen[0].config is TIMED
