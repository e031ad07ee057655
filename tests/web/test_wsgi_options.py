"""Per-request config, excluded paths, applied-twice protection, the budget-pool hook and bad input
for VeronicaWSGIMiddleware (real Flask app through werkzeug's test client, or direct WSGI calls)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from flask import Flask, request
from werkzeug.test import Client

from veronica_mw import CircuitBreaker, ExecutionConfig, WrapOptions, get_current_execution_context
from veronica_mw.web.wsgi import ENVIRON_KEY, VeronicaWSGIMiddleware

from .wsgi_support import Admission, FakePool, Ledger, call_direct, environ_for

ROOMY = ExecutionConfig(max_cost_usd=1.0, max_steps=100, max_retries_total=0)


def make_app() -> tuple[Flask, list[dict[str, Any]]]:
    app = Flask(__name__)
    seen: list[dict[str, Any]] = []

    @app.get("/", defaults={"path": ""})
    @app.get("/<path:path>")
    def anything(path: str) -> dict[str, Any]:
        ctx = get_current_execution_context()
        n = int(request.args.get("steps", "0"))
        hint = float(request.args.get("hint", "0.01"))
        if ctx is not None:
            for _ in range(n):
                ctx.call_llm(lambda: "ok", options=WrapOptions(cost_estimate_hint=hint))
        seen.append({"ctx": ctx, "environ_ctx": request.environ.get(ENVIRON_KEY)})
        limits = ctx.config.as_dict() if ctx is not None else None
        return {"contained": ctx is not None, "limits": limits}

    return app, seen


def wrap(app: Flask, **options: Any) -> Client:
    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, **options)  # type: ignore[method-assign]
    return Client(app)


def test_config_callable_of_environ_picks_limits_per_request() -> None:
    premium = ExecutionConfig(max_cost_usd=5.0, max_steps=50, max_retries_total=2)
    basic = ExecutionConfig(max_cost_usd=0.1, max_steps=1, max_retries_total=0)
    asked: list[str] = []

    def choose(environ: dict[str, Any]) -> ExecutionConfig | None:
        asked.append(environ["PATH_INFO"])
        if environ["PATH_INFO"] == "/public":
            return None
        return premium if environ.get("HTTP_X_PLAN") == "premium" else basic

    app, seen = make_app()
    client = wrap(app, config=choose)
    assert client.get("/a", headers={"X-Plan": "premium"}).json["limits"]["max_steps"] == 50  # type: ignore[index]
    assert client.get("/b").json["limits"]["max_steps"] == 1  # type: ignore[index]
    assert client.get("/b?steps=2").status_code == 429
    assert client.get("/public?steps=3").json == {"contained": False, "limits": None}
    assert asked == ["/a", "/b", "/b", "/public"]
    assert seen[-1] == {"ctx": None, "environ_ctx": None}


@pytest.mark.parametrize("failure", ["raises", "wrong type"])
def test_failing_config_callable_is_logged_and_the_default_applies(
    failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(environ: dict[str, Any]) -> Any:
        if failure == "raises":
            raise RuntimeError("tenant lookup down")
        return {"max_steps": 3}

    fallback = ExecutionConfig(max_cost_usd=0.5, max_steps=2, max_retries_total=0)
    app, _ = make_app()
    client = wrap(app, config=broken, default_config=fallback)
    with caplog.at_level(logging.ERROR, logger="veronica_mw"):
        reply = client.get("/x?steps=2")
    assert reply.status_code == 200
    assert reply.json["limits"]["max_steps"] == 2  # type: ignore[index]
    errors = [r for r in caplog.records if r.name == "veronica_mw" and r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert (errors[0].exc_info is not None) is (failure == "raises")


def test_failing_config_callable_without_default_fails_closed_but_still_answers() -> None:
    def broken(environ: dict[str, Any]) -> ExecutionConfig:
        raise RuntimeError("no config")

    app, _ = make_app()
    client = wrap(app, config=broken)
    assert client.get("/page").status_code == 200  # no model call: unaffected
    refused = client.get("/page?steps=1")
    assert refused.status_code == 429
    assert json.loads(refused.data)["reason"] == "step_limit"


def test_excluded_paths_exact_and_prefix_are_not_contained() -> None:
    app, seen = make_app()
    client = wrap(app, config=ROOMY, exclude_paths=["/health", "/assets/"])
    assert client.get("/health").json["contained"] is False  # type: ignore[index]
    assert client.get("/assets/app.js").json["contained"] is False  # type: ignore[index]
    assert client.get("/healthz").json["contained"] is True  # type: ignore[index]
    assert client.get("/assets").json["contained"] is True  # type: ignore[index]
    assert [s["ctx"] is None for s in seen] == [True, True, False, False]


def test_applied_twice_the_inner_copy_passes_through() -> None:
    app, seen = make_app()
    inner = VeronicaWSGIMiddleware(app.wsgi_app, config=ExecutionConfig(1.0, 1, 0))
    outer = VeronicaWSGIMiddleware(inner, config=ExecutionConfig(1.0, 3, 0))
    app.wsgi_app = outer  # type: ignore[method-assign]
    reply = Client(app).get("/x?steps=3")
    assert reply.status_code == 200
    assert reply.json["limits"]["max_steps"] == 3  # type: ignore[index]
    ctx = seen[0]["ctx"]
    assert seen[0]["environ_ctx"] is ctx
    assert ctx.get_snapshot().step_count == 3  # counted once, by the outer context
    refused = Client(app).get("/x?steps=4")
    assert refused.status_code == 429
    assert refused.data.count(b'"reason"') == 1


def test_budget_pool_refusal_answers_before_the_app_runs() -> None:
    pool = FakePool(Admission(allowed=False, status=429, retry_after_s=2.2, headers=[("RateLimit", "t=3")]))
    app, seen = make_app()
    reply = wrap(app, config=ROOMY, budget_pool=pool).get("/tenant")
    assert reply.status_code == 429
    assert reply.headers["Retry-After"] == "3"
    assert reply.headers["RateLimit"] == "t=3"
    body = json.loads(reply.data)
    assert (body["reason"], body["steps_used"], body["limits"]["max_steps"]) == ("budget_exceeded", 0, 100)
    assert seen == []
    assert len(pool.asked) == 1 and pool.asked[0]["PATH_INFO"] == "/tenant"


def test_budget_pool_unavailable_is_a_503() -> None:
    pool = FakePool(Admission(allowed=True), error=ConnectionError("redis down"))
    app, seen = make_app()
    reply = wrap(app, config=ROOMY, budget_pool=pool).get("/tenant")
    assert reply.status_code == 503
    assert reply.headers["Content-Type"] == "application/problem+json"
    assert seen == []


def test_budget_pool_admission_headers_and_ledger_reach_the_request() -> None:
    ledger = Ledger(left_usd=0.025, retry_after=30.0)
    pool = FakePool(Admission(allowed=True, headers=[("RateLimit-Remaining", "7")], ledger=ledger))
    app, seen = make_app()
    client = wrap(app, config=ROOMY, budget_pool=pool)
    ok = client.get("/t?steps=2")
    assert ok.status_code == 200
    assert ok.headers["RateLimit-Remaining"] == "7"
    assert len(ledger.settled) == 2
    refused = client.get("/t?steps=3")  # the tenant's ledger runs dry: budget_exceeded with its window
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "30"
    assert refused.headers["RateLimit-Remaining"] == "7"
    assert json.loads(refused.data)["reason"] == "budget_exceeded"
    assert ledger.left_usd == pytest.approx(0.005)  # two settled steps; the refused one reserved nothing
    assert len(ledger.settled) == 2 and len(seen) == 1


@dataclass
class DownLedger(Ledger):
    """The tenant's budget store went down after admission (fails closed)."""

    refusal_status: int = 503
    refusal_detail: str = "budget backend unavailable"

    def reserve(self, amount_usd: float) -> bool:
        return False


