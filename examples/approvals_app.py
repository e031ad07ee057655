"""Human approval of sensitive tool calls on FastAPI: the agent may only send email once a person
says yes on the approvals page (or through its JSON API). The "model" is an offline stand-in.

Each approver has a token of their own (at least 128 bits), and every decision records who made it.
Serve it (from the repository root)::

    APPROVERS="alice=$(python -c 'import secrets; print(secrets.token_urlsafe())'),bob=$(...)" \\
        uvicorn examples.approvals_app:app
    # several workers share pending requests and decisions through Redis:
    #   APPROVERS=... VERONICA_REDIS_URL=redis://127.0.0.1:6379/0 \
    #       uvicorn examples.approvals_app:app --workers 4

then ``curl -X POST 'http://127.0.0.1:8000/agent?to=cfo@example.com'`` waits; open
http://127.0.0.1:8000/approvals/ in a browser, sign in with your token and press Approve (the
request answers 200 and the email "goes out") or Reject (403 problem+json); or decide with
``curl -X POST -H "Authorization: Bearer $ALICE_TOKEN" http://127.0.0.1:8000/approvals/<id>/approve``.
Served over https (or behind a TLS proxy), the session cookie is ``__Host-`` and Secure.

``python examples/approvals_app.py`` runs the same app in process, offline: one request is
approved, one rejected, one edited, and what happened is printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from typing import Any

from fastapi import FastAPI

from veronica_mw import (
    ApprovalQueue,
    DowngradeAt,
    ExecutionConfig,
    JsonOutput,
    RequireApproval,
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
outbox: list[dict[str, str]] = []  # what "went out" (in this process)


async def send_email(to: str, subject: str, body: str) -> str:
    outbox.append({"to": to, "subject": subject, "body": body})
    return f"email to {to} sent"


async def fake_model(to: str) -> str:
    """Stands in for a chat model deciding on a tool call (JSON, as the output check demands)."""
    await asyncio.sleep(0.001)
    return json.dumps({"tool": "send_email", "to": to, "subject": "Q3", "body": "Numbers attached."})


app = FastAPI(title="veronica-mw approvals")


@app.post("/agent")
async def agent(to: str = "cfo@example.com") -> dict[str, Any]:
    ctx = get_current_execution_context()
    assert ctx is not None
    plan = json.loads(
        await ctx.acall_llm(fake_model, to, options=WrapOptions(operation_name="plan", model="gpt-4o"))
    )
    # Waits here (without blocking the worker) until a person decides.
    result = await ctx.acall_tool(
        send_email,
        plan["to"],
        plan["subject"],
        plan["body"],
        options=WrapOptions(operation_name="send_email"),
    )
    return {"result": result}


app.mount("/approvals", queue.asgi_app())
app.add_middleware(
    VeronicaASGIMiddleware,
    config=ExecutionConfig(max_cost_usd=0.50, max_steps=10, max_retries_total=2, timeout_ms=300_000),
    exclude_paths=["/approvals/"],
    checks=[JsonOutput()],  # the model must answer JSON (re-asked otherwise)
    policies=[
        RequireApproval(["send_email", "delete_*"], queue, timeout_s=120),  # a person decides
        DowngradeAt(0.8, "gpt-4o-mini"),  # the last 20% of the budget on a cheaper model
    ],
)


async def _demo() -> None:
    import httpx

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://demo", timeout=30) as http:

        async def decide(who: str, action: str, body: dict[str, Any] | None = None) -> None:
            auth = {"authorization": f"Bearer {APPROVERS[who]}"}
            while not (pending := (await http.get("/approvals/", headers=auth)).json()["pending"]):
                await asyncio.sleep(0.01)
            request = pending[0]
            print(f"pending: {request['tool']}({request['arguments']}) -> {action}")
            decided = await http.post(f"/approvals/{request['id']}/{action}", headers=auth, json=body or {})
            print(f"decided by {decided.json()['approver']}")

        for to, who, action, body in (
            ("cfo@example.com", "alice", "approve", None),
            ("everyone@example.com", "bob", "reject", {"message": "not to the whole company"}),
            (
                "ceo@example.com",
                "alice",
                "edit",
                {"arguments": {"to": "ceo-office@example.com", "subject": "Q3", "body": "Hi"}},
            ),
        ):
            call = asyncio.create_task(http.post("/agent", params={"to": to}))
            await decide(who, action, body)
            response = await call
            detail = response.json().get("result") or response.json().get("detail")
            print(f"{action}: {response.status_code} {detail}")
    print(f"emails sent: {[m['to'] for m in outbox]}")


if __name__ == "__main__":
    asyncio.run(_demo())
