"""VeronicaWSGIMiddleware around a real Flask app (werkzeug test client) and plain WSGI callables."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask, Response, request, stream_with_context
from werkzeug.test import Client

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    Observer,
    WrapOptions,
    add_observer,
    get_current_execution_context,
    remove_observer,
)
from veronica_mw.web.wsgi import ENVIRON_KEY, VeronicaWSGIMiddleware

from .wsgi_support import HANG_GUARD_S, CountingIterable, call_direct, environ_for, timers

ONE_STEP = ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0)
ROOMY = ExecutionConfig(max_cost_usd=1.0, max_steps=100, max_retries_total=0)


def llm_step() -> str:
    """One model call through the request's context (raises ExecutionHalted when refused)."""
    ctx = get_current_execution_context()
    assert ctx is not None
    return ctx.call_llm(lambda: "answer", options=WrapOptions(cost_estimate_hint=0.01))


def make_flask(*, propagate: bool | None = None) -> tuple[Flask, dict[str, Any]]:
    app = Flask(__name__)
    if propagate is not None:
        app.config["PROPAGATE_EXCEPTIONS"] = propagate
    seen: dict[str, Any] = {"chunks": [], "closed": 0}

    @app.get("/steps/<int:n>")
    def steps(n: int) -> dict[str, Any]:
        ctx = get_current_execution_context()
        seen["ctx"] = ctx
        seen["environ_ctx"] = request.environ.get(ENVIRON_KEY)
        for _ in range(n):
            llm_step()
        assert ctx is not None
        return {"steps": ctx.get_snapshot().step_count}

    @app.get("/stream/<int:n>")
    def stream(n: int) -> Response:
        seen["view_ctx"] = get_current_execution_context()

        def body() -> Iterator[str]:
            try:
                for i in range(n):
                    seen["chunks"].append(get_current_execution_context())
                    llm_step()
                    yield f"chunk {i}\n"
            finally:
                seen["closed"] += 1
                seen["ctx_on_close"] = get_current_execution_context()

        return Response(stream_with_context(body()), mimetype="text/plain")

    @app.get("/generator/<int:n>")
    def generator(n: int) -> Response:
        def body() -> Iterator[bytes]:
            for _ in range(n):
                seen["chunks"].append(get_current_execution_context())
                yield b"x"

        return Response(body())

    @app.get("/caught")
    def caught() -> tuple[dict[str, str], int]:
        try:
            llm_step()
            llm_step()
        except ExecutionHalted as halt:
            return {"mine": halt.reason}, 402
        return {"mine": "no halt"}, 200

    @app.get("/boom")
    def boom() -> str:
        raise KeyError("not a halt")

    return app, seen


@pytest.fixture(params=[False, True], ids=["flask-500", "propagated"])
def propagate(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_one_context_per_request_visible_in_view_and_environ_and_reset_after() -> None:
    app, seen = make_flask()
    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=ROOMY)  # type: ignore[method-assign]
    client = Client(app)
    first = client.get("/steps/2")
    first_ctx = seen["ctx"]
    second = client.get("/steps/3")
    assert (first.status_code, first.json) == (200, {"steps": 2})
    assert (second.status_code, second.json) == (200, {"steps": 3})
    assert isinstance(first_ctx, ExecutionContext) and isinstance(seen["ctx"], ExecutionContext)
    assert first_ctx is not seen["ctx"]
    assert seen["environ_ctx"] is seen["ctx"]
    assert seen["ctx"].get_snapshot().step_count == 3
    assert get_current_execution_context() is None


def test_halt_in_view_is_429_problem_json_under_flask_handling(propagate: bool) -> None:
    app, seen = make_flask(propagate=propagate)
    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=ONE_STEP)  # type: ignore[method-assign]
    reply = Client(app).get("/steps/2")
    assert reply.status_code == 429
    assert reply.headers["Content-Type"] == "application/problem+json"
    body = json.loads(reply.data)
    assert body["reason"] == "step_limit"
    assert body["status"] == 429
    assert body["steps_used"] == 1
    assert body["limits"] == {"max_cost_usd": 1.0, "max_steps": 1, "max_retries_total": 0, "timeout_ms": 0}
    assert "Retry-After" not in reply.headers  # a spent step limit never gets better by waiting
    assert int(reply.headers["Content-Length"]) == len(reply.data)
    assert get_current_execution_context() is None


