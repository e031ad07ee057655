"""HTTP requests under VeronicaASGIMiddleware: context propagation, isolation, configuration,
usage headers, the budget-pool hook and the applied-twice guard (real Starlette/FastAPI apps,
driven through httpx's ASGITransport)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import BackgroundTasks, FastAPI
from fastapi.responses import StreamingResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, get_current_execution_context
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.problem import STRICT_DEFAULT
from veronica_mw.web.types import Message, Receive, Scope, Send

pytestmark = pytest.mark.anyio


def limits(max_steps: int, max_cost_usd: float = 1.0) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=max_cost_usd, max_steps=max_steps, max_retries_total=1)


def current() -> ExecutionContext:
    ctx = get_current_execution_context()
    assert ctx is not None, "no execution context in this request"
    return ctx


def http(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


# -- lifespan and the ContextVar's lifetime ----------------------------------------------------------


async def test_lifespan_passes_through_untouched() -> None:
    seen: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope, receive, send, get_current_execution_context()))

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        pass

    scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    await VeronicaASGIMiddleware(app, config=limits(3))(scope, receive, send)
    assert seen == [(scope, receive, send, None)]
    assert seen[0][0] is scope and seen[0][1] is receive and seen[0][2] is send


async def test_context_is_reset_after_every_request_on_the_same_task() -> None:
    contexts: list[ExecutionContext | None] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        contexts.append(get_current_execution_context())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = VeronicaASGIMiddleware(app, config=limits(3))
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    for _ in range(2):
        await middleware({"type": "http", "path": "/", "headers": []}, receive, send)
        assert get_current_execution_context() is None
    assert len(contexts) == 2 and None not in contexts and contexts[0] is not contexts[1]
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"] * 2


# -- the context is reachable everywhere in the request ----------------------------------------------


def propagation_app(background_seen: list[str]) -> FastAPI:
    app = FastAPI()

    @app.get("/async")
    async def async_endpoint() -> dict[str, Any]:
        ctx = current()
        ctx.call_tool(lambda: "lookup")
        return {"chain": ctx.chain_id, "steps": ctx.get_snapshot().step_count}

    @app.get("/sync")
    def sync_endpoint() -> dict[str, Any]:  # runs in the threadpool
        ctx = current()
        ctx.call_tool(lambda: "lookup")
        return {"chain": ctx.chain_id, "steps": ctx.get_snapshot().step_count}

    @app.get("/background")
    async def background(tasks: BackgroundTasks) -> dict[str, str]:
        def later() -> None:  # runs after the response was sent
            background_seen.append(current().chain_id)

        async def later_async() -> None:
            background_seen.append(current().chain_id)

        tasks.add_task(later)
        tasks.add_task(later_async)
        return {"chain": current().chain_id}

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def tokens() -> Any:
            for _ in range(3):
                yield current().chain_id + "\n"

        return StreamingResponse(tokens(), media_type="text/plain")

    @app.get("/stream-sync")
    async def stream_sync() -> StreamingResponse:
        def tokens() -> Iterator[str]:  # iterated in the threadpool
            for _ in range(3):
                yield current().chain_id + "\n"

        return StreamingResponse(tokens(), media_type="text/plain")

    app.add_middleware(VeronicaASGIMiddleware, config=limits(5), usage_headers=True)
    return app


async def test_context_reaches_endpoints_background_tasks_and_stream_generators() -> None:
    background_seen: list[str] = []
    async with http(propagation_app(background_seen)) as client:
        chains = set()
        for path in ("/async", "/sync"):
            response = await client.get(path)
            chain = response.headers["x-veronica-chain-id"]
            assert response.json() == {"chain": chain, "steps": 1}
            chains.add(chain)
        response = await client.get("/background")
        chain = response.headers["x-veronica-chain-id"]
        assert response.json() == {"chain": chain}
        assert background_seen == [chain, chain]
        chains.add(chain)
        for path in ("/stream", "/stream-sync"):
            response = await client.get(path)
            chain = response.headers["x-veronica-chain-id"]
            assert response.text == f"{chain}\n" * 3
            chains.add(chain)
    assert len(chains) == 5  # one fresh context per request
    assert get_current_execution_context() is None


async def test_200_concurrent_requests_each_see_only_their_own_context() -> None:
    app = FastAPI()

    @app.get("/work/{n}")
    async def work(n: int) -> dict[str, Any]:
        ctx = current()
        for _ in range(n):
            ctx.call_tool(lambda: None)
            await asyncio.sleep(0)  # interleave with the other requests
            assert current() is ctx
        return {"chain": ctx.chain_id, "steps": ctx.get_snapshot().step_count}

    app.add_middleware(VeronicaASGIMiddleware, config=limits(10))
    async with http(app) as client:
        responses = await asyncio.gather(*(client.get(f"/work/{i % 7 + 1}") for i in range(200)))
    bodies = [r.json() for r in responses]
    assert [b["steps"] for b in bodies] == [i % 7 + 1 for i in range(200)]
    assert len({b["chain"] for b in bodies}) == 200


# -- per-request configuration -------------------------------------------------------------------------


def limits_app(**options: Any) -> Starlette:
    async def show(request: Request) -> JSONResponse:
        ctx = get_current_execution_context()
        return JSONResponse(None if ctx is None else ctx.config.as_dict())

    app = Starlette(routes=[Route("/{path:path}", show)])
    app.add_middleware(VeronicaASGIMiddleware, **options)
    return app


async def test_config_callable_per_route_and_header() -> None:
    premium = limits(50, max_cost_usd=5.0)

    def pick(scope: Scope) -> ExecutionConfig | None:
        if scope["path"].startswith("/public"):
            return None
        if (b"x-tier", b"premium") in scope["headers"]:
            return premium
        return limits(5)

    async with http(limits_app(config=pick)) as client:
        assert (await client.get("/chat")).json()["max_steps"] == 5
        assert (await client.get("/chat", headers={"x-tier": "premium"})).json()["max_steps"] == 50
        assert (await client.get("/public/page")).json() is None


async def test_failing_config_callable_is_logged_and_the_default_applies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(scope: Scope) -> ExecutionConfig:
        raise KeyError("tenant")

    with caplog.at_level(logging.ERROR, logger="veronica_mw"):
        async with http(limits_app(config=broken, default_config=limits(2))) as client:
            assert (await client.get("/chat")).json()["max_steps"] == 2
        async with http(limits_app(config=broken)) as client:
            assert (await client.get("/chat")).json() == STRICT_DEFAULT.as_dict()
        async with http(limits_app(config=lambda scope: "not a config")) as client:
            assert (await client.get("/chat")).json() == STRICT_DEFAULT.as_dict()
    messages = [r.getMessage() for r in caplog.records if r.name == "veronica_mw"]
    assert len(messages) == 3
    assert messages[0].startswith("veronica_mw: config callable failed for /chat")


async def test_excluded_paths_run_without_a_context() -> None:
    app = limits_app(config=limits(3), exclude_paths=["/health", "/static/"])
    async with http(app) as client:
        assert (await client.get("/health")).json() is None
        assert (await client.get("/static/app.js")).json() is None
        assert (await client.get("/healthz")).json()["max_steps"] == 3


# -- usage headers -----------------------------------------------------------------------------------


def steps_app(**options: Any) -> Starlette:
    async def two_steps(request: Request) -> JSONResponse:
        ctx = current()
        ctx.call_tool(lambda: None)
        ctx.call_tool(lambda: None)
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/", two_steps)])
    app.add_middleware(VeronicaASGIMiddleware, config=limits(5), **options)
    return app


async def test_usage_headers_are_off_by_default() -> None:
    async with http(steps_app()) as client:
        response = await client.get("/")
    assert response.status_code == 200
    assert [name for name in response.headers if name.startswith("x-veronica")] == []


async def test_usage_headers_report_the_request_usage() -> None:
    async with http(steps_app(usage_headers=True)) as client:
        response = await client.get("/")
    assert response.headers["x-veronica-steps"] == "2/5"
    assert response.headers["x-veronica-cost-usd"] == "0.000000/1"
    assert response.headers["x-veronica-retries"] == "0/1"


# -- applied twice -------------------------------------------------------------------------------------


async def test_applied_twice_the_inner_copy_passes_through() -> None:
    seen: list[ExecutionContext] = []

    async def endpoint(request: Request) -> JSONResponse:
        ctx = current()
        seen.append(ctx)
        for _ in range(10):
            ctx.call_tool(lambda: None)
        return JSONResponse({})

    inner = Starlette(routes=[Route("/", endpoint)])
    inner.add_middleware(VeronicaASGIMiddleware, config=limits(3))
    app = VeronicaASGIMiddleware(inner, config=limits(4))
    async with http(app) as client:
        response = await client.get("/")
    assert response.status_code == 429
    body = response.json()
    # The outer copy's context (max_steps=4) governed the request; the inner one made none.
    assert (body["steps_used"], body["limits"]["max_steps"]) == (4, 4)
    assert len(seen) == 1 and seen[0].config.max_steps == 4


# -- the budget-pool hook (a test double of our own pool interface) -----------------------------------


@dataclass
class Ledger:
    reserved: list[float] = field(default_factory=list)
    settled: list[tuple[float, float]] = field(default_factory=list)

    def reserve(self, amount_usd: float) -> bool:
        self.reserved.append(amount_usd)
        return True

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        self.settled.append((reserved_usd, actual_usd))

    def retry_after_s(self) -> float | None:
        return None


@dataclass
class Admission:
    allowed: bool
    status: int = 429
    reason: str = "budget_exceeded"
    retry_after_s: float | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    ledger: Any = None


class Pool:
    def __init__(self, admission: Admission | Exception) -> None:
        self.admission = admission
        self.calls = 0

    async def aadmit(self, scope: Scope) -> Admission:
        self.calls += 1
        if isinstance(self.admission, Exception):
            raise self.admission
        return self.admission


def pool_app(pool: Pool, ran: list[str]) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        ran.append("chat")
        current().call_llm(lambda: "answer", options=None)
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/chat", chat)])
    app.add_middleware(VeronicaASGIMiddleware, config=limits(5), budget_pool=pool)
    return app


async def test_pool_refusal_answers_before_the_app_runs() -> None:
    ran: list[str] = []
    pool = Pool(Admission(False, retry_after_s=41.2, headers=[("RateLimit-Remaining", "0")]))
    async with http(pool_app(pool, ran)) as client:
        response = await client.get("/chat")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "42"
    assert response.headers["ratelimit-remaining"] == "0"
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert (body["reason"], body["steps_used"], body["limits"]["max_steps"]) == ("budget_exceeded", 0, 5)
    assert ran == [] and pool.calls == 1


async def test_pool_admission_supplies_the_ledger_and_headers() -> None:
    ran: list[str] = []
    ledger = Ledger()
    pool = Pool(Admission(True, headers=[("RateLimit-Remaining", "7")], ledger=ledger))
    async with http(pool_app(pool, ran)) as client:
        response = await client.get("/chat")
    assert response.status_code == 200
    assert response.headers["ratelimit-remaining"] == "7"
    assert ran == ["chat"]
    assert ledger.reserved == [0.0] and ledger.settled == [(0.0, 0.0)]  # the context used the ledger


async def test_failing_pool_refuses_with_503(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []
    with caplog.at_level(logging.ERROR, logger="veronica_mw"):
        async with http(pool_app(Pool(ConnectionError("redis down")), ran)) as client:
            response = await client.get("/chat")
    assert response.status_code == 503
    assert json.loads(response.content)["detail"] == "budget pool unavailable (ConnectionError)"
    assert ran == []
    assert [r.exc_info[0] for r in caplog.records if r.name == "veronica_mw"] == [ConnectionError]  # type: ignore[index]


async def test_bad_options_are_rejected_at_construction() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        pass

    with pytest.raises(TypeError):
        VeronicaASGIMiddleware(app, config={"max_steps": 3})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        VeronicaASGIMiddleware(app, config=limits(3), budget_pool=object())  # type: ignore[arg-type]


async def test_uncontained_request_has_no_context_and_halts_nothing() -> None:
    app = limits_app(config=lambda scope: None)
    async with http(app) as client:
        assert (await client.get("/x")).json() is None
    with pytest.raises(ExecutionHalted):  # sanity: the strict default really refuses
        ExecutionContext(STRICT_DEFAULT).call_tool(lambda: None)


@dataclass
class DownLedger(Ledger):
    """A tenant ledger whose budget store went down mid-request (fails closed)."""

    refusal_status: int = 503
    refusal_detail: str = "budget backend unavailable"

    def reserve(self, amount_usd: float) -> bool:
        return False

    def retry_after_s(self) -> float | None:
        return 1.0


async def test_budget_store_down_mid_request_answers_503_not_429() -> None:
    ran: list[str] = []
    pool = Pool(Admission(True, ledger=DownLedger()))
    async with http(pool_app(pool, ran)) as client:
        response = await client.get("/chat")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "1"
    body = response.json()
    assert (body["reason"], body["status"], body["steps_used"]) == ("policy_denied", 503, 0)
    assert ran == ["chat"]
