"""ApprovalQueue as an attacker tries it: namespaces, forged decisions, named approvers, sessions,
throttling, weak tokens, cookies, what the page shows, and malformed input (never a 500)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import secrets
import time
from typing import Any

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veronica_mw import (
    ApprovalQueue,
    Approve,
    Edit,
    ExecutionConfig,
    ExecutionContext,
    PolicyPipeline,
    Reject,
    RequireApproval,
    WrapOptions,
)

from .test_approval_queue import parked, request

pytestmark = pytest.mark.anyio
ALICE, BOB, OTHER = (secrets.token_urlsafe(16) for _ in range(3))
HTML = {"accept": "text/html"}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def local_client(queue: ApprovalQueue, base_url: str = "http://localhost") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=queue.asgi_app()), base_url=base_url)


async def sign_in(http: httpx.AsyncClient, token: str) -> str:
    """Sign in through the form; the page's CSRF token."""
    assert (await http.post("/session", data={"token": token})).status_code == 303
    page = await http.get("/", headers=HTML)
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found is not None
    return found.group(1)


# -- isolation and authenticated decisions ---------------------------------------------------------


async def _never_cross(one: ApprovalQueue, two: ApprovalQueue, two_token: str) -> None:
    task = await parked(one, request())
    rid = (await one.pending())[0]["id"]
    assert await two.pending() == [] and await two.get(rid) is None
    assert await two.decide(rid, Approve()) == "unknown"
    async with local_client(two) as http:
        assert (await http.get("/", headers=bearer(two_token))).json()["pending"] == []
        assert (await http.post(f"/{rid}/approve", headers=bearer(two_token))).status_code == 404
    await asyncio.sleep(0.5)
    assert not task.done()  # nothing the other queue did reached this waiter
    assert await one.decide(rid, Approve()) == "ok"
    assert await task == Approve()


async def test_two_queues_on_one_redis_never_see_each_others_items(redis_url: str) -> None:
    prod, staging = ApprovalQueue(ALICE, redis_url), ApprovalQueue(OTHER, redis_url)
    assert prod.namespace != staging.namespace
    await _never_cross(prod, staging, OTHER)
    await _never_cross(staging, prod, ALICE)


async def test_two_queues_on_a_redis_cluster(redis_cluster: Any) -> None:
    prod, staging = ApprovalQueue(ALICE, redis_cluster.url), ApprovalQueue(OTHER, redis_cluster.url)
    await _never_cross(prod, staging, OTHER)
    # Every key of one queue is in one slot (one hash tag), so its scripts run on a cluster.
    keys = [k for node in redis_cluster.masters() for k in node.client().keys(f"*{prod.namespace}*")]
    assert keys and len({redis_cluster.slot(str(k)) for k in keys}) == 1


