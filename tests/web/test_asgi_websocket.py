"""WebSocket containment against real uvicorn servers and a real ``websockets`` client."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, get_current_execution_context
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.types import ASGIApp, Receive, Scope, Send

from .conftest import LiveServer

pytestmark = pytest.mark.anyio
Start = Callable[..., LiveServer]
# uvicorn's "websockets" implementation (deprecated by uvicorn, still in use) is built on
# websockets' deprecated legacy API.
LEGACY_MARKS = (
    pytest.mark.filterwarnings("ignore:The `websockets` implementation is deprecated"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:websockets"),
    pytest.mark.filterwarnings("ignore:remove second argument of ws_handler:DeprecationWarning"),
)
LEGACY = pytest.param("websockets", marks=LEGACY_MARKS)


def limits(max_steps: int, timeout_ms: float = 0) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=1.0, max_steps=max_steps, max_retries_total=0, timeout_ms=timeout_ms)


@dataclass
class Record:
    """What the server-side app saw, filled in on the server thread."""

    events: list[Any] = field(default_factory=list)
    started: float = 0.0
    contexts: list[ExecutionContext] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    async def wait(self) -> None:
        finished = await anyio.to_thread.run_sync(self.done.wait, 10)  # hang guard only
        assert finished, "the server-side app did not finish"


def echo_app(record: Record) -> Starlette:
    async def echo(ws: WebSocket) -> None:
        try:
            record.contexts.append(get_current_execution_context())  # type: ignore[arg-type]
            await ws.accept()
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    record.events.append(("disconnect", message.get("code"), message.get("reason")))
                    break
                await ws.send_text(message["text"])
            if record.events[-1][1] == 1008:
                try:
                    await ws.send_text("after the disconnect")
                except ExecutionHalted as exc:
                    record.events.append(("send refused", exc.reason))
                await ws.close()  # must be swallowed: the middleware already closed
                record.events.append("closed")
        finally:
            record.done.set()

    return Starlette(routes=[WebSocketRoute("/echo", echo)])


async def drain(ws: ClientConnection) -> list[str]:
    received: list[str] = []
    try:
        while True:
            received.append(str(await ws.recv()))
    except ConnectionClosed:
        return received


async def send_many(ws: ClientConnection, count: int) -> int:
    sent = 0
    try:
        for i in range(count):
            await ws.send(f"m{i}")
            sent += 1
    except ConnectionClosed:
        pass  # the server closed while we were still sending
    return sent


def client(url: str) -> connect:
    return connect(url, proxy=None, open_timeout=5, close_timeout=5)


async def ping_pong(ws: ClientConnection, count: int) -> list[str]:
    echoes: list[str] = []
    try:
        for i in range(count):
            await ws.send(f"m{i}")
            echoes.append(str(await ws.recv()))
    except ConnectionClosed:
        pass
    return echoes


# The flooding client runs on the default implementation only: uvicorn's legacy one stops reading
# when its inbound queue is full, so it sees the client's close reply only after its close
# timeout (10 s). The 1008 frame reaches the client at once either way.
@pytest.mark.parametrize(
    ("ws_impl", "flood"),
    [
        ("websockets-sansio", True),
        ("websockets-sansio", False),
        pytest.param("websockets", False, marks=LEGACY_MARKS),
    ],
)
async def test_runaway_echo_gets_exactly_five_echoes_then_1008(
    live_server: Start, ws_impl: str, flood: bool
) -> None:
    record = Record()
    server = live_server(VeronicaASGIMiddleware(echo_app(record), config=limits(10)), ws=ws_impl)
    with anyio.fail_after(20):
        async with client(server.ws_url("/echo")) as ws:
            if flood:
                await send_many(ws, 50)
                echoes = await drain(ws)
            else:
                echoes = await ping_pong(ws, 50)
            assert ws.close_code == 1008
            assert ws.close_reason == "step_limit"
        await record.wait()
    assert echoes == ["m0", "m1", "m2", "m3", "m4"]
    # The app's next receive() returned a disconnect; its later send and close were swallowed.
    assert record.events == [("disconnect", 1008, "step_limit"), ("send refused", "step_limit"), "closed"]
    snapshot = record.contexts[0].get_snapshot()
    assert (snapshot.step_count, snapshot.abort_reason) == (10, "step_limit")
    assert server.protocol_errors() == []
    warnings = [r.getMessage() for r in server.records("veronica_mw") if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "closed with 1008 (reason=step_limit)" in warnings[0]


async def test_handshake_and_close_are_not_counted(live_server: Start) -> None:
    record = Record()
    server = live_server(VeronicaASGIMiddleware(echo_app(record), config=limits(2)))
    with anyio.fail_after(20):
        async with client(server.ws_url("/echo")) as ws:
            await ws.send("only")
            assert await ws.recv() == "only"
        await record.wait()
    assert ws.close_code == 1000
    snapshot = record.contexts[0].get_snapshot()
    # connect, accept, one receive, one send, the client's close: exactly the two data messages.
    assert (snapshot.step_count, snapshot.aborted) == (2, False)
    assert record.events[0] == ("disconnect", 1000, "")
    assert server.protocol_errors() == []


def sender_app(record: Record, count: int) -> Starlette:
    async def stream(ws: WebSocket) -> None:
        try:
            await ws.accept()
            try:
                for i in range(count):
                    await ws.send_text(f"token{i}")
                    record.events.append(i)
            except ExecutionHalted as exc:
                record.events.append(("send refused", exc.reason))
            await ws.close()
        finally:
            record.done.set()

    return Starlette(routes=[WebSocketRoute("/stream", stream)])


async def test_limit_on_send_stops_a_send_only_loop(live_server: Start) -> None:
    record = Record()
    server = live_server(VeronicaASGIMiddleware(sender_app(record, 20), config=limits(3)))
    with anyio.fail_after(20):
        async with client(server.ws_url("/stream")) as ws:
            received = await drain(ws)
        await record.wait()
    assert received == ["token0", "token1", "token2"]
    assert (ws.close_code, ws.close_reason) == (1008, "step_limit")
    assert record.events == [0, 1, 2, ("send refused", "step_limit")]
    assert server.protocol_errors() == []


async def test_halt_escaping_the_app_is_not_a_server_error(live_server: Start) -> None:
    # The app does not catch the refused send: the halt propagates out of the endpoint.
    async def stream(ws: WebSocket) -> None:
        await ws.accept()
        while True:
            await ws.send_text("x")

    app = Starlette(routes=[WebSocketRoute("/stream", stream)])
    server = live_server(VeronicaASGIMiddleware(app, config=limits(4)))
    with anyio.fail_after(20):
        async with client(server.ws_url("/stream")) as ws:
            received = await drain(ws)
    assert received == ["x"] * 4
    assert (ws.close_code, ws.close_reason) == (1008, "step_limit")
    await anyio.sleep(0.2)  # let the server task finish before reading its logs
    assert server.protocol_errors() == []


def blocked_app(record: Record) -> Starlette:
    async def wait(ws: WebSocket) -> None:
        try:
            record.started = time.monotonic()  # just after the session's context was entered
            record.contexts.append(get_current_execution_context())  # type: ignore[arg-type]
            await ws.accept()
            message = await ws.receive()  # the client never speaks
            record.events.append((message["type"], message.get("code"), message.get("reason")))
            await ws.close()
        finally:
            record.done.set()

    return Starlette(routes=[WebSocketRoute("/wait", wait)])


@pytest.mark.parametrize("ws_impl", ["websockets-sansio", LEGACY])
async def test_timeout_closes_a_session_blocked_in_receive(live_server: Start, ws_impl: str) -> None:
    record = Record()
    server = live_server(
        VeronicaASGIMiddleware(blocked_app(record), config=limits(5, timeout_ms=300)), ws=ws_impl
    )
    with anyio.fail_after(20):
        async with client(server.ws_url("/wait")) as ws:
            await drain(ws)
            closed_at = time.monotonic()  # the client has the 1008 close (same clock as the server)
        await record.wait()
    assert (ws.close_code, ws.close_reason) == (1008, "timeout")
    # Measured from the session's start on the server (the deadline's origin) to the client
    # holding the close frame: the bound is timeout + 100 ms.
    elapsed_ms = (closed_at - record.started) * 1000
    assert 250 <= elapsed_ms <= 300 + 100, elapsed_ms
    assert record.events == [("websocket.disconnect", 1008, "timeout")]
    assert server.protocol_errors() == []


async def test_cancel_from_another_thread_closes_the_session(live_server: Start) -> None:
    record = Record()
    server = live_server(VeronicaASGIMiddleware(blocked_app(record), config=limits(5)))
    with anyio.fail_after(20):
        async with client(server.ws_url("/wait")) as ws:
            while not record.contexts:
                await anyio.sleep(0.01)
            ctx = record.contexts[0]
            await anyio.sleep(0.05)  # let the app block in receive()
            await anyio.to_thread.run_sync(ctx.cancel, "operator stop")
            await drain(ws)
        await record.wait()
    assert (ws.close_code, ws.close_reason) == (1008, "cancelled")
    assert record.events == [("websocket.disconnect", 1008, "cancelled")]
    # The session's halt callback was removed when it ended.
    assert ctx.cancellation_token._callbacks == []
    assert server.protocol_errors() == []


@dataclass
class Refusal:
    """A budget-pool answer (test double of our own pool interface)."""

    allowed: bool = False
    status: int = 429
    reason: str = "budget_exceeded"
    retry_after_s: float | None = 12.5
    headers: list[tuple[str, str]] = field(default_factory=lambda: [("RateLimit-Remaining", "0")])
    ledger: Any = None


class RefusingPool:
    def __init__(self) -> None:
        self.scopes: list[str] = []

    async def aadmit(self, scope: Scope) -> Refusal:
        self.scopes.append(scope["path"])
        return Refusal()


def strip_extensions(app: ASGIApp) -> ASGIApp:
    """A server without the websocket.http.response extension (as older servers are)."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        await app({k: v for k, v in scope.items() if k != "extensions"}, receive, send)

    return wrapped