def test_start_response_is_called_once_when_flask_500_is_replaced() -> None:
    app, _ = make_flask(propagate=False)
    wrapped = VeronicaWSGIMiddleware(app.wsgi_app, config=ONE_STEP)
    calls, body = call_direct(wrapped, environ_for("/steps/2"))
    assert [status for status, _, _ in calls] == ["429 Too Many Requests"]
    assert json.loads(body)["reason"] == "step_limit"


def test_app_that_chose_its_own_response_after_a_halt_keeps_it() -> None:
    app, _ = make_flask()
    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=ONE_STEP)  # type: ignore[method-assign]
    reply = Client(app).get("/caught")
    assert (reply.status_code, reply.json) == (402, {"mine": "step_limit"})


def test_a_5xx_without_a_halt_is_left_alone(propagate: bool) -> None:
    app, _ = make_flask(propagate=propagate)
    wrapped = VeronicaWSGIMiddleware(app.wsgi_app, config=ROOMY)
    if propagate:
        with pytest.raises(KeyError):
            call_direct(wrapped, environ_for("/boom"))
    else:
        calls, _ = call_direct(wrapped, environ_for("/boom"))
        assert [status for status, _, _ in calls] == ["500 INTERNAL SERVER ERROR"]
    assert get_current_execution_context() is None


def test_stream_with_context_sees_the_same_live_context_on_every_chunk() -> None:
    app, seen = make_flask()
    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=ROOMY)  # type: ignore[method-assign]
    reply = Client(app).get("/stream/3")
    assert reply.data == b"chunk 0\nchunk 1\nchunk 2\n"
    ctx = seen["view_ctx"]
    assert isinstance(ctx, ExecutionContext)
    assert seen["chunks"] == [ctx, ctx, ctx]
    assert ctx.get_snapshot().step_count == 3
    assert (seen["closed"], seen["ctx_on_close"]) == (1, ctx)
    assert get_current_execution_context() is None


def test_context_is_ended_only_after_the_body_is_exhausted_and_closed(watched_deadlines: None) -> None:
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0, timeout_ms=60_000)
    app, seen = make_flask()
    wrapped = VeronicaWSGIMiddleware(app.wsgi_app, config=config)
    before = timers()
    calls: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        calls.append(status)

    result = wrapped(environ_for("/generator/2"), start_response)
    assert get_current_execution_context() is None  # nothing leaks between next() calls
    chunks = [next(iter(result)), next(iter(result))]
    assert timers() == before + 1  # the context (and its deadline) is still live
    assert list(result) == []
    assert timers() == before
    result.close()  # type: ignore[attr-defined]
    assert chunks == [b"x", b"x"] and calls == ["200 OK"]
    assert len(seen["chunks"]) == 2 and seen["chunks"][0] is seen["chunks"][1] is not None


def test_halt_on_the_first_chunk_of_a_stream_is_still_a_429() -> None:
    app, seen = make_flask()
    zero = ExecutionConfig(max_cost_usd=1.0, max_steps=0, max_retries_total=0)
    wrapped = VeronicaWSGIMiddleware(app.wsgi_app, config=zero)
    calls, body = call_direct(wrapped, environ_for("/stream/3"))
    assert [status for status, _, _ in calls] == ["429 Too Many Requests"]
    assert json.loads(body)["reason"] == "step_limit"
    assert seen["closed"] == 1


