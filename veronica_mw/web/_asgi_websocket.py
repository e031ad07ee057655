"""One WebSocket session under the ASGI middleware.

Every data message the app receives (``websocket.receive``) or sends (``websocket.send``) is one
``tool`` step of the session's context; the handshake, ``websocket.close`` and
``websocket.disconnect`` are free. When the context halts (a step refused, a timeout fired by the
timeout pool's thread, ``ctx.cancel()`` from anywhere, or an LLM call of the app refused), the
session is closed exactly once:

- after accept: ``websocket.close`` with code 1008 and the reason code as close reason;
- before accept: an HTTP 429 problem response through the ``websocket.http.response`` extension
  when the server offers it, else a close before accept (the server answers 403).

From then on the app's ``receive()`` returns ``websocket.disconnect`` (code 1008), its
``websocket.close``/``websocket.accept`` are swallowed and its ``websocket.send`` raises
``ExecutionHalted`` without sending, so nothing reaches the server twice and a send-only loop
stops instead of spinning.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from ..kernel.config import WrapOptions
from ..kernel.exceptions import ExecutionHalted
from ..kernel.execution import ExecutionContext
from .problem import problem_response
from .types import Message, Receive, Scope, Send

logger = logging.getLogger("veronica_mw")

CLOSE_POLICY_VIOLATION = 1008
# Steps of the session, not tool calls: observers count them rather than trace each one.
_RECEIVE = WrapOptions(operation_name="websocket.receive", session_message=True)
_SEND = WrapOptions(operation_name="websocket.send", session_message=True)
_HTTP_RESPONSE_EXTENSION = "websocket.http.response"


class WebSocketSession:
    """Per-session state of the ASGI middleware's WebSocket path (created in ``__call__``)."""

    __slots__ = (
        "ctx",
        "path",
        "_scope",
        "_receive",
        "_send",
        "_extra",
        "_loop",
        "_remove_callback",
        "_close_task",
        "_in_send",
        "accepted",
        "closed",
        "halt_closed",
        "done",
    )

    def __init__(
        self,
        ctx: ExecutionContext,
        scope: Scope,
        receive: Receive,
        send: Send,
        extra_headers: Sequence[tuple[bytes, bytes]],
    ) -> None:
        self.ctx = ctx
        self.path: str = scope.get("path", "")
        self._scope = scope
        self._receive = receive
        self._send = send
        self._extra = extra_headers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._remove_callback: Callable[[], None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._in_send = 0
        self.accepted = False
        self.closed = False  # a close or handshake refusal has been sent (by anyone)
        self.halt_closed = False  # ... and it was ours, because the context halted
        self.done = False

    # -- halt notification --------------------------------------------------------------------

    def arm(self) -> None:
        """Close the session as soon as the context halts, whoever halts it and on any thread."""
        if not _asyncio_running():  # e.g. trio: a halt is then seen at the next receive/send
            return
        self._loop = asyncio.get_running_loop()
        self._remove_callback = self.ctx.cancellation_token.add_callback(self._on_halt_threadsafe)

    def _on_halt_threadsafe(self) -> None:
        # Runs on the halting thread (the timeout pool's, a worker's, or the loop's own).
        loop = self._loop
        if loop is None or self.done:
            return
        try:
            loop.call_soon_threadsafe(self._on_halt)
        except RuntimeError:  # the loop is already closed: the session is over anyway
            pass

    def _on_halt(self) -> None:
        # While the app is inside send(), the send wrapper closes right after it (one writer).
        if self.done or self.closed or self._in_send or self._loop is None:
            return
        self._close_task = self._loop.create_task(self.close_for_halt())

    # -- closing ---------------------------------------------------------------------------------

    def _disconnect(self) -> Message:
        reason = self.ctx.abort_reason or "cancelled"
        return {"type": "websocket.disconnect", "code": CLOSE_POLICY_VIOLATION, "reason": reason}

    async def close_for_halt(self, halt: ExecutionHalted | None = None) -> None:
        """Close (or refuse) the session because of a halt; idempotent."""
        if self.closed:
            return
        self.closed = self.halt_closed = True
        if halt is None:
            halt = self.ctx.halted_error()
        try:
            if self.accepted:
                await self._send(
                    {"type": "websocket.close", "code": CLOSE_POLICY_VIOLATION, "reason": halt.reason}
                )
                logger.warning(
                    "veronica_mw: websocket %s closed with 1008 (reason=%s) [chain %s]",
                    self.path,
                    halt.reason,
                    self.ctx.chain_id,
                )
            else:
                problem = problem_response(
                    halt.reason,
                    snapshot=halt.snapshot,
                    retry_after_s=halt.retry_after_s,
                    extra_headers=self._extra,
                )
                await refuse(self._scope, self._send, problem, halt.reason)
                logger.info(
                    "veronica_mw: websocket %s refused before accept (reason=%s)", self.path, halt.reason
                )
        except OSError:
            # The client is already gone (uvicorn raises ClientDisconnected, an OSError): there is
            # nobody left to tell, and the app sees the disconnect on its next receive().
            logger.debug("veronica_mw: websocket %s: client gone before the 1008 close", self.path)

    async def finish(self, halt: ExecutionHalted | None = None) -> None:
        """The app returned or raised: close if the context halted and nobody closed yet."""
        if halt is not None or self.ctx.aborted:
            await self.close_for_halt(halt)
        task = self._close_task
        if task is not None and not task.done():
            await task

    def release(self) -> None:
        """End of session (always called): later halts no longer reach it."""
        self.done = True
        remove, self._remove_callback = self._remove_callback, None
        if remove is not None:
            remove()

    # -- the receive/send the app sees -------------------------------------------------------------

    async def receive(self) -> Message:
        if self.halt_closed:
            return self._disconnect()
        message = await self._receive()
        kind = message["type"]
        if kind == "websocket.receive":
            if self.halt_closed:  # halted while the app was waiting: the message is dropped
                return self._disconnect()
            try:
                self.ctx.begin_call("tool", _RECEIVE).commit(cost_usd=0.0)
            except ExecutionHalted as halt:
                await self.close_for_halt(halt)
                return self._disconnect()
        elif kind == "websocket.disconnect":
            if self.halt_closed:
                return self._disconnect()  # the server's answer to our own close: say why
            self.closed = True  # the client left: a later halt has nobody to close
        return message

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "websocket.send":
            if self.halt_closed:
                raise self.ctx.halted_error()
            try:
                self.ctx.begin_call("tool", _SEND).commit(cost_usd=0.0)
            except ExecutionHalted as halt:
                await self.close_for_halt(halt)
                raise
            self._in_send += 1
            try:
                await self._send(message)
            finally:
                self._in_send -= 1
            if self.ctx.aborted and not self.closed:  # halted while we were sending
                await self.close_for_halt()
            return
        if self.halt_closed:
            return  # accept/close/response after our close: swallowed, never sent twice
        if kind == "websocket.accept":
            if self.ctx.aborted:
                await self.close_for_halt()  # halted before accept: refuse instead
                return
            self.accepted = True
            if self._extra:
                message = {**message, "headers": [*message.get("headers", ()), *self._extra]}
        elif kind == "websocket.close" or kind == "websocket.http.response.start":
            self.closed = True
        await self._send(message)


async def refuse(
    scope: Scope, send: Send, problem: tuple[int, list[tuple[bytes, bytes]], bytes], reason: str
) -> None:
    """Refuse a WebSocket before accept: the ``problem`` response (from ``problem_response``) if the
    server supports the ``websocket.http.response`` extension, else a close before accept, which
    the server turns into HTTP 403."""
    if _HTTP_RESPONSE_EXTENSION in (scope.get("extensions") or {}):
        status, headers, body = problem
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body, "more_body": False})
        # Let the server see its transport close before the app returns: uvicorn's sans-I/O
        # implementation otherwise logs "ASGI callable returned without completing handshake".
        if _asyncio_running():
            await asyncio.sleep(0)
    else:
        await send({"type": "websocket.close", "code": CLOSE_POLICY_VIOLATION, "reason": reason})


def _asyncio_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
