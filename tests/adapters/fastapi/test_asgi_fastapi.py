"""The FastAPI dependency, the example app (served by a real uvicorn) and the demo scenario."""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx
import pytest
from fastapi import Depends, FastAPI
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from veronica_mw import ExecutionConfig, ExecutionContext
from veronica_mw.adapters.fastapi import CurrentExecutionContext, current_execution_context
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...web.conftest import LiveServer

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[3]
CONTEXT = Depends(current_execution_context)


def dependency_app() -> FastAPI:
    app = FastAPI()

    @app.get("/depends")
    async def with_depends(ctx: ExecutionContext = CONTEXT) -> dict[str, Any]:
        return {"chain": ctx.chain_id, "max_steps": ctx.config.max_steps}

    @app.get("/annotated")
    def with_alias(ctx: CurrentExecutionContext) -> dict[str, Any]:  # sync: in the threadpool
        return {"chain": ctx.chain_id, "max_steps": ctx.config.max_steps}

    app.add_middleware(
        VeronicaASGIMiddleware,
        config=ExecutionConfig(max_cost_usd=1, max_steps=7, max_retries_total=0),
        exclude_paths=["/open/"],
        usage_headers=True,
    )
    app.get("/open/depends")(with_depends)
    return app


async def test_dependency_returns_the_request_context() -> None:
    transport = httpx.ASGITransport(app=dependency_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        for path in ("/depends", "/annotated"):
            response = await client.get(path)
            assert response.json() == {"chain": response.headers["x-veronica-chain-id"], "max_steps": 7}


async def test_dependency_fails_clearly_without_a_context() -> None:
    with pytest.raises(RuntimeError, match="no veronica-mw execution context for this request"):
        current_execution_context()
    transport = httpx.ASGITransport(app=dependency_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        with pytest.raises(RuntimeError, match="add VeronicaASGIMiddleware"):
            await client.get("/open/depends")  # an excluded path has no context


def test_importing_the_dependency_module_does_not_import_fastapi() -> None:
    code = (
        "import sys, veronica_mw.adapters.fastapi, veronica_mw.web.asgi; "
        "print('fastapi' in sys.modules, 'starlette' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


# -- the example app -----------------------------------------------------------------------------------


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fastapi_app_example", ROOT / "examples" / "fastapi_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_resolves_as_a_uvicorn_import_string() -> None:
    code = (
        "import uvicorn.importer as i; print(type(i.import_from_string('examples.fastapi_app:app')).__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "FastAPI"


async def test_example_app_on_a_real_server(live_server: Any) -> None:
    server: LiveServer = live_server(load_example().app)
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as client:
        ok = await client.get("/chat", params={"q": "hello world"})
        runaway = await client.get("/chat", params={"tools": 50})
        async with client.stream("GET", "/stream", params={"tokens": 40}) as response:
            events = [line async for line in response.aiter_lines() if line.startswith("data:")]
        health = await client.get("/health")
    assert ok.status_code == 200 and ok.json()["usage"]["steps_used"] == 4
    assert ok.headers["x-veronica-steps"] == "4/12"
    assert runaway.status_code == 429 and runaway.json()["reason"] == "step_limit"
    assert len(events) == 12  # one model call per token, 12 steps
    assert health.json() == {"status": "ok"} and "x-veronica-steps" not in health.headers
    replies: list[str] = []
    with anyio.fail_after(10):
        async with connect(server.ws_url("/ws"), proxy=None) as ws:
            try:
                for i in range(20):
                    await ws.send(f"hi {i}")
                    replies.append(str(await ws.recv()))
            except ConnectionClosed:
                pass
    # receive + model call + send = 3 steps per message: 4 full rounds fit in 12 steps.
    assert len(replies) == 4 and ws.close_code == 1008
    await anyio.sleep(0.1)
    assert server.protocol_errors() == []


# -- the demo scenario ---------------------------------------------------------------------------------


def test_websocket_runaway_demo(caplog: pytest.LogCaptureFixture) -> None:
    from veronica_mw.cli._demo_websocket import run_websocket_runaway

    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        result = run_websocket_runaway()
    json.dumps(result)  # JSON-ready
    assert {k: result[k] for k in ("baseline_ops", "contained_ops", "reduction_pct", "close_code")} == {
        "baseline_ops": 100,
        "contained_ops": 10,
        "reduction_pct": 90.0,
        "close_code": 1008,
    }
    assert result["echoes_received"] == 5 and result["close_reason"] == "step_limit"
    assert isinstance(result["latency_ms"], float) and result["latency_ms"] > 0
