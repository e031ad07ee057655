"""Views of the test project. ``STATE`` records what the views saw, for the tests to assert on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from veronica_mw import ExecutionHalted, WrapOptions, get_current_execution_context

STATE: dict[str, Any] = {}
DISCONNECT_GUARD = 100_000  # chunks; more than any socket buffer holds


def reset() -> None:
    STATE.clear()
    STATE.update(chunk_ctx=[], closed=0, view_ctx=[])


reset()


def _step() -> None:
    ctx = get_current_execution_context()
    assert ctx is not None
    ctx.call_llm(lambda: "tok", options=WrapOptions(cost_estimate_hint=0.01))


def steps(request: HttpRequest, n: int) -> JsonResponse:
    ctx = get_current_execution_context()
    STATE["view_ctx"].append(ctx)
    STATE["meta_ctx"] = request.META.get("veronica.context")
    for _ in range(n):
        _step()
    return JsonResponse({"contained": ctx is not None, "steps": ctx.get_snapshot().step_count if ctx else 0})


def stream(request: HttpRequest, n: int) -> StreamingHttpResponse:
    STATE["view_ctx"].append(get_current_execution_context())

    def body() -> Iterator[bytes]:
        try:
            for i in range(n):
                ctx = get_current_execution_context()
                STATE["chunk_ctx"].append(ctx)
                _step()
                yield f"{i}:{ctx.chain_id if ctx else None}\n".encode()
        finally:
            STATE["closed"] += 1
            STATE["ctx_at_close"] = get_current_execution_context()

    return StreamingHttpResponse(body(), content_type="text/plain")


def endless(request: HttpRequest) -> StreamingHttpResponse:
    def body() -> Iterator[bytes]:
        try:
            for _ in range(DISCONNECT_GUARD):
                STATE["chunk_ctx"].append(get_current_execution_context())
                yield b"x" * 1024
        finally:
            STATE["closed"] += 1
            STATE["ctx_at_close"] = get_current_execution_context()

    return StreamingHttpResponse(body(), content_type="application/octet-stream")


def caught(request: HttpRequest) -> HttpResponse:
    try:
        for _ in range(100):
            _step()
    except ExecutionHalted as halt:
        return JsonResponse({"mine": halt.reason}, status=402)
    return JsonResponse({"mine": "no halt"})


def caught_stream(request: HttpRequest) -> StreamingHttpResponse:
    try:
        for _ in range(100):
            _step()
    except ExecutionHalted as halt:
        reason = halt.reason
    return StreamingHttpResponse(iter([f"stopped: {reason}\n".encode(), b"partial result\n"]), status=402)


def boom(request: HttpRequest) -> HttpResponse:
    raise KeyError("not a halt")


def send(request: HttpRequest) -> JsonResponse:
    """A tool call an approval policy may gate."""
    ctx = get_current_execution_context()
    assert ctx is not None
    STATE["sent"] = STATE.get("sent", 0)
    result = ctx.call_tool(_send, options=WrapOptions(operation_name="send_email"))
    return JsonResponse({"result": result})


def _send() -> str:
    STATE["sent"] += 1
    return "sent"