async def test_a_decision_written_to_redis_without_the_secret_is_a_rejection(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    queue = ApprovalQueue(ALICE, redis_url)
    direct = redis.Redis.from_url(redis_url)
    key = f"veronica-mw:approvals:{{{queue.namespace}}}:req:"
    forged = [
        {"decision": "approve"},  # no MAC at all
        {"decision": "approve", "approver": "default", "mac": "0" * 64},  # a made-up one
    ]
    for decision in forged:
        task = await parked(queue, request())
        rid = (await queue.pending())[0]["id"]
        direct.hset(key + rid, "decision", json.dumps(decision))
        with caplog.at_level(logging.WARNING, logger="veronica_mw"):
            answer = await asyncio.wait_for(task, 10)
        assert isinstance(answer, Reject) and "could not be authenticated" in answer.message
        assert "cannot be authenticated" in caplog.text
    # Changing the stored arguments (what the page shows) voids the person's approval of them.
    task = await parked(queue, request(to="ann@example.com"))
    rid = (await queue.pending())[0]["id"]
    record = json.loads(direct.hget(key + rid, "record") or b"{}")
    direct.hset(key + rid, "record", json.dumps({**record, "arguments": {"to": "mallory@example.com"}}))
    assert await queue.decide(rid, Approve()) == "ok"
    answer = await asyncio.wait_for(task, 10)
    assert isinstance(answer, Reject) and "other arguments" in answer.message
    direct.close()


async def test_decisions_are_recorded_once_whatever_the_timeout(redis_url: str) -> None:
    queue = ApprovalQueue(ALICE, redis_url)
    task = await parked(queue, request(timeout_s=7200))  # longer than the hour decisions are kept
    rid = (await queue.pending())[0]["id"]
    assert await queue.decide(rid, Approve()) == "ok"
    assert await queue.decide(rid, Reject("again")) == "decided"
    assert await task == Approve()
    direct = redis.Redis.from_url(redis_url)
    key = f"veronica-mw:approvals:{{{queue.namespace}}}:req:{rid}"
    assert direct.pttl(key) > 7200 * 1000  # the decision lives in its request's key: same lifetime
    assert direct.keys(f"*{rid}*") == [key.encode()]
    direct.close()
    late = request(timeout_s=0.2)
    with pytest.raises(TimeoutError):
        await queue(late)
    assert await queue.decide(late.id, Approve()) == "decided"


# -- approvers -------------------------------------------------------------------------------------


async def test_named_approvers_are_recorded_in_the_decision_and_its_event() -> None:
    queue = ApprovalQueue(approvers={"alice": ALICE, "bob": BOB})
    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0),
        PolicyPipeline([RequireApproval(["send_*"], queue, timeout_s=20)]),
    )
    sent: list[dict[str, Any]] = []

    async def send_email(to: str) -> str:
        sent.append({"to": to})
        return "sent"

    async def decide_as(token: str, action: str, body: dict[str, Any] | None = None) -> httpx.Response:
        async with local_client(queue) as http:
            for _ in range(500):
                pending = (await http.get("/", headers=bearer(token))).json()["pending"]
                if pending:
                    return await http.post(
                        f"/{pending[0]['id']}/{action}", headers=bearer(token), json=body or {}
                    )
                await asyncio.sleep(0.01)
        raise AssertionError("nothing pending")

    async with ctx:
        call = asyncio.create_task(
            ctx.acall_tool(send_email, to="ann@example.com", options=WrapOptions(operation_name="send_email"))
        )
        decided = await decide_as(ALICE, "approve")
        assert decided.json()["approver"] == "alice" and await call == "sent"
        call = asyncio.create_task(
            ctx.acall_tool(send_email, to="x@example.com", options=WrapOptions(operation_name="send_email"))
        )
        await decide_as(BOB, "edit", {"arguments": {"to": "y@example.com"}})
        assert await call == "sent" and sent == [{"to": "ann@example.com"}, {"to": "y@example.com"}]
    granted, edited = [e for e in ctx.get_events() if e.kind in ("approval_granted", "approval_edited")]
    assert granted.data["approver"] == "alice" and edited.data["approver"] == "bob"
    assert granted.data["args_sha256"] == hashlib.sha256(b'{"to":"ann@example.com"}').hexdigest()
    assert granted.data["edited_args_sha256"] is None
    assert edited.data["edited_args_sha256"] == hashlib.sha256(b'{"to":"y@example.com"}').hexdigest()
    assert abs(granted.data["decided_at"] - time.time()) < 30
    with pytest.raises(ValueError, match="which approver"):
        await queue.decide("r1", Approve())


async def test_authenticate_by_a_trusted_header() -> None:
    queue = ApprovalQueue(authenticate=lambda h: h.get("x-user"), secret=secrets.token_urlsafe(32))
    task = await parked(queue, request())
    rid = (await queue.pending())[0]["id"]
    async with local_client(queue) as http:
        page = await http.get("/", headers={**HTML, "x-user": "carol"})
        assert "Signed in as carol" in page.text
        assert (await http.get("/", headers=HTML)).text.count('name="token"') == 1  # no header: sign-in
        # A cross-site form (text/plain, no CSRF) cannot decide with the proxy's header.
        plain = await http.post(f"/{rid}/approve", headers={"x-user": "carol", "content-type": "text/plain"})
        assert plain.status_code == 415
        form = await http.post(f"/{rid}/approve", headers={"x-user": "carol"}, data={"csrf": "x"})
        assert form.status_code == 403
        done = await http.post(f"/{rid}/approve", headers={"x-user": "carol"}, json={})
        assert done.status_code == 200 and done.json()["approver"] == "carol"
    assert (await task).approver == "carol"


def test_weak_tokens_are_refused() -> None:
    for weak in ("aaaaaaaaaaaaaaaa", "short", "abcdabcdabcdabcdabcdabcdabcdabcd", "0123456789" * 2, "a" * 64):
        with pytest.raises(ValueError, match="at least 128 bits, e.g. secrets.token_urlsafe"):
            ApprovalQueue(weak)
        with pytest.raises(ValueError, match="approver 'bob'"):
            ApprovalQueue(approvers={"alice": ALICE, "bob": weak})
    for strong in (secrets.token_urlsafe(16), secrets.token_hex(16), secrets.token_urlsafe()):
        ApprovalQueue(strong)
    with pytest.raises(ValueError, match="token of their own"):
        ApprovalQueue(ALICE, approvers={"alice": ALICE})
    with pytest.raises(ValueError, match="someone must be able to decide"):
        ApprovalQueue()
    with pytest.raises(ValueError, match="secret="):
        ApprovalQueue(authenticate=lambda h: None)
    with pytest.raises(ValueError, match="approver name"):
        ApprovalQueue(approvers={"al ice": ALICE})


# -- sessions, throttling, cookies -----------------------------------------------------------------