def test_halt_after_the_body_started_ends_it_cleanly_and_logs_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, seen = make_flask()
    two = ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0)
    wrapped = VeronicaWSGIMiddleware(app.wsgi_app, config=two)
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        calls, body = call_direct(wrapped, environ_for("/stream/5"))
    assert [status for status, _, _ in calls] == ["200 OK"]
    assert body == b"chunk 0\nchunk 1\n"
    assert seen["closed"] == 1
    warnings = [r for r in caplog.records if r.name == "veronica_mw" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "reason=step_limit" in warnings[0].getMessage()
    assert "/stream/5" in warnings[0].getMessage()


def test_timeout_firing_mid_stream_ends_the_body_without_another_chunk(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def attempt(timeout_ms: float) -> tuple[bool, list[str], bytes]:
        fired = threading.Event()
        early: list[bool] = []

        def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
            ctx = environ[ENVIRON_KEY]
            ctx.cancellation_token.add_callback(fired.set)
            start_response("200 OK", [("Content-Type", "text/plain")])
            early.append(fired.is_set())
            yield b"before\n"
            assert fired.wait(HANG_GUARD_S), "hang guard: the deadline never fired"
            yield b"at the halt\n"  # produced in the step that saw the halt: the app's own last word
            yield b"never sent\n"

        config = ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0, timeout_ms=timeout_ms)
        calls, body = call_direct(VeronicaWSGIMiddleware(app, config=config), environ_for("/slow"))
        # "Early" also when it fired in the instant between that check and the headers going out.
        return early[0] or body.endswith(b"never sent\n"), [status for status, _, _ in calls], body

    # The deadline must fire after the headers went out; on a machine so loaded that it fired
    # before the first chunk (then the app's response is kept whole, by design), retry with more room.
    timeout_ms = 20.0
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        fired_early, statuses, body = attempt(timeout_ms)
        while fired_early and timeout_ms < 10_000:
            caplog.clear()
            timeout_ms *= 4
            fired_early, statuses, body = attempt(timeout_ms)
    assert not fired_early
    assert statuses == ["200 OK"]
    assert body == b"before\nat the halt\n"
    assert ["reason=timeout" in r.getMessage() for r in caplog.records if r.name == "veronica_mw"] == [True]


def test_app_iterable_close_is_called_exactly_once_on_every_path() -> None:
    def make_app(body: CountingIterable, status: str) -> Any:
        def app(environ: dict[str, Any], start_response: Any) -> CountingIterable:
            start_response(status, [])
            if environ["PATH_INFO"] == "/halt":
                environ[ENVIRON_KEY].cancel("test halt")
            return body

        return app

    for path, status, expected in [("/", "200 OK", "200 OK"), ("/halt", "500 Oops", "429 Too Many Requests")]:
        body = CountingIterable([b"a", b"b"])
        calls, _ = call_direct(
            VeronicaWSGIMiddleware(make_app(body, status), config=ROOMY), environ_for(path)
        )
        assert [c[0] for c in calls] == [expected]
        assert body.close_calls == 1
        assert body.context_on_close is not None  # closed with the request's context current
        assert get_current_execution_context() is None


def test_closing_before_iterating_still_closes_the_app_iterable_and_ends_the_context(
    watched_deadlines: None,
) -> None:
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0, timeout_ms=60_000)
    body = CountingIterable([b"a"])
    before = timers()

    def app(environ: dict[str, Any], start_response: Any) -> CountingIterable:
        assert get_current_execution_context() is not None  # used, so its deadline is armed
        start_response("200 OK", [])
        return body

    result = VeronicaWSGIMiddleware(app, config=config)(environ_for("/"), lambda *a: None)  # type: ignore[arg-type]
    assert timers() == before + 1
    result.close()  # type: ignore[attr-defined]
    result.close()  # type: ignore[attr-defined]
    assert (body.close_calls, timers()) == (1, before)


def test_start_response_with_exc_info_before_the_body_replaces_the_status() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("X-First", "1")])
        try:
            raise ValueError("late failure")
        except ValueError:
            import sys

            start_response("503 Service Unavailable", [("X-Second", "1")], sys.exc_info())
        return [b"sorry"]

    calls, body = call_direct(VeronicaWSGIMiddleware(app, config=ROOMY), environ_for("/"))
    assert [(c[0], c[1], c[2]) for c in calls] == [("503 Service Unavailable", [("X-Second", "1")], None)]
    assert body == b"sorry"


def test_start_response_with_exc_info_after_headers_went_out_reraises() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])
        yield b"part"
        try:
            raise ValueError("mid-body failure")
        except ValueError:
            import sys

            start_response("500 Oops", [], sys.exc_info())
        yield b"unreachable"

    with pytest.raises(ValueError, match="mid-body failure"):
        call_direct(VeronicaWSGIMiddleware(app, config=ROOMY), environ_for("/"))
    assert get_current_execution_context() is None


def test_second_start_response_without_exc_info_is_an_error() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        start_response("201 Created", [])
        return [b""]

    with pytest.raises(AssertionError):
        call_direct(VeronicaWSGIMiddleware(app, config=ROOMY), environ_for("/"))


def test_legacy_write_callable_goes_through_with_the_headers() -> None:
    written: list[bytes] = []
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)
        return written.append

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        write = start_response("200 OK", [])
        write(b"early ")
        return [b"late"]

    result = VeronicaWSGIMiddleware(app, config=ROOMY)(environ_for("/"), start_response)
    body = b"".join(result)
    close = getattr(result, "close", None)  # as a server does (PEP 3333): a finished list has none
    if close is not None:
        close()
    assert (statuses, written, body) == (["200 OK"], [b"early "], b"late")


