"""The WebSocket-runaway scenario for ``veronica-mw demo``: a real uvicorn server on 127.0.0.1 and a
real ``websockets`` client, without and with the middleware.

A client sends 50 messages to an echo endpoint: 50 receives + 50 sends = 100 operations. Under
``max_steps=10`` the session ends after 5 echoes (10 operations) with close code 1008.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..kernel.config import ExecutionConfig
from ..kernel.context import get_current_execution_context
from ..kernel.exceptions import MissingFrameworkError
from ..web.types import ASGIApp, Receive, Scope, Send


@dataclass
class _Ops:
    count: int = 0
    halted_at: float = 0.0


def _echo_app(ops: _Ops) -> ASGIApp:
    """A bare ASGI echo endpoint that counts the data messages it handles."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            return
        ctx = get_current_execution_context()
        if ctx is not None:
            ctx.cancellation_token.add_callback(lambda: setattr(ops, "halted_at", time.perf_counter()))
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            ops.count += 1
            await send({"type": "websocket.send", "text": message.get("text"), "bytes": message.get("bytes")})
            ops.count += 1

    return app


@contextmanager
def serve_in_thread(app: ASGIApp) -> Iterator[int]:
    """Run ``app`` on uvicorn in a background thread on an ephemeral 127.0.0.1 port; yield the port."""
    try:
        import uvicorn
    except ImportError as exc:
        raise MissingFrameworkError("uvicorn", "fastapi", exc, module="veronica-mw demo") from exc
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_config=None, log_level="error", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.005)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


async def _client(port: int, messages: int) -> tuple[int, int | None, str, float]:
    try:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed
    except ImportError as exc:
        raise MissingFrameworkError("websockets", "fastapi", exc, module="veronica-mw demo") from exc
    echoes, closed_at = 0, 0.0
    async with connect(f"ws://127.0.0.1:{port}/echo", proxy=None, open_timeout=10) as ws:
        try:
            for i in range(messages):
                await ws.send(f"message {i}")
                await ws.recv()
                echoes += 1
        except ConnectionClosed:
            closed_at = time.perf_counter()
    return echoes, ws.close_code, ws.close_reason or "", closed_at


def run_session(app: ASGIApp, messages: int) -> tuple[int, int | None, str, float]:
    with serve_in_thread(app) as port:
        return asyncio.run(_client(port, messages))


def run_websocket_runaway(messages: int = 50, max_steps: int = 10) -> dict[str, Any]:
    """Run the scenario; return a JSON-ready summary (ops without and with containment)."""
    from ..web.asgi import VeronicaASGIMiddleware

    baseline = _Ops()
    run_session(_echo_app(baseline), messages)
    contained = _Ops()
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=max_steps, max_retries_total=0)
    app = VeronicaASGIMiddleware(_echo_app(contained), config=config)
    echoes, code, reason, closed_at = run_session(app, messages)
    latency_ms = (closed_at - contained.halted_at) * 1000 if closed_at and contained.halted_at else None
    return {
        "scenario": "websocket_runaway",
        "messages_sent_by_client": messages,
        "max_steps": max_steps,
        "baseline_ops": baseline.count,
        "contained_ops": contained.count,
        "reduction_pct": round(100.0 * (1 - contained.count / baseline.count), 1) if baseline.count else 0.0,
        "echoes_received": echoes,
        "close_code": code,
        "close_reason": reason,
        "latency_ms": round(latency_ms, 3) if latency_ms is not None else None,
    }
