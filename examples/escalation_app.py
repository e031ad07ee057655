"""Budget escalation on FastAPI: at its step limit a request asks a person for more instead of halting.

Each request may take 3 steps. A research request that needs more waits at its limit while a person
decides on the approvals page: Approve raises the limit by 5 steps (never past 20) and the request
carries on; Edit grants less; Reject (or no answer in 2 minutes) ends it with the ordinary 429.

A waiting request holds its connection open (fine for a few minutes behind a proxy whose read timeout
is longer); work that may wait longer runs as a job outside the request (``POST /jobs``): the
response comes at once and ``GET /jobs/{id}`` tells how it went. Serve it (from the repository root)::

    APPROVERS="alice=$(python -c 'import secrets; print(secrets.token_urlsafe())')" \\
        uvicorn examples.escalation_app:app

then ``curl -X POST 'http://127.0.0.1:8000/research?steps=5'`` waits; open
http://127.0.0.1:8000/approvals/ in a browser, sign in with your token and decide.

``python examples/escalation_app.py`` runs the same app in process, offline: one request is
approved, one rejected, one job gets less than it asked for, and what happened is printed.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from typing import Any

from fastapi import FastAPI

from veronica_mw import (
    ApprovalQueue,
    AskForMore,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    VeronicaASGIMiddleware,
    WrapOptions,
    get_current_execution_context,
)

APPROVERS = dict(
    pair.split("=", 1) for pair in os.environ.get("APPROVERS", "").split(",") if "=" in pair
) or {name: secrets.token_urlsafe() for name in ("alice", "bob")}
if "APPROVERS" not in os.environ and __name__ != "__main__":
    for name, token in APPROVERS.items():  # set APPROVERS="alice=...,bob=..." to choose them
        print(f"approver {name}: token {token}", file=sys.stderr)
queue = ApprovalQueue(approvers=APPROVERS, redis_url=os.environ.get("VERONICA_REDIS_URL"))
# One AskForMore for every request: each request's context has its own pending ask.
ask = AskForMore(queue, add_steps=5, max_steps=20, timeout_s=120)
LIMITS = ExecutionConfig(max_cost_usd=0.50, max_steps=3, max_retries_total=1, timeout_ms=300_000)
searches: list[str] = []  # every search that ran (in this process)
jobs: dict[str, dict[str, Any]] = {}
_tasks: set[asyncio.Task[None]] = set()  # the running jobs (a task nobody holds may vanish)


async def search(topic: str, page: int) -> str:
    """Stands in for a search tool an agent calls once per step."""
    await asyncio.sleep(0.001)
    searches.append(f"{topic} #{page}")
    return f"notes on {topic}, page {page}"


async def research(ctx: ExecutionContext, topic: str, steps: int) -> dict[str, Any]:
    notes = [
        await ctx.acall_tool(search, topic, page, options=WrapOptions(operation_name="search"))
        for page in range(steps)
    ]
    return {
        "notes": len(notes),
        "steps_used": ctx.get_snapshot().step_count,
        "max_steps": ctx.config.max_steps,
    }


app = FastAPI(title="veronica-mw budget escalation")


@app.post("/research")
async def research_request(topic: str = "budgets", steps: int = 5) -> dict[str, Any]:
    ctx = get_current_execution_context()
    assert ctx is not None
    return await research(ctx, topic, steps)  # waits here while a person decides


@app.post("/jobs")
async def start_job(topic: str = "budgets", steps: int = 5) -> dict[str, str]:
    job = secrets.token_hex(4)
    jobs[job] = {"status": "running"}
    # A context of its own (parent=None): the job outlives this request and its deadline.
    ctx = ExecutionContext(LIMITS, parent=None, name=f"job {job}", on_limit=ask)
    task = asyncio.create_task(_run_job(job, ctx, topic, steps))
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    return {"job": job}


async def _run_job(job: str, ctx: ExecutionContext, topic: str, steps: int) -> None:
    try:
        async with ctx:
            jobs[job] = {"status": "done", **await research(ctx, topic, steps)}
    except ExecutionHalted as halted:
        jobs[job] = {"status": "halted", "reason": halted.reason, "detail": halted.detail}


@app.get("/jobs/{job}")
async def job_status(job: str) -> dict[str, Any]:
    return jobs.get(job, {"status": "unknown"})


@app.get("/searches")
async def searches_run() -> dict[str, int]:
    return {"searches": len(searches)}


app.mount("/approvals", queue.asgi_app())
app.add_middleware(VeronicaASGIMiddleware, config=LIMITS, exclude_paths=["/approvals/"], on_limit=ask)


async def _demo() -> None:
    import httpx

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://demo", timeout=30) as http:

        async def decide(who: str, action: str, body: dict[str, Any] | None = None) -> None:
            auth = {"authorization": f"Bearer {APPROVERS[who]}"}
            while not (pending := (await http.get("/approvals/", headers=auth)).json()["pending"]):
                await asyncio.sleep(0.01)
            request = pending[0]
            asked = request["arguments"]
            print(f"pending: {request['tool']} for {asked['context']} at {asked['limit_value']}, "
                  f"+{asked['add_steps']} asked -> {action} by {who}")  # fmt: skip
            await http.post(f"/approvals/{request['id']}/{action}", headers=auth, json=body or {})

        call = asyncio.create_task(http.post("/research", params={"steps": 5}))
        await decide("alice", "approve")
        response = await call
        print(f"approve: {response.status_code} {response.json()}")

        call = asyncio.create_task(http.post("/research", params={"steps": 5}))
        await decide("bob", "reject", {"message": "enough for today"})
        response = await call
        print(f"reject: {response.status_code} {response.json()['detail']}")

        job = (await http.post("/jobs", params={"steps": 5})).json()["job"]
        print(f"job {job} started: the response came at once")
        await decide("alice", "edit", {"arguments": {"add_steps": 2}})
        while (status := (await http.get(f"/jobs/{job}")).json())["status"] == "running":
            await asyncio.sleep(0.01)
        print(f"job: {status}")
    print(f"searches run: {len(searches)}")


if __name__ == "__main__":
    asyncio.run(_demo())
