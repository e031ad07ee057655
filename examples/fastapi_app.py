"""A FastAPI app contained by veronica-mw, with an offline fake "LLM" (no API key, no network).

Run it from the repository root::

    uvicorn examples.fastapi_app:app

then try::

    curl -i 'http://127.0.0.1:8000/chat?q=hello'        # a small agent loop; usage in x-veronica-* headers
    curl -i 'http://127.0.0.1:8000/chat?q=hello&tools=20'  # a runaway tool loop: HTTP 429 problem+json
    curl -N 'http://127.0.0.1:8000/stream?q=hello'      # SSE tokens; a long generation is cut cleanly
    python -m websockets ws://127.0.0.1:8000/ws         # each message in and out is one step; then 1008
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse

from veronica_mw import ExecutionConfig, WrapOptions, get_current_execution_context
from veronica_mw.adapters.fastapi import CurrentExecutionContext
from veronica_mw.web.asgi import VeronicaASGIMiddleware

MODEL = WrapOptions(operation_name="fake-llm", model="gpt-4o-mini", cost_estimate_hint=0.0005)


def fake_llm(prompt: str) -> dict[str, Any]:
    """Stands in for a chat-completion call: a reply plus the token usage a provider reports."""
    words = prompt.split()
    return {
        "text": f"echo: {' '.join(reversed(words))}",
        "model": "gpt-4o-mini",
        "usage": {"input_tokens": 20 + len(words), "output_tokens": 12},
    }


def search_tool(query: str) -> str:
    return f"3 documents about {query!r}"


app = FastAPI(title="veronica-mw example")
app.add_middleware(
    VeronicaASGIMiddleware,
    config=ExecutionConfig(max_cost_usd=0.05, max_steps=12, max_retries_total=2, timeout_ms=20_000),
    exclude_paths=["/health"],
    usage_headers=True,
)


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}  # excluded: runs without a context


@app.get("/chat")
def chat(ctx: CurrentExecutionContext, q: str = "hello", tools: int = 2) -> dict[str, Any]:
    """Plan, call ``tools`` tools, answer. A sync endpoint: FastAPI runs it in its threadpool, and the
    request's context comes along. With ``tools`` above the step limit the halt escapes and the
    middleware answers 429."""
    plan = ctx.call_llm(fake_llm, f"plan for {q}", options=MODEL)
    findings = [ctx.call_tool(search_tool, f"{q} #{i}") for i in range(tools)]
    answer = ctx.call_llm(fake_llm, f"{q} given {len(findings)} findings", options=MODEL)
    return {"plan": plan["text"], "answer": answer["text"], "usage": ctx.get_snapshot().as_dict()}


@app.get("/stream")
async def stream(q: str = "hello", tokens: int = 30) -> StreamingResponse:
    """Server-sent events, one model call per token: the step limit ends a long generation, and the
    middleware closes the stream cleanly."""

    async def events() -> AsyncIterator[str]:
        ctx = get_current_execution_context()  # the generator runs inside the request's context
        assert ctx is not None
        for i in range(tokens):
            chunk = await ctx.acall_llm(fake_llm, f"{q} token {i}", options=MODEL)
            yield f"data: {chunk['text']}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


@app.websocket("/ws")
async def chat_socket(websocket: WebSocket) -> None:
    """Every message received and every reply sent is one step; the model call too."""
    await websocket.accept()
    ctx = get_current_execution_context()
    assert ctx is not None
    try:
        while True:
            prompt = await websocket.receive_text()
            reply = await ctx.acall_llm(fake_llm, prompt, options=MODEL)
            await websocket.send_text(reply["text"])
    except WebSocketDisconnect:
        return  # the client left, or the session's limit closed it with 1008
