"""An audit log on FastAPI: every request's context, model call and halt in a tamper-evident log.

Run it under uvicorn (each worker process writes its own chain file beside ``AUDIT_PATH``)::

    AUDIT_PATH=audit/audit.jsonl AUDIT_KEY=change-me uvicorn examples.audit_app:app --workers 4
    curl 'http://127.0.0.1:8000/ask?q=hello&steps=2'
    curl 'http://127.0.0.1:8000/ask?q=runaway&steps=50'     # the sixth call is refused: a 429

then check and read what happened::

    printf change-me > key && veronica-mw audit verify audit/ --key-file key
    veronica-mw audit show audit/
    veronica-mw audit calls audit/ --chain <chain id from show> --json

Or run it as a script (offline, no server): it sends a few requests in-process, closes the log,
verifies it and prints the tree. The "model" is an offline stand-in answering in the OpenAI
chat-completions format, with token usage, so the calls are priced as gpt-4o-mini.

Settings (environment): ``AUDIT_PATH`` (default ``audit/audit.jsonl``; its directory is created,
mode 0700), ``AUDIT_KEY`` (HMAC key; unset: plain SHA-256), ``AUDIT_SIGNING_KEY`` (path of an
Ed25519 private key from ``veronica-mw audit keygen``: signed digests), ``AUDIT_ANCHOR`` (where
the signed digests also go: a file on another volume or a ``redis://`` URL), ``AUDIT_BODIES``
(1: keep prompts and answers; default 1 in this demo, off by default in the library).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from veronica_mw import AuditLog, ExecutionConfig, WrapOptions
from veronica_mw.adapters.fastapi import CurrentExecutionContext
from veronica_mw.web.asgi import VeronicaASGIMiddleware

AUDIT_PATH = Path(os.environ.get("AUDIT_PATH", "audit/audit.jsonl"))
AUDIT_PATH.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
_key = os.environ.get("AUDIT_KEY")
audit = AuditLog(
    AUDIT_PATH,
    key=_key.encode() if _key else None,
    record_bodies=os.environ.get("AUDIT_BODIES", "1") == "1",
    signing_key=os.environ.get("AUDIT_SIGNING_KEY") or None,
    anchor=os.environ.get("AUDIT_ANCHOR") or None,
)


async def fake_chat_completion(
    *, model: str, messages: list[dict[str, str]], **params: Any
) -> dict[str, Any]:
    """Stands in for ``client.chat.completions.create(...)``: a reply with usage, a few ms later."""
    await asyncio.sleep(0.002)
    question = messages[-1]["content"]
    answer = f"You asked: {question}"
    prompt_tokens = sum(len(m["content"].split()) for m in messages) + 4
    return {
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(answer.split())},
    }


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    audit.close()  # flush and write the closing head record of this worker's chain


app = FastAPI(title="veronica-mw audit log", lifespan=lifespan)
app.add_middleware(
    VeronicaASGIMiddleware,
    config=ExecutionConfig(max_cost_usd=0.05, max_steps=5, max_retries_total=1, timeout_ms=30_000),
    exclude_paths=["/pid"],
    audit=audit,
)


@app.get("/pid")
async def pid() -> dict[str, int]:
    """Which worker process answered (the multi-worker test uses it)."""
    return {"pid": os.getpid()}


@app.get("/ask")
async def ask(ctx: CurrentExecutionContext, q: str = "hello", steps: int = 1) -> dict[str, Any]:
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": q}]
    answer = ""
    for step in range(steps):
        reply = await ctx.acall_llm(
            fake_chat_completion,
            model="gpt-4o-mini",
            messages=messages,
            temperature=0.0,
            options=WrapOptions(operation_name="chat", model="gpt-4o-mini"),
        )
        answer = reply["choices"][0]["message"]["content"]
        messages = [
            *messages,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": f"more {step}"},
        ]
    return {"answer": answer, "calls": steps, "chain": ctx.chain_id, "pid": os.getpid()}


def main() -> int:
    """Offline demo: three requests in-process, then verify and show the log."""
    import httpx

    from veronica_mw.cli.main import main as cli

    async def drive() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://demo") as client:
            codes = []
            for params in ({"q": "hello"}, {"q": "twice", "steps": 2}, {"q": "runaway", "steps": 50}):
                codes.append((await client.get("/ask", params=params)).status_code)
            return codes

    print("status codes:", asyncio.run(drive()))
    audit.close()
    print("files:", ", ".join(audit.files))
    key_args: list[str] = []
    if _key:
        key_file = AUDIT_PATH.parent / "key"
        key_file.write_text(_key)
        key_args = ["--key-file", str(key_file)]
    code = cli(["audit", "verify", *audit.files, *key_args])
    cli(["audit", "show", *audit.files])
    return code


if __name__ == "__main__":
    sys.exit(main())
