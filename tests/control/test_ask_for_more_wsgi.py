"""AskForMore under the WSGI middleware: a Flask app on a real threaded WSGI server, an
ApprovalQueue as the approver (its async waiter runs on a helper thread's loop), decided by the test
as a person would through the queue's API."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from flask import Flask, jsonify
from werkzeug.serving import make_server

from veronica_mw import (
    ApprovalQueue,
    Approve,
    AskForMore,
    Edit,
    ExecutionConfig,
    Reject,
    VeronicaWSGIMiddleware,
    get_current_execution_context,
)

TOKEN = "wsgi-escalation-token-abcdefghijklmnop"
HANG_GUARD_S = 30.0


class App:
    def __init__(self) -> None:
        self.queue = ApprovalQueue(TOKEN)
        self.runs = 0
        self.lock = threading.Lock()
        flask = Flask(__name__)

        @flask.post("/work/<int:steps>")
        def work(steps: int) -> Any:
            ctx = get_current_execution_context()
            assert ctx is not None
            for _ in range(steps):
                ctx.call_tool(self.step)
            return jsonify(steps_used=ctx.get_snapshot().step_count, max_steps=ctx.config.max_steps)

        flask.wsgi_app = VeronicaWSGIMiddleware(  # type: ignore[method-assign]
            flask.wsgi_app,
            config=ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0, timeout_ms=60_000),
            on_limit=AskForMore(self.queue, add_steps=3, max_steps=10, timeout_s=20),
        )
        self.flask = flask

    def step(self) -> None:
        with self.lock:
            self.runs += 1

    def pending(self, count: int = 1) -> list[dict[str, Any]]:
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            found = asyncio.run(self.queue.pending())
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError("no escalation became pending")

    def decide(self, request_id: str, answer: Any) -> None:
        assert asyncio.run(self.queue.decide(request_id, answer)) == "ok"


@pytest.fixture()
def served() -> Iterator[tuple[App, str]]:
    app = App()
    server = make_server("127.0.0.1", 0, app.flask, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield app, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(HANG_GUARD_S)


def post(url: str, out: list[httpx.Response]) -> threading.Thread:
    def run() -> None:
        out.append(httpx.post(url, timeout=HANG_GUARD_S))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_approve_edit_and_reject_under_the_wsgi_middleware(served: tuple[App, str]) -> None:
    app, url = served
    responses: list[httpx.Response] = []
    thread = post(f"{url}/work/4", responses)
    (asked,) = app.pending()
    assert asked["tool"] == "raise max_steps" and asked["arguments"]["context"] == "/work/4"
    time.sleep(0.2)
    assert thread.is_alive() and app.runs == 2  # held at its limit; the third step has not run
    app.decide(asked["id"], Approve())
    thread.join(HANG_GUARD_S)
    assert responses[0].status_code == 200 and responses[0].json() == {"steps_used": 4, "max_steps": 5}
    assert app.runs == 4

    responses.clear()
    thread = post(f"{url}/work/4", responses)
    (asked,) = app.pending()
    app.decide(asked["id"], Edit({"add_steps": 1}))  # grants less: 3 steps, the fourth asks again
    deadline = time.monotonic() + HANG_GUARD_S
    while (found := asyncio.run(app.queue.pending())) == [] or found[0]["id"] == asked["id"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert found[0]["arguments"]["limit_value"] == 3
    app.decide(found[0]["id"], Reject("that is enough"))
    thread.join(HANG_GUARD_S)
    response = responses[0]
    assert response.status_code == 429 and response.json()["reason"] == "step_limit"
    assert "asked for more: rejected by default: that is enough" in response.json()["detail"]
    assert app.runs == 4 + 3


def test_concurrent_requests_each_ask_for_their_own_context(served: tuple[App, str]) -> None:
    app, url = served
    responses: list[httpx.Response] = []
    threads = [post(f"{url}/work/3", responses) for _ in range(4)]
    found = app.pending(4)
    assert len({r["chain_id"] for r in found}) == 4  # one ask per request's context
    for request in found:
        app.decide(request["id"], Approve())
    for thread in threads:
        thread.join(HANG_GUARD_S)
    assert sorted(r.status_code for r in responses) == [200] * 4
    assert app.runs == 12 and asyncio.run(app.queue.pending()) == []
