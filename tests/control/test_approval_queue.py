"""ApprovalQueue and its app, in process: JSON API auth and status codes, browser sessions, Redis."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from veronica_mw import ApprovalQueue, ApprovalRequest, Approve, Edit, Reject

pytestmark = pytest.mark.anyio
TOKEN = "approvals-test-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
HTML = {"accept": "text/html"}


def request(tool: str = "send_email", timeout_s: float = 30.0, **arguments: Any) -> ApprovalRequest:
    return ApprovalRequest(
        id=f"r{time.monotonic_ns():x}",
        chain_id="c-1",
        tool=tool,
        arguments=arguments or {"to": "ann@example.com"},
        usage={"steps_used": 1, "cost_usd_used": 0.01, "limits": {"max_steps": 5, "max_cost_usd": 1.0}},
        timeout_s=timeout_s,
    )


async def parked(queue: ApprovalQueue, req: ApprovalRequest) -> asyncio.Task[Any]:
    """``queue(req)`` waiting in a task, once the request is listed."""
    task = asyncio.create_task(queue(req))
    for _ in range(500):  # hang guard only
        if any(r["id"] == req.id for r in await queue.pending()):
            return task
        await asyncio.sleep(0.01)
    raise AssertionError("request never became pending")


@pytest.fixture
async def client() -> AsyncIterator[tuple[ApprovalQueue, httpx.AsyncClient]]:
    queue = ApprovalQueue(TOKEN)
    transport = httpx.ASGITransport(app=queue.asgi_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield queue, http


async def test_the_json_api_needs_the_token(client: tuple[ApprovalQueue, httpx.AsyncClient]) -> None:
    queue, http = client
    task = await parked(queue, request())
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {TOKEN}"}):
        listing = await http.get("/", headers=headers)
        assert listing.status_code == 401 and listing.headers["www-authenticate"].startswith("Bearer")
        decided = await http.post(f"/{(await queue.pending())[0]['id']}/approve", headers=headers)
        assert decided.status_code == 401
    assert not task.done()  # nothing was decided
    listing = await http.get("/", headers=AUTH)
    assert listing.status_code == 200
    (pending,) = listing.json()["pending"]
    assert (pending["tool"], pending["arguments"]) == ("send_email", {"to": "ann@example.com"})
    assert (await http.post(f"/{pending['id']}/approve", headers=AUTH)).json() == {
        "id": pending["id"],
        "status": "approve",
        "approver": "default",
    }
    assert await task == Approve()
    assert (await http.post(f"/{pending['id']}/approve", headers=AUTH)).status_code == 409
    assert (await http.post(f"/{pending['id']}/reject", headers=AUTH)).status_code == 409
    assert (await http.post("/doesnotexist/approve", headers=AUTH)).status_code == 404
    assert (await http.get(f"/{pending['id']}", headers=AUTH)).json()["status"] == "approve"
    assert (await http.get("/doesnotexist", headers=AUTH)).status_code == 404


async def test_reject_and_edit_bodies(client: tuple[ApprovalQueue, httpx.AsyncClient]) -> None:
    queue, http = client
    rejected = await parked(queue, request())
    rid = (await queue.pending())[0]["id"]
    assert (await http.post(f"/{rid}/reject", headers=AUTH, json={"message": "no"})).status_code == 200
    assert await rejected == Reject("no")
    edited = await parked(queue, request())
    rid = (await queue.pending())[0]["id"]
    assert (await http.post(f"/{rid}/edit", headers=AUTH, json={"arguments": [1]})).status_code == 400
    assert (await http.post(f"/{rid}/edit", headers=AUTH, content=b"{nope")).status_code == 400
    ok = await http.post(f"/{rid}/edit", headers=AUTH, json={"arguments": {"to": "team@example.com"}})
    assert ok.status_code == 200
    assert await edited == Edit({"to": "team@example.com"})
    big = await http.post(f"/{rid}/reject", headers=AUTH, content=b"x" * 100_000)
    assert big.status_code == 413


async def test_an_unanswered_request_expires_as_a_rejection(
    client: tuple[ApprovalQueue, httpx.AsyncClient],
) -> None:
    queue, http = client
    req = request(timeout_s=0.3)
    with pytest.raises(TimeoutError):
        await queue(req)
    assert await queue.pending() == []
    assert (await http.post(f"/{req.id}/approve", headers=AUTH)).status_code == 409


async def test_browser_session_and_csrf(client: tuple[ApprovalQueue, httpx.AsyncClient]) -> None:
    queue, http = client
    task = await parked(queue, request(to="<script>alert(1)</script>"))
    login = await http.get("/", headers=HTML)
    assert login.status_code == 200 and 'name="token"' in login.text and TOKEN not in login.text
    assert (
        login.headers["cache-control"] == "no-store"
        and "frame-ancestors 'none'" in login.headers["content-security-policy"]
    )
    assert (await http.post("/session", data={"token": "wrong"})).status_code == 401
    signed_in = await http.post("/session", data={"token": TOKEN})
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/"
    cookie = signed_in.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/;" in cookie
    assert TOKEN not in cookie and TOKEN not in signed_in.headers["location"]
    page = await http.get("/", headers=HTML)  # the client keeps the cookie
    assert page.status_code == 200 and "send_email" in page.text
    assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;" in page.text  # escaped
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf is not None
    rid = (await queue.pending())[0]["id"]
    # A cross-site form post carries the cookie (if the browser sent it at all) but not the CSRF token.
    assert (await http.post(f"/{rid}/approve", data={})).status_code == 403
    assert (await http.post(f"/{rid}/approve", data={"csrf": "0" * 64})).status_code == 403
    assert not task.done()
    done = await http.post(f"/{rid}/reject", data={"csrf": csrf.group(1), "message": "not now"})
    assert done.status_code == 303 and done.headers["location"] == "/"
    assert await task == Reject("not now")
    late = await http.post(f"/{rid}/approve", data={"csrf": csrf.group(1)})
    assert late.status_code == 409 and "already decided" in late.text
    # A forged or expired cookie is no session.
    http.cookies.clear()
    http.cookies.set("veronica_approvals", "abc.99999999999.deadbeef")
    assert 'name="token"' in (await http.get("/", headers=HTML)).text
    assert (await http.post(f"/{rid}/approve", data={"csrf": csrf.group(1)})).status_code == 401


async def test_mounted_under_a_prefix() -> None:
    queue = ApprovalQueue(TOKEN)
    app = Starlette(routes=[Mount("/approvals", app=queue.asgi_app())])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        assert (await http.get("/approvals", headers=HTML)).headers["location"].endswith("/approvals/")
        signed_in = await http.post("/approvals/session", data={"token": TOKEN})
        assert signed_in.headers["location"] == "/approvals/"
        assert "Path=/approvals/;" in signed_in.headers["set-cookie"]
        task = await parked(queue, request())
        page = await http.get("/approvals/", headers=HTML)
        rid = (await queue.pending())[0]["id"]
        assert f'action="/approvals/{rid}/approve"' in page.text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf is not None
        bad = await http.post(f"/approvals/{rid}/edit", data={"csrf": csrf.group(1), "arguments": "[1"})
        assert bad.status_code == 400 and f'action="/approvals/{rid}/approve"' in bad.text
        await http.post(f"/approvals/{rid}/approve", data={"csrf": csrf.group(1)})
        assert await task == Approve()


async def test_redis_decisions_reach_another_queue_instance(redis_url: str) -> None:
    """Two workers: the request waits in one, the decision is posted to the other."""
    waiting, deciding = ApprovalQueue(TOKEN, redis_url), ApprovalQueue(TOKEN, redis_url)
    transport = httpx.ASGITransport(app=deciding.asgi_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        task = await parked(waiting, request())
        (pending,) = (await http.get("/", headers=AUTH)).json()["pending"]
        assert (
            await http.post(f"/{pending['id']}/edit", headers=AUTH, json={"arguments": {"to": "b"}})
        ).status_code == 200
        assert await task == Edit({"to": "b"})
        assert (await http.post(f"/{pending['id']}/approve", headers=AUTH)).status_code == 409
        assert (await http.post("/nope/approve", headers=AUTH)).status_code == 404
        # Two reviewers at once: exactly one decision wins.
        task = await parked(waiting, request())
        rid = (await deciding.pending())[0]["id"]
        outcomes = await asyncio.gather(*(deciding.decide(rid, Approve()) for _ in range(5)))
        assert sorted(outcomes) == ["decided"] * 4 + ["ok"]
        assert await task == Approve()


async def test_redis_waits_outlast_the_socket_timeout(redis_url: str) -> None:
    queue = ApprovalQueue(TOKEN, redis_url + "?socket_timeout=0.2")
    task = await parked(queue, request(timeout_s=30))
    await asyncio.sleep(1.0)  # several socket timeouts long
    assert not task.done()
    assert await ApprovalQueue(TOKEN, redis_url).decide((await queue.pending())[0]["id"], Approve()) == "ok"
    assert await task == Approve()


async def test_redis_expiry_and_stale_requests(redis_url: str) -> None:
    queue = ApprovalQueue(TOKEN, redis_url)
    req = request(timeout_s=0.3)
    with pytest.raises(TimeoutError):
        await queue(req)
    assert await queue.pending() == []
    assert await queue.decide(req.id, Approve()) == "decided"
    assert (await queue.get(req.id) or {})["status"] == "expired"