async def test_refusal_before_accept_is_an_http_429_when_the_server_allows_it(live_server: Start) -> None:
    record, pool = Record(), RefusingPool()
    server = live_server(VeronicaASGIMiddleware(echo_app(record), config=limits(10), budget_pool=pool))
    with anyio.fail_after(20), pytest.raises(InvalidStatus) as info:
        async with client(server.ws_url("/echo")):
            pass
    response = info.value.response
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "13"
    assert response.headers["RateLimit-Remaining"] == "0"
    assert response.headers["Content-Type"] == "application/problem+json"
    body = json.loads(response.body)
    assert (body["reason"], body["steps_used"], body["limits"]["max_steps"]) == ("budget_exceeded", 0, 10)
    assert pool.scopes == ["/echo"]
    assert record.contexts == []  # the app never ran
    assert server.protocol_errors() == []


async def test_refusal_before_accept_is_a_403_without_the_extension(live_server: Start) -> None:
    record = Record()
    app = VeronicaASGIMiddleware(echo_app(record), config=limits(10), budget_pool=RefusingPool())
    server = live_server(strip_extensions(app))
    with anyio.fail_after(20), pytest.raises(InvalidStatus) as info:
        async with client(server.ws_url("/echo")):
            pass
    assert info.value.response.status_code == 403
    assert record.contexts == []
    assert server.protocol_errors() == []


