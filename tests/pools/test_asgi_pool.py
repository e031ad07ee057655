"""The tenant pool behind VeronicaASGIMiddleware on real uvicorn servers and a real Redis:
4 worker processes x 50 concurrent requests, tenant isolation, window reset with Retry-After,
RateLimit headers, WebSocket refusal before accept, and killing Redis mid-run."""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import websockets
from fastapi import FastAPI, WebSocket

from veronica_mw import ExecutionConfig, WrapOptions, get_current_execution_context
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.redis_backend import RedisBudgetBackend
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ._servers import ThreadedUvicorn, UvicornWorkers
from .conftest import Closer, RedisServer

pytestmark = pytest.mark.redis
COST = 0.03


def app_env(redis_url: str, **extra: str) -> dict[str, str]:
    return {
        "VERONICA_REDIS_URL": redis_url,
        "TENANT_LIMIT_USD": "1.00",
        "TENANT_WINDOW": "3600",
        "CALL_COST_USD": str(COST),
        **extra,
    }


def shared_usage(closer: Closer, redis_url: str, tenant: str) -> tuple[float, float]:
    """What Redis holds for the example app's pool (same name, window and limit)."""
    pool = BudgetPool(1.0, window_s=3600, key_func=str, backend=closer(RedisBudgetBackend(redis_url)))
    usage = pool.usage(tenant)
    return usage.spent_usd, usage.reserved_usd


