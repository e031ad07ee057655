"""Per-tenant budgets on FastAPI: each API key may spend a fixed amount per window, shared by every
worker process (and machine) through Redis. The "model" is an offline stand-in with a fixed cost.

Run it from the repository root (one Redis, four workers)::

    VERONICA_REDIS_URL=redis://127.0.0.1:6379/0 uvicorn examples.tenant_budget_app:app --workers 4

``VERONICA_REDIS_URL`` may name any node of a Redis Cluster just as well (``redis://node-a:7000``,
``rediss://`` for TLS): the kind of server is detected on first connect.

then::

    curl -i -X POST -H 'X-API-Key: acme' 'http://127.0.0.1:8000/chat?q=hello'
    # 200 with RateLimit / RateLimit-Policy headers; once acme's window is spent: 429 problem+json
    # with Retry-After = seconds until the window resets. Another key has its own pool.

Without ``VERONICA_REDIS_URL`` the pool is in-process (fine for one worker). Settings (environment):
``TENANT_LIMIT_USD`` (default 5.00), ``TENANT_WINDOW`` (seconds, or minute/hour/day/week/month;
default day), ``TENANT_ON_BACKEND_ERROR`` (deny | local; default deny), ``CALL_COST_USD`` (0.03),
``TENANT_LEASE_USD`` (each worker leases this slice per tenant; default: no lease),
``TENANT_POOL`` (the pool's name in Redis; default ``default``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from veronica_mw import ExecutionConfig, WrapOptions
from veronica_mw.adapters.fastapi import CurrentExecutionContext
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.redis_backend import RedisBudgetBackend
from veronica_mw.web.asgi import VeronicaASGIMiddleware

CALL_COST_USD = float(os.environ.get("CALL_COST_USD", "0.03"))
REDIS_URL = os.environ.get("VERONICA_REDIS_URL")
_window = os.environ.get("TENANT_WINDOW", "day")
window: float | str = float(_window) if _window.replace(".", "", 1).isdigit() else _window


def api_key(scope: dict[str, Any]) -> str | None:
    """The tenant is whoever the X-API-Key header names; no header: not pooled (per-request limits only)."""
    for name, value in scope.get("headers", ()):
        if name == b"x-api-key":
            return bytes(value).decode("latin-1")
    return None


backend = RedisBudgetBackend(REDIS_URL) if REDIS_URL else None
_lease = os.environ.get("TENANT_LEASE_USD")
pool = BudgetPool(
    float(os.environ.get("TENANT_LIMIT_USD", "5.00")),
    window_s=window,
    key_func=api_key,
    backend=backend,
    on_backend_error=os.environ.get("TENANT_ON_BACKEND_ERROR", "deny"),
    rate_limit_headers=True,
    name=os.environ.get("TENANT_POOL", "default"),
    lease_usd=float(_lease) if _lease else None,
)


async def fake_model(prompt: str) -> dict[str, Any]:
    """Stands in for a chat-completion call that takes a few milliseconds."""
    await asyncio.sleep(0.005)
    return {"text": f"echo: {prompt}"}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await pool.aflush()  # book leased spend and hand back unused slices before the worker exits
    if backend is not None:
        await backend.aclose()  # close the Redis connections this worker opened


app = FastAPI(title="veronica-mw tenant budgets", lifespan=lifespan)
app.add_middleware(
    VeronicaASGIMiddleware,
    # Per request: at most $0.50 and 10 steps, whatever the tenant has left.
    config=ExecutionConfig(max_cost_usd=0.50, max_steps=10, max_retries_total=2, timeout_ms=30_000),
    exclude_paths=["/health"],
    budget_pool=pool,
)


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@app.get("/pid")
async def pid() -> dict[str, int]:
    """Which worker process answered (the multi-worker tests use it)."""
    return {"pid": os.getpid()}


@app.post("/chat")
async def chat(ctx: CurrentExecutionContext, q: str = "hello") -> dict[str, Any]:
    # The call reserves CALL_COST_USD in the request's limits AND in the tenant's pool before it
    # runs; a tenant with nothing left gets a 429 with Retry-After instead.
    options = WrapOptions(
        operation_name="chat", cost_estimate_hint=CALL_COST_USD, cost_fn=lambda r: CALL_COST_USD
    )
    reply = await ctx.acall_llm(fake_model, q, options=options)
    return {
        "reply": reply["text"],
        "request_cost_usd": ctx.get_snapshot().cost_usd_accumulated,
        "pid": os.getpid(),
    }