async def test_halt_before_accept_refuses_the_handshake(live_server: Start) -> None:
    # The app's first model call is refused (max_steps=0) before it accepts.
    async def endpoint(ws: WebSocket) -> None:
        ctx = get_current_execution_context()
        assert ctx is not None
        ctx.call_llm(lambda: "plan")
        await ws.accept()

    app = Starlette(routes=[WebSocketRoute("/plan", endpoint)])
    server = live_server(VeronicaASGIMiddleware(app, config=limits(0)))
    with anyio.fail_after(20), pytest.raises(InvalidStatus) as info:
        async with client(server.ws_url("/plan")):
            pass
    assert info.value.response.status_code == 429
    assert json.loads(info.value.response.body)["reason"] == "step_limit"
    assert server.protocol_errors() == []


async def test_applied_twice_counts_every_message_once(live_server: Start) -> None:
    record = Record()
    inner = Starlette(routes=echo_app(record).routes, middleware=[])
    inner.add_middleware(VeronicaASGIMiddleware, config=limits(10))
    server = live_server(VeronicaASGIMiddleware(inner, config=limits(10)))
    with anyio.fail_after(20):
        async with client(server.ws_url("/echo")) as ws:
            await send_many(ws, 50)
            echoes = await drain(ws)
        await record.wait()
    assert len(echoes) == 5 and ws.close_code == 1008
    assert record.contexts[0].get_snapshot().step_count == 10
    assert server.protocol_errors() == []


async def test_normal_session_under_the_limit_is_untouched(live_server: Start) -> None:
    record = Record()
    server = live_server(VeronicaASGIMiddleware(echo_app(record), config=limits(100)))
    with anyio.fail_after(20):
        async with client(server.ws_url("/echo")) as ws:
            for i in range(10):
                await ws.send(f"m{i}")
                assert await ws.recv() == f"m{i}"
        await record.wait()
    assert ws.close_code == 1000
    assert record.contexts[0].get_snapshot().step_count == 20
    assert record.events[0] == ("disconnect", 1000, "")
    assert server.protocol_errors() == []