async def test_logout_revokes_a_copied_cookie() -> None:
    queue = ApprovalQueue(ALICE)
    async with local_client(queue) as http, local_client(queue) as thief:
        csrf = await sign_in(http, ALICE)
        ((name, value),) = http.cookies.items()
        thief.cookies.set(name, value)
        assert "Signed in as default" in (await thief.get("/", headers=HTML)).text
        assert (await http.post("/logout", data={"csrf": csrf})).status_code == 303
        assert 'name="token"' in (await thief.get("/", headers=HTML)).text  # the copy is dead too
        assert (await thief.post("/logout", data={"csrf": csrf})).status_code == 403


async def test_sessions_end_when_idle_and_at_their_lifetime() -> None:
    # Seconds, not tenths: a loaded CI machine can take a few hundred ms between two requests.
    idle = ApprovalQueue(ALICE, session_idle_s=2.0)
    async with local_client(idle) as http:
        await sign_in(http, ALICE)
        for _ in range(3):  # used within the idle timeout: it lives on past it
            await asyncio.sleep(0.8)
            assert "Signed in" in (await http.get("/", headers=HTML)).text
        await asyncio.sleep(2.5)
        assert 'name="token"' in (await http.get("/", headers=HTML)).text
    capped = ApprovalQueue(ALICE, session_max_s=2.0)
    async with local_client(capped) as http:
        await sign_in(http, ALICE)
        for _ in range(3):
            await asyncio.sleep(0.8)
        assert 'name="token"' in (await http.get("/", headers=HTML)).text  # used, but too old


async def test_redis_sessions_are_shared_and_revoked(redis_url: str) -> None:
    one, two = ApprovalQueue(ALICE, redis_url), ApprovalQueue(ALICE, redis_url)
    async with local_client(one) as http, local_client(two) as other:
        csrf = await sign_in(http, ALICE)
        other.cookies.update(http.cookies)
        assert "Signed in as default" in (await other.get("/", headers=HTML)).text  # another worker
        await http.post("/logout", data={"csrf": csrf})
        assert 'name="token"' in (await other.get("/", headers=HTML)).text


async def test_failed_sign_ins_are_throttled_in_process() -> None:
    queue = ApprovalQueue(ALICE)
    async with local_client(queue) as http:
        for _ in range(3):
            assert (await http.post("/session", data={"token": "guess"})).status_code == 401
        for _ in range(2):
            assert (await http.get("/", headers=bearer("guess"))).status_code == 401
        sixth = await http.post("/session", data={"token": ALICE})  # even the right one, from here
        assert sixth.status_code == 429 and 1 <= int(sixth.headers["retry-after"]) <= 60
        assert (await http.get("/", headers=bearer(ALICE))).status_code == 429


@pytest.mark.parametrize(
    ("base_url", "secure_cookies", "secure"),
    [
        ("http://localhost:8000", None, False),
        ("http://127.0.0.1", None, False),
        ("http://approvals.internal", None, True),  # behind a TLS proxy uvicorn does not trust
        ("https://approvals.example.com", None, True),
        ("http://approvals.internal", False, False),
        ("http://localhost", True, True),
    ],
)
async def test_cookies(base_url: str, secure_cookies: bool | None, secure: bool) -> None:
    queue = ApprovalQueue(ALICE, secure_cookies=secure_cookies)
    async with local_client(queue, base_url) as http:
        signed_in = await http.post("/session", data={"token": ALICE})
    cookie = signed_in.headers["set-cookie"]
    assert cookie.startswith("__Host-veronica_approvals=") == secure and ("; Secure" in cookie) == secure
    assert "Path=/;" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert ("strict-transport-security" in signed_in.headers) == secure


# -- what the page shows ---------------------------------------------------------------------------


async def test_the_page_shows_hidden_characters_cuts_long_arguments_and_pages() -> None:
    queue = ApprovalQueue(ALICE)
    sneaky = "alice@example.com\u202e\u200bmoc.evil\U000e0041"
    tasks = [await parked(queue, request(tool="send\u2066_email", to=sneaky, body="x" * 5000))]
    tasks += [asyncio.create_task(queue(request())) for _ in range(70)]
    await asyncio.sleep(0.2)
    async with local_client(queue) as http:
        await sign_in(http, ALICE)
        page = (await http.get("/", headers=HTML)).text
        assert (
            "\u202e" not in page
            and "\u200b" not in page
            and "\u2066" not in page
            and "\U000e0041" not in page
        )
        for escaped in ("\\u202e", "\\u200b", "\\u2066", "\\U000e0041"):
            assert f">{escaped}</mark>" in page
        assert 'title="U+202E RIGHT-TO-LEFT OVERRIDE"' in page
        assert "Show all" in page and "…" in page  # 5000 characters cut at 4 KiB, the rest one click away
        assert page.count('class="request"') == 50 and "Page 1 of 2 (71 pending)" in page
        second = (await http.get("/?page=2", headers=HTML)).text
        assert second.count('class="request"') == 21
        listing = (await http.get("/?page=2", headers=bearer(ALICE))).json()
        assert (len(listing["pending"]), listing["total"], listing["pages"]) == (21, 71, 2)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# -- malformed input: 4xx, never 500 ----------------------------------------------------------------