async def burst(url: str, keys: list[str]) -> list[httpx.Response]:
    """One POST /chat per key, all at once."""
    limits = httpx.Limits(max_connections=len(keys), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        return await asyncio.gather(*(client.post("/chat", headers={"x-api-key": k}) for k in keys))


def check_refusal(response: httpx.Response, status: int, reason: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["reason"] == reason
    assert int(response.headers["retry-after"]) >= 1


def test_4_workers_x_50_concurrent_requests_two_tenants(redis_url: str, closer: Closer) -> None:
    with UvicornWorkers(app_env(redis_url)) as server:  # starts only once all 4 workers answered
        responses = asyncio.run(burst(server.url, ["acme"] * 200 + ["globex"] * 50))
    acme, globex = responses[:200], responses[200:]
    assert [r.status_code for r in acme].count(200) == 33  # $0.99 of $1.00: no overshoot, no leak
    assert [r.status_code for r in globex].count(200) == 33  # its own pool, untouched by acme
    for r in acme + globex:
        if r.status_code != 200:
            check_refusal(r, 429, "budget_exceeded")
        assert "ratelimit-policy" in r.headers
    for tenant in ("acme", "globex"):
        spent, reserved = shared_usage(closer, redis_url, tenant)
        assert spent == pytest.approx(0.99, abs=1e-9) and reserved == 0.0


def small_app(pool: BudgetPool) -> Any:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await pool.backend.aclose()  # type: ignore[attr-defined]  # the server loop's Redis connections

    app = FastAPI(lifespan=lifespan)

    @app.post("/chat")
    async def chat() -> dict[str, float]:
        ctx = get_current_execution_context()
        assert ctx is not None
        await ctx.acall_llm(
            lambda: "ok", options=WrapOptions(cost_estimate_hint=COST, cost_fn=lambda r: COST)
        )
        return {"cost": ctx.get_snapshot().cost_usd_accumulated}

    @app.websocket("/ws")
    async def ws(socket: WebSocket) -> None:
        await socket.accept()
        await socket.send_text("hi")
        await socket.close()

    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)
    return VeronicaASGIMiddleware(app, config=config, budget_pool=pool)


def api_key(scope: dict[str, Any]) -> str | None:
    return dict(scope["headers"]).get(b"x-api-key", b"").decode() or None


def test_window_reset_and_retry_after(redis_url: str, closer: Closer) -> None:
    backend = closer(RedisBudgetBackend(redis_url))
    pool = BudgetPool(0.06, window_s=3, key_func=api_key, backend=backend, rate_limit_headers=True)
    with ThreadedUvicorn(small_app(pool)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        headers = {"x-api-key": "acme"}
        while client.post("/chat", headers=headers).status_code == 200:
            pass  # spend the window (2 calls; a window boundary in between just means more calls)
        refused = client.post("/chat", headers=headers)
        refused_at = time.monotonic()
        check_refusal(refused, 429, "budget_exceeded")
        retry_after = int(refused.headers["retry-after"])
        assert 1 <= retry_after <= 3
        assert refused.headers["ratelimit"] == f'"usd";r=0;t={retry_after}'
        assert refused.headers["ratelimit-policy"] == '"usd";q=60000;w=3;qu="usd-micros"'
        while True:
            ok = client.post("/chat", headers=headers)
            if ok.status_code == 200 or time.monotonic() - refused_at > 10:  # hang guard
                break
            time.sleep(0.05)
        waited = time.monotonic() - refused_at
        assert ok.status_code == 200
        assert abs(waited - retry_after) <= 1.0  # the header told the truth, to the second
        assert ok.headers["ratelimit"].startswith('"usd";r=60000;t=')  # a fresh window, as admitted


def test_websocket_refused_before_accept(redis_url: str, closer: Closer) -> None:
    pool = BudgetPool(0.0, window_s=60, key_func=api_key, backend=closer(RedisBudgetBackend(redis_url)))

    async def main(url: str) -> None:
        async with websockets.connect(url + "/ws") as socket:  # no key: not pooled
            assert await socket.recv() == "hi"
        with pytest.raises(websockets.InvalidStatus) as info:
            async with websockets.connect(url + "/ws", additional_headers={"x-api-key": "acme"}):
                pass
        response = info.value.response
        assert response.status_code == 429
        assert json.loads(response.body or b"{}")["reason"] == "budget_exceeded"
        assert int(response.headers["retry-after"]) >= 1

    with ThreadedUvicorn(small_app(pool)) as server:
        asyncio.run(main(server.url.replace("http", "ws")))


def test_kill_redis_deny_refuses_with_503_then_resumes(redis_server: RedisServer, closer: Closer) -> None:
    with UvicornWorkers(app_env(redis_server.url, TENANT_ON_BACKEND_ERROR="deny")) as server:
        first = asyncio.run(burst(server.url, ["acme"] * 10))
        assert [r.status_code for r in first] == [200] * 10
        redis_server.kill()
        during = asyncio.run(burst(server.url, ["acme"] * 40))
        for r in during:
            check_refusal(r, 503, "policy_denied")  # fail closed: nothing spent without Redis
        redis_server.start()
        time.sleep(1.2)  # past backend_retry_s: every worker tries Redis again
        after = asyncio.run(burst(server.url, ["acme"] * 40))
    assert [r.status_code for r in after].count(200) == 23  # (1.00 - 0.30) / 0.03
    spent, reserved = shared_usage(closer, redis_server.url, "acme")
    assert spent == pytest.approx(0.99, abs=1e-9) and spent <= 1.0 and reserved == 0.0


def test_kill_redis_local_serves_per_process_then_reconciles(
    redis_server: RedisServer, closer: Closer
) -> None:
    with UvicornWorkers(app_env(redis_server.url, TENANT_ON_BACKEND_ERROR="local")) as server:
        first = asyncio.run(burst(server.url, ["acme"] * 10))
        assert [r.status_code for r in first] == [200] * 10
        redis_server.kill()
        during = asyncio.run(burst(server.url, ["acme"] * 300))
        served = [r for r in during if r.status_code == 200]
        per_worker = collections.Counter(r.json()["pid"] for r in served)
        assert served  # keeps serving without Redis ...
        assert max(per_worker.values()) <= 33  # ... each process within the pool on its own
        for r in during:
            if r.status_code != 200:
                check_refusal(r, 429, "budget_exceeded")
        redis_server.start()
        total = 0.03 * (10 + len(served))
        deadline = time.monotonic() + 30  # hang guard: idle workers push their outage spend too
        while (
            shared_usage(closer, redis_server.url, "acme")[0] < total - 1e-9 and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        spent, reserved = shared_usage(closer, redis_server.url, "acme")
        assert spent == pytest.approx(total, abs=1e-9)  # every served call counted exactly once
        assert reserved == 0.0
        after = asyncio.run(burst(server.url, ["acme"] * 4))
    for r in after:  # Redis rules again, and it knows the window is spent
        check_refusal(r, 429, "budget_exceeded")
