"""The tenant pool behind VeronicaWSGIMiddleware (Flask on a real threaded werkzeug server, real
Redis): concurrent requests of one tenant, pre-flight 429 with Retry-After and RateLimit headers,
503 while Redis is down (deny), resume after restart, and a broken key function."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from flask import Flask

from veronica_mw import ExecutionConfig, WrapOptions, get_current_execution_context
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.redis_backend import RedisBudgetBackend
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

from ._servers import ThreadedWSGI
from .conftest import Closer, RedisServer

pytestmark = pytest.mark.redis
COST = 0.03


def environ_key(environ: dict[str, Any]) -> str | None:
    return environ.get("HTTP_X_API_KEY")


def make_app(pool: BudgetPool) -> Any:
    app = Flask(__name__)

    @app.post("/chat")
    def chat() -> dict[str, float]:
        ctx = get_current_execution_context()
        assert ctx is not None
        ctx.call_llm(
            lambda: time.sleep(0.002), options=WrapOptions(cost_estimate_hint=COST, cost_fn=lambda r: COST)
        )
        return {"cost": ctx.get_snapshot().cost_usd_accumulated}

    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)
    return VeronicaWSGIMiddleware(app.wsgi_app, config=config, budget_pool=pool)


def make_pool(closer: Closer, url: str, **kw: Any) -> BudgetPool:
    backend = closer(RedisBudgetBackend(url))
    return BudgetPool(0.30, window_s=3600, key_func=environ_key, backend=backend, backend_retry_s=0.2, **kw)


def test_concurrent_requests_and_preflight_refusal(redis_url: str, closer: Closer) -> None:
    pool = make_pool(closer, redis_url, rate_limit_headers=True)
    statuses: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(30)

    with ThreadedWSGI(make_app(pool)) as server:

        def one() -> None:
            barrier.wait(timeout=30)
            with httpx.Client(base_url=server.url, timeout=30) as client:
                response = client.post("/chat", headers={"x-api-key": "acme"})
            with lock:
                statuses.append(response.status_code)
            assert "ratelimit-policy" in response.headers

        threads = [threading.Thread(target=one) for _ in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(statuses) == [200] * 10 + [429] * 20  # $0.30 / $0.03: exactly ten
        with httpx.Client(base_url=server.url, timeout=30) as client:
            refused = client.post("/chat", headers={"x-api-key": "acme"})
            other = client.post("/chat", headers={"x-api-key": "globex"})
    assert refused.status_code == 429 and refused.json()["reason"] == "budget_exceeded"
    # refused before the app, with the window's usage and limit
    spent = "tenant budget for this window is spent ($0.300000 of $0.300000 spent, steps 10)"
    assert refused.json()["detail"] == spent
    assert 0 < int(refused.headers["retry-after"]) <= 3600
    assert refused.headers["ratelimit"].startswith('"usd";r=0;t=')
    assert other.status_code == 200 and other.headers["ratelimit"].startswith('"usd";r=300000;')
    assert pool.usage("acme").spent_usd == pytest.approx(0.30)


def test_redis_down_deny_then_resume(redis_server: RedisServer, closer: Closer) -> None:
    pool = make_pool(closer, redis_server.url)
    with ThreadedWSGI(make_app(pool)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post("/chat", headers={"x-api-key": "acme"}).status_code == 200
        redis_server.kill()
        down = client.post("/chat", headers={"x-api-key": "acme"})
        assert down.status_code == 503 and down.json()["reason"] == "policy_denied"
        assert down.headers["retry-after"] == "1"
        assert client.post("/chat").status_code == 200  # requests without a tenant do not need Redis
        redis_server.start()
        time.sleep(0.3)
        assert client.post("/chat", headers={"x-api-key": "acme"}).status_code == 200
    assert pool.usage("acme").spent_usd == pytest.approx(0.06)


def test_broken_key_function_refuses_with_503(
    redis_url: str, closer: Closer, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(environ: dict[str, Any]) -> str:
        return environ["HTTP_X_MISSING"]  # type: ignore[no-any-return]

    pool = BudgetPool(1.0, window_s=60, key_func=broken, backend=closer(RedisBudgetBackend(redis_url)))
    with ThreadedWSGI(make_app(pool)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.post("/chat")
    assert response.status_code == 503 and response.json()["reason"] == "policy_denied"
    assert "retry-after" not in response.headers
    assert "key_func raised" in caplog.text
