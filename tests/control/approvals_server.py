"""The app the approval server tests run under a real uvicorn (one or several worker processes).

An agent (explicit kernel calls: a fake model picks the tool, then the tool runs) wants to send an
email; ``send_email`` needs a person's approval through the ApprovalQueue mounted at /approvals.
``send_fax`` has a 1-second approval timeout. Every tool run is appended to the file named by
``VERONICA_TEST_RUNS``, so the tests count runs across worker processes.
"""

from __future__ import annotations

import json
import os
from typing import Any

from fastapi import FastAPI

from veronica_mw import (
    ApprovalQueue,
    ExecutionConfig,
    RequireApproval,
    VeronicaASGIMiddleware,
    WrapOptions,
    get_current_execution_context,
)

RUNS = os.environ["VERONICA_TEST_RUNS"]
queue = ApprovalQueue(
    os.environ["VERONICA_TEST_TOKEN"], redis_url=os.environ.get("VERONICA_TEST_REDIS_URL") or None
)


def _record(tool: str, arguments: dict[str, Any]) -> str:
    with open(RUNS, "a", encoding="utf-8") as runs:
        runs.write(json.dumps({"tool": tool, "pid": os.getpid(), **arguments}) + "\n")
    return f"{tool} done for {arguments['to']}"


async def send_email(to: str, body: str) -> str:
    return _record("send_email", {"to": to, "body": body})


async def send_fax(to: str, body: str) -> str:
    return _record("send_fax", {"to": to, "body": body})


TOOLS = {"send_email": send_email, "send_fax": send_fax}


async def fake_model(tool: str, to: str) -> dict[str, Any]:
    """The model's answer: a tool call (what a real model would decide from the conversation)."""
    return {"tool": tool, "arguments": {"to": to, "body": "Quarterly numbers attached."}}


app = FastAPI()


@app.get("/pid")
async def pid() -> dict[str, int]:
    return {"pid": os.getpid()}


@app.post("/agent")
async def agent(tool: str = "send_email", to: str = "cfo@example.com") -> dict[str, Any]:
    ctx = get_current_execution_context()
    assert ctx is not None
    call = await ctx.acall_llm(fake_model, tool, to, options=WrapOptions(operation_name="plan"))
    result = await ctx.acall_tool(
        TOOLS[call["tool"]], **call["arguments"], options=WrapOptions(operation_name=call["tool"])
    )
    return {"result": result, "worker": os.getpid()}


app.mount("/approvals", queue.asgi_app())
app.add_middleware(
    VeronicaASGIMiddleware,
    config=ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=1, timeout_ms=120_000),
    exclude_paths=["/approvals/", "/pid"],
    policies=[
        RequireApproval(["send_email"], queue, timeout_s=60),
        RequireApproval(["send_fax"], queue, timeout_s=1.0),
    ],
)