async def raw(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> int:
    """One request straight to the ASGI app (any bytes), its status."""
    status: list[int] = []
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": "",
        "query_string": b"page=x%FF",
        "headers": headers,
        "scheme": "http",
        "server": ("localhost", 80),
        "client": ("10.0.0.9", 5),
    }
    await app(scope, receive, send)
    (code,) = status
    return code


async def test_malformed_input_is_a_4xx_never_a_500() -> None:
    queue = ApprovalQueue(ALICE)
    app = queue.asgi_app()
    task = await parked(queue, request())
    rid = (await queue.pending())[0]["id"].encode()
    auth = (b"authorization", b"Bearer " + ALICE.encode())
    html = (b"accept", b"text/html")
    form = (b"content-type", b"application/x-www-form-urlencoded")
    cases: list[tuple[str, str, list[tuple[bytes, bytes]], bytes]] = [
        ("GET", "/", [html, (b"cookie", "veronica_approvals=a.².x".encode("latin-1"))], b""),
        ("GET", "/", [html, (b"cookie", b"veronica_approvals=" + b"\xff" * 43)], b""),
        ("GET", "/", [(b"cookie", b";;==;veronica_approvals")], b""),
        ("POST", f"/{rid.decode()}/approve", [auth], b"[" * 60000),
        ("POST", f"/{rid.decode()}/edit", [auth], b'{"arguments": ' + b"[" * 60000 + b"}"),
        ("POST", f"/{rid.decode()}/edit", [auth], b'{"arguments": [1]}'),
        ("POST", f"/{rid.decode()}/reject", [auth], b"\xff\xfe"),
        ("POST", f"/{rid.decode()}/approve", [auth], b"x" * (70 * 1024)),
        ("POST", "/session", [form], b"token=%FF%FE&" * 100),
        ("POST", "/session", [form], b"\xff"),
        ("POST", "/logout", [form, (b"cookie", b"veronica_approvals=" + b"A" * 43)], b"csrf=1"),
        ("POST", "/" + "a" * 65 + "/approve", [auth], b""),
        ("POST", "/../approve", [auth], b""),
        ("GET", "/%00", [auth], b""),
        ("GET", "/" + "\u202e" * 3, [auth], b""),
        ("DELETE", "/", [auth], b""),
        ("PUT", f"/{rid.decode()}/approve", [auth], b""),
        ("BREW", "/session", [], b""),
        ("GET", f"/{rid.decode()}/approve", [auth], b""),
        ("GET", f"/{rid.decode()}", [(b"authorization", b"\xff\xfe")], b""),
        ("GET", "/", [(b"authorization", b"Bearer")], b""),
    ]
    for method, path, headers, body in cases:
        code = await raw(app, method, path, headers, body)
        signed_out_page = html in headers and code == 200  # a malformed cookie is no session: sign in
        assert signed_out_page or 400 <= code < 500, (method, path, headers, body[:40], code)
    assert not task.done()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize("edit", [Edit({"k": "v"}), Approve(), Reject("no")])
async def test_answers_compare_by_meaning_not_by_who(edit: Approve | Reject | Edit) -> None:
    assert type(edit)(**{k: getattr(edit, k) for k in ("message", "arguments") if hasattr(edit, k)}) == edit


_FUZZ_QUEUE = ApprovalQueue(secrets.token_urlsafe(16))
_FUZZ_APP = _FUZZ_QUEUE.asgi_app()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    method=st.sampled_from(["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "X"]),
    path=st.one_of(
        st.text(max_size=80).map(lambda t: "/" + t),
        st.sampled_from(["/", "/session", "/logout", "/r1", "/r1/approve", "/r1/edit", "/r1/reject"]),
    ),
    cookie=st.binary(max_size=120),
    content_type=st.sampled_from(
        [b"", b"application/json", b"application/x-www-form-urlencoded", b"text/plain"]
    ),
    body=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)),
    accept_html=st.booleans(),
)
def test_no_input_is_a_500(
    method: str, path: str, cookie: bytes, content_type: bytes, body: bytes, accept_html: bool
) -> None:
    headers = [(b"cookie", b"veronica_approvals=" + cookie), (b"content-type", content_type)]
    if accept_html:
        headers.append((b"accept", b"text/html"))
    assert asyncio.run(raw(_FUZZ_APP, method, path, headers, body)) < 500