def test_budget_store_down_mid_request_answers_503() -> None:
    pool = FakePool(Admission(allowed=True, ledger=DownLedger(left_usd=1.0, retry_after=1.0)))
    app, seen = make_app()
    reply = wrap(app, config=ROOMY, budget_pool=pool).get("/t?steps=1")
    assert reply.status_code == 503
    assert reply.headers["Retry-After"] == "1"
    assert json.loads(reply.data)["reason"] == "policy_denied"


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda e: e.pop("PATH_INFO"), id="missing PATH_INFO"),
        pytest.param(lambda e: e.__setitem__("PATH_INFO", b"/bytes"), id="bytes PATH_INFO"),
        pytest.param(lambda e: e.__setitem__("PATH_INFO", None), id="None PATH_INFO"),
        pytest.param(
            lambda e: e.update(PATH_INFO=["/x"], QUERY_STRING=7), id="list PATH_INFO, int QUERY_STRING"
        ),
    ],
)
def test_malformed_environ_is_contained_not_crashed(mangle: Any) -> None:
    seen: list[Any] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(get_current_execution_context())
        start_response("200 OK", [])
        return [b"fine"]

    environ = environ_for("/x")
    mangle(environ)
    calls, body = call_direct(VeronicaWSGIMiddleware(app, config=ROOMY, exclude_paths=["/x"]), environ)
    assert ([c[0] for c in calls], body) == (["200 OK"], b"fine")
    assert seen[0] is not None and seen[0] is environ[ENVIRON_KEY]


