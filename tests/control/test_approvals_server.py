"""A real uvicorn app whose agent sends email only when a person approves (1 worker, 2 with Redis)."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..pools.conftest import RedisServer, module_redis
from ._servers import AUTH, AgentCall, ApprovalsServer, wait_pending

__all__ = ["module_redis"]

# Servers are shared by the tests of this module (starting uvicorn workers is the slow part); each
# test sends to its own address, and every request it starts is decided before it ends.
_addresses = (f"user{n}@example.com" for n in itertools.count())


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApprovalsServer]:
    with ApprovalsServer(tmp_path_factory.mktemp("local") / "runs.jsonl") as running:
        yield running


@pytest.fixture(scope="module")
def redis_servers(
    module_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ApprovalsServer, ApprovalsServer]]:
    """``uvicorn --workers 2`` and a second, separate uvicorn process, both on one Redis."""
    runs = tmp_path_factory.mktemp("redis") / "runs.jsonl"
    with ApprovalsServer(runs, workers=2, redis_url=module_redis.url) as two_workers:
        with ApprovalsServer(runs, redis_url=module_redis.url) as other:
            yield two_workers, other


@pytest.fixture(params=["1 worker", "2 workers + redis"])
def server(request: pytest.FixtureRequest) -> ApprovalsServer:
    if request.param == "1 worker":
        return request.getfixturevalue("local_server")  # type: ignore[no-any-return]
    return request.getfixturevalue("redis_servers")[0]  # type: ignore[no-any-return]


def test_approve_runs_the_tool_once_and_answers_200(server: ApprovalsServer) -> None:
    to = next(_addresses)
    call = AgentCall(server.url, to=to)
    (pending,) = wait_pending(server.url)
    assert pending["tool"] == "send_email"
    assert pending["arguments"] == {"to": to, "body": "Quarterly numbers attached."}
    assert pending["usage"]["steps_used"] == 2  # the model call and this tool call
    assert not call.done and server.runs_of(to=to) == []  # the request waits, the email is not sent
    with httpx.Client(timeout=10) as client:
        assert client.post(f"{server.url}/approvals/{pending['id']}/approve", headers=AUTH).status_code == 200
    response = call.result()
    assert response.status_code == 200
    assert response.json()["result"] == f"send_email done for {to}"
    assert len(server.runs_of(to=to)) == 1


def test_reject_answers_403_and_the_tool_never_runs(server: ApprovalsServer) -> None:
    to = next(_addresses)
    call = AgentCall(server.url, to=to)
    (pending,) = wait_pending(server.url)
    with httpx.Client(timeout=10) as client:
        decided = client.post(
            f"{server.url}/approvals/{pending['id']}/reject",
            headers=AUTH,
            json={"message": "not to everyone"},
        )
        assert decided.status_code == 200
    response = call.result()
    assert response.status_code == 403
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["reason"] == "policy_denied" and "not to everyone" in body["detail"]
    assert server.runs_of(to=to) == []


def test_without_the_token_nothing_is_decided(server: ApprovalsServer) -> None:
    to = next(_addresses)
    call = AgentCall(server.url, to=to)
    (pending,) = wait_pending(server.url)
    with httpx.Client(timeout=10) as client:
        assert client.get(f"{server.url}/approvals/").status_code == 401
        assert client.post(f"{server.url}/approvals/{pending['id']}/approve").status_code == 401
        wrong = {"authorization": "Bearer not-the-token"}
        assert (
            client.post(f"{server.url}/approvals/{pending['id']}/approve", headers=wrong).status_code == 401
        )
        assert not call.done and server.runs_of(to=to) == []
        assert client.post(f"{server.url}/approvals/{pending['id']}/reject", headers=AUTH).status_code == 200
        assert client.post(f"{server.url}/approvals/{pending['id']}/approve", headers=AUTH).status_code == 409
        assert (
            client.post(f"{server.url}/approvals/0123456789abcdef/approve", headers=AUTH).status_code == 404
        )
    assert call.result().status_code == 403 and server.runs_of(to=to) == []


def test_an_unanswered_request_times_out_as_a_rejection(server: ApprovalsServer) -> None:
    to = next(_addresses)
    response = AgentCall(server.url, tool="send_fax", to=to).result()  # send_fax waits at most 1 s
    assert response.status_code == 403
    assert "no decision within 1s" in response.json()["detail"]
    assert server.runs_of("send_fax", to=to) == []


def test_a_decision_posted_to_another_server_reaches_the_waiting_one(
    redis_servers: tuple[ApprovalsServer, ApprovalsServer],
) -> None:
    """Deterministically cross-process: the request waits in server A, the decision goes to B."""
    for a, b in (redis_servers, redis_servers[::-1]):
        to = next(_addresses)
        call = AgentCall(a.url, to=to)
        (pending,) = wait_pending(b.url)
        with httpx.Client(timeout=10) as client:
            edited = {"arguments": {"to": to, "body": "Numbers attached (approved)."}}
            decided = client.post(f"{b.url}/approvals/{pending['id']}/edit", headers=AUTH, json=edited)
            assert decided.status_code == 200
        response = call.result()
        assert response.status_code == 200
        (run,) = a.runs_of(to=to)
        assert run["body"] == "Numbers attached (approved)." and run["pid"] == response.json()["worker"]


def test_the_sixth_bad_sign_in_in_a_minute_is_429_across_workers(
    module_redis: RedisServer, tmp_path: Path
) -> None:
    """Failures are counted in Redis: whichever worker each attempt reaches, the 6th is refused."""
    token = secrets.token_urlsafe(16)  # its own namespace: the other tests' servers are not throttled
    with ApprovalsServer(
        tmp_path / "runs.jsonl", workers=2, redis_url=module_redis.url, token=token
    ) as server:
        fresh = {"connection": "close"}  # a new connection each time: any worker may take it
        with httpx.Client(timeout=10, base_url=f"{server.url}/approvals") as client:
            for attempt in range(5):
                if attempt % 2:
                    failed = client.get("/", headers={**fresh, "authorization": "Bearer guess"})
                else:
                    failed = client.post("/session", headers=fresh, data={"token": f"guess{attempt}"})
                assert failed.status_code == 401
            for _ in range(6):  # now refused everywhere, even with the right token
                refused = client.post("/session", headers=fresh, data={"token": token})
                assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
                api = client.get("/", headers={**fresh, "authorization": f"Bearer {token}"})
                assert api.status_code == 429