def test_empty_body_still_sends_the_headers() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("204 No Content", [])
        return []

    calls, body = call_direct(VeronicaWSGIMiddleware(app, config=ROOMY), environ_for("/"))
    assert ([c[0] for c in calls], body) == (["204 No Content"], b"")


def test_non_halt_exception_from_the_app_propagates_and_nothing_leaks() -> None:
    before = timers()
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0, timeout_ms=60_000)

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise LookupError("app bug")

    with pytest.raises(LookupError):
        VeronicaWSGIMiddleware(app, config=config)(environ_for("/"), lambda *a: None)  # type: ignore[arg-type]
    assert (get_current_execution_context(), timers()) == (None, before)


def test_usage_headers_report_what_the_request_used() -> None:
    app, _ = make_flask()
    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=ROOMY, usage_headers=True)  # type: ignore[method-assign]
    reply = Client(app).get("/steps/2")
    assert reply.headers["x-veronica-steps"] == "2/100"
    assert reply.headers["x-veronica-cost-usd"] == "0.020000/1"


def test_usage_headers_are_on_the_429_too() -> None:
    app, _ = make_flask()
    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=ONE_STEP, usage_headers=True)  # type: ignore[method-assign]
    reply = Client(app).get("/steps/3")
    assert reply.status_code == 429
    assert reply.headers["x-veronica-steps"] == "1/1"


def test_streamed_body_chosen_after_the_halt_runs_to_its_end(caplog: pytest.LogCaptureFixture) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        ctx = environ[ENVIRON_KEY]
        try:
            ctx.call_llm(lambda: "refused")
        except ExecutionHalted as halt:
            start_response("402 Payment Required", [])
            yield f"stopped: {halt.reason}\n".encode()
            yield b"here is what we have so far\n"

    zero = ExecutionConfig(max_cost_usd=1.0, max_steps=0, max_retries_total=0)
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        calls, body = call_direct(VeronicaWSGIMiddleware(app, config=zero), environ_for("/"))
    assert [c[0] for c in calls] == ["402 Payment Required"]
    assert body == b"stopped: step_limit\nhere is what we have so far\n"
    assert [r for r in caplog.records if r.name == "veronica_mw"] == []


def test_observers_hear_a_wsgi_request_context_start_and_end() -> None:
    seen: list[str] = []

    class Lifecycle(Observer):
        def context_started(self, ctx: ExecutionContext) -> None:
            seen.append("started")

        def context_ended(self, ctx: ExecutionContext) -> None:
            seen.append(f"ended after {ctx.get_snapshot().step_count} steps")

    app, _ = make_flask()
    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=ROOMY)  # type: ignore[method-assign]
    listener = Lifecycle()
    add_observer(listener)
    try:
        response = Client(app).get("/steps/2")
        assert response.status_code == 200
        response.close()  # the body is done: the request's context ends
    finally:
        remove_observer(listener)
    assert seen == ["started", "ended after 2 steps"]


# -- a body the app has already built (a list) is decided and ended at once ------------------------


def test_a_finished_list_body_ends_the_context_before_the_server_iterates() -> None:
    events: list[str] = []

    class Watch(Observer):
        def context_ended(self, ctx: ExecutionContext) -> None:
            events.append("ended")

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        llm_step()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"a", b"b"]

    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)
        return lambda data: None

    watch = Watch()
    add_observer(watch)
    try:
        result = VeronicaWSGIMiddleware(app, config=ROOMY)(environ_for("/"), start_response)
        assert events == ["ended"] and statuses == ["200 OK"]  # decided and ended already
        assert b"".join(result) == b"ab" and get_current_execution_context() is None
    finally:
        remove_observer(watch)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("500 Internal Server Error", "429 Too Many Requests"),
        ("402 Payment Required", "402 Payment Required"),
    ],
)
def test_a_finished_list_body_of_a_halted_request(status: str, expected: str) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        ctx = get_current_execution_context()
        assert ctx is not None
        ctx.cancel("stop")
        start_response(status, [("Content-Type", "text/plain")])
        return [b"the app's own body"]

    calls, body = call_direct(VeronicaWSGIMiddleware(app, config=ROOMY), environ_for("/"))
    assert [c[0] for c in calls] == [expected]
    if expected.startswith("429"):
        assert json.loads(body)["reason"] == "cancelled"
    else:
        assert body == b"the app's own body"  # the app chose its answer to the halt: kept whole