def test_config_callable_choking_on_malformed_environ_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    def by_path(environ: dict[str, Any]) -> ExecutionConfig:
        return ROOMY if environ["PATH_INFO"].startswith("/api") else ExecutionConfig(0.0, 0, 0)

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [str(environ[ENVIRON_KEY].config.max_steps).encode()]

    environ = environ_for("/api")
    del environ["PATH_INFO"]
    fallback = ExecutionConfig(max_cost_usd=0.0, max_steps=7, max_retries_total=0)
    with caplog.at_level(logging.ERROR, logger="veronica_mw"):
        calls, body = call_direct(
            VeronicaWSGIMiddleware(app, config=by_path, default_config=fallback), environ
        )
    assert ([c[0] for c in calls], body) == (["200 OK"], b"7")
    assert len([r for r in caplog.records if r.name == "veronica_mw"]) == 1


def test_environ_that_is_not_a_dict_is_passed_through() -> None:
    class Environ(dict[str, Any]):
        pass

    seen: list[Any] = []

    def app(environ: Any, start_response: Any) -> list[bytes]:
        seen.append(get_current_execution_context())
        start_response("200 OK", [])
        return [b"ok"]

    environ = Environ(environ_for("/"))
    calls, body = call_direct(VeronicaWSGIMiddleware(app, config=ROOMY), environ)
    assert body == b"ok" and seen[0] is not None  # a dict subclass is still a dict
    calls, body = call_direct(VeronicaWSGIMiddleware(app, config=ROOMY), None)  # type: ignore[arg-type]
    assert (body, seen[1]) == (b"ok", None)


def test_constructor_rejects_bad_options() -> None:
    app, _ = make_app()
    with pytest.raises(TypeError):
        VeronicaWSGIMiddleware(app.wsgi_app, config={"max_steps": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        VeronicaWSGIMiddleware(app.wsgi_app, config=ROOMY, budget_pool=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        VeronicaWSGIMiddleware(app.wsgi_app, config=ROOMY, exclude_paths=["health"])
    with pytest.raises(TypeError):
        VeronicaWSGIMiddleware("not an app", config=ROOMY)  # type: ignore[arg-type]


def test_open_circuit_is_a_429_with_retry_after_rounded_up() -> None:
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=12.5)
    app = Flask(__name__)

    @app.get("/")
    def call_upstream() -> str:
        ctx = get_current_execution_context()
        assert ctx is not None

        def upstream() -> str:
            raise ConnectionError("model provider down")

        try:
            ctx.call_llm(upstream)
        except ConnectionError:
            return "upstream failed"
        return "unreachable"

    client = wrap(
        app,
        config=ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=3),
        circuit_breaker=breaker,
    )
    first = client.get("/")
    refused = client.get("/")
    assert (first.status_code, first.data) == (200, b"upstream failed")
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "13"
    assert json.loads(refused.data)["reason"] == "circuit_open"
