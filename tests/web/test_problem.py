"""The framework-free pieces both middlewares share (veronica_mw/_web.py)."""

from __future__ import annotations

import builtins
import importlib
import json
import logging
from typing import Any

import pytest

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    Observer,
    add_observer,
    remove_observer,
)
from veronica_mw.kernel.context import PendingContext, current_context
from veronica_mw.web.problem import (
    STRICT_DEFAULT,
    ConfigResolver,
    find_halt,
    middleware_active,
    pool_failure,
    problem_response,
    refusal_response,
    retry_after_header,
    usage_headers,
)

# The builtin on 3.11+, the backport anyio brings on 3.10 (mypy checks this file as 3.10 code).
EXCEPTION_GROUP: Any = (
    getattr(builtins, "ExceptionGroup", None) or importlib.import_module("exceptiongroup").ExceptionGroup
)
CONFIG = ExecutionConfig(max_cost_usd=0.5, max_steps=3, max_retries_total=2, timeout_ms=1500)


def _halted_context(steps: int = 3) -> tuple[ExecutionContext, ExecutionHalted]:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=steps, max_retries_total=0))
    for _ in range(steps):
        ctx.call_tool(lambda: None)
    with pytest.raises(ExecutionHalted) as info:
        ctx.call_tool(lambda: None)
    return ctx, info.value


# -- find_halt ---------------------------------------------------------------------------------------


def test_find_halt_returns_the_exception_itself() -> None:
    halt = ExecutionHalted("step_limit")
    assert find_halt(halt) is halt


def test_find_halt_follows_cause_and_context() -> None:
    halt = ExecutionHalted("budget_exceeded")
    try:
        try:
            raise halt
        except ExecutionHalted as exc:
            raise ValueError("framework wrapper") from exc
    except ValueError as wrapped:
        assert find_halt(wrapped) is halt
    try:
        try:
            raise halt
        except ExecutionHalted:
            raise KeyError("raised while handling") from None  # context kept, only hidden
    except KeyError as wrapped:
        assert wrapped.__suppress_context__
        assert find_halt(wrapped) is halt


def test_find_halt_looks_inside_exception_groups() -> None:
    halt = ExecutionHalted("timeout")
    group = EXCEPTION_GROUP("outer", [ValueError("a"), EXCEPTION_GROUP("inner", [KeyError("b"), halt])])
    assert find_halt(group) is halt


def test_find_halt_is_cycle_safe_and_returns_none_without_halt() -> None:
    first, second = ValueError("a"), KeyError("b")
    first.__context__, second.__context__ = second, first
    assert find_halt(first) is None
    assert find_halt(None) is None
    assert find_halt(RuntimeError("plain")) is None


def test_find_halt_prefers_the_explicit_cause() -> None:
    cause, context = ExecutionHalted("step_limit"), ExecutionHalted("timeout")
    exc = ValueError("x")
    exc.__cause__, exc.__context__ = cause, context
    assert find_halt(exc) is cause


# -- problem_response ----------------------------------------------------------------------------------


def test_problem_response_body_from_snapshot() -> None:
    ctx, halt = _halted_context(steps=3)
    status, headers, body = problem_response(halt.reason, snapshot=halt.snapshot)
    assert status == 429
    data = json.loads(body)
    assert data["type"] == "urn:veronica-mw:halt:step_limit"
    assert data["title"] == "Step limit reached"
    assert data["status"] == 429
    assert data["reason"] == "step_limit"
    assert data["detail"] == "max_steps=3 reached"
    assert data["steps_used"] == 3
    assert data["cost_usd_used"] == 0.0
    assert data["retries_used"] == 0
    assert data["limits"] == {"max_cost_usd": 1.0, "max_steps": 3, "max_retries_total": 0, "timeout_ms": 0}
    assert data["chain_id"] == ctx.chain_id
    names = dict(headers)
    assert names[b"content-type"] == b"application/problem+json"
    assert names[b"content-length"] == str(len(body)).encode()
    assert b"retry-after" not in names  # a spent step limit does not come back by waiting


def test_problem_response_without_snapshot_uses_config_limits() -> None:
    status, headers, body = problem_response(
        "budget_exceeded", config=CONFIG, status=503, detail="pool down", extra_headers=[("RateLimit", "x=1")]
    )
    data = json.loads(body)
    assert status == 503 and data["status"] == 503
    assert data["detail"] == "pool down"
    assert data["steps_used"] == 0 and data["cost_usd_used"] == 0.0 and data["retries_used"] == 0
    assert data["limits"] == CONFIG.as_dict()
    assert (b"ratelimit", b"x=1") in headers
    no_config = json.loads(problem_response("cancelled")[2])
    names = ["max_steps", "max_cost_usd", "max_retries_total", "timeout_ms"]
    assert no_config["limits"] == dict.fromkeys(names)


@pytest.mark.parametrize(
    ("seconds", "header"), [(None, None), (0.0, b"1"), (0.2, b"1"), (1.0, b"1"), (1.01, b"2"), (29.5, b"30")]
)
def test_retry_after_rounds_up_with_minimum_one(seconds: float | None, header: bytes | None) -> None:
    assert retry_after_header(seconds) == header
    headers = dict(problem_response("circuit_open", retry_after_s=seconds)[1])
    assert headers.get(b"retry-after") == header


def test_usage_headers_report_use_and_limits() -> None:
    ctx = ExecutionContext(CONFIG)
    ctx.call_tool(lambda: None)
    headers = dict(usage_headers(ctx.get_snapshot()))
    assert headers[b"x-veronica-steps"] == b"1/3"
    assert headers[b"x-veronica-cost-usd"] == b"0.000000/0.5"
    assert headers[b"x-veronica-retries"] == b"0/2"
    assert headers[b"x-veronica-chain-id"] == ctx.chain_id.encode()


# -- ConfigResolver ------------------------------------------------------------------------------------


def test_static_config_and_exclusions() -> None:
    resolver = ConfigResolver(CONFIG, exclude_paths=["/health", "/static/"])
    assert resolver.resolve({}, "/chat") is CONFIG
    assert resolver.resolve({}, "/health") is None
    assert resolver.resolve({}, "/health/deep") is CONFIG  # exact entries match exactly
    assert resolver.resolve({}, "/static/app.js") is None
    assert resolver.resolve({}, "/static") is CONFIG
    assert resolver.default_config is STRICT_DEFAULT


def test_callable_config_per_request() -> None:
    small = ExecutionConfig(max_cost_usd=0.01, max_steps=1, max_retries_total=0)

    def pick(scope: dict[str, Any]) -> ExecutionConfig | None:
        return {"/a": CONFIG, "/b": small}.get(scope["path"])

    resolver = ConfigResolver(pick)
    assert resolver.resolve({"path": "/a"}, "/a") is CONFIG
    assert resolver.resolve({"path": "/b"}, "/b") is small
    assert resolver.resolve({"path": "/c"}, "/c") is None  # None: this request is not contained


def test_failing_callable_is_logged_and_default_applies(caplog: pytest.LogCaptureFixture) -> None:
    def broken(scope: Any) -> ExecutionConfig:
        raise LookupError("tenant table down")

    fallback = ExecutionConfig(max_cost_usd=0.1, max_steps=2, max_retries_total=0)
    with caplog.at_level(logging.ERROR, logger="veronica_mw"):
        assert ConfigResolver(broken, default_config=fallback).resolve({}, "/x") is fallback
        assert ConfigResolver(broken).resolve({}, "/x") is STRICT_DEFAULT
    records = [r for r in caplog.records if r.name == "veronica_mw"]
    assert len(records) == 2
    assert all(r.exc_info is not None and isinstance(r.exc_info[1], LookupError) for r in records)


def not_a_config(scope: Any) -> Any:
    return {"max_steps": 3}


def test_wrongly_typed_callable_result_is_logged_and_default(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="veronica_mw"):
        result = ConfigResolver(not_a_config).resolve({}, "/x")
    assert result is STRICT_DEFAULT
    assert [r.getMessage() for r in caplog.records if r.name == "veronica_mw"] == [
        "veronica_mw: config callable returned dict for /x, not an ExecutionConfig or None; "
        "applying the default config"
    ]


def test_strict_default_allows_no_call() -> None:
    ctx = ExecutionContext(STRICT_DEFAULT)
    with pytest.raises(ExecutionHalted) as info:
        ctx.call_tool(lambda: None)
    assert info.value.reason == "step_limit"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"config": {"max_steps": 1}}, TypeError),
        ({"config": CONFIG, "default_config": {"max_steps": 1}}, TypeError),
        ({"config": CONFIG, "exclude_paths": "/health"}, TypeError),
        ({"config": CONFIG, "exclude_paths": ["health"]}, ValueError),
    ],
)
def test_resolver_rejects_bad_options(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        ConfigResolver(**kwargs)


# -- guard and pool helpers ----------------------------------------------------------------------------


def test_applied_twice_guard_is_a_request_pending_context_in_the_contextvar() -> None:
    assert not middleware_active()
    with ExecutionContext(CONFIG):  # a context the user entered is not a request's
        assert not middleware_active()
    token = current_context.set(PendingContext(lambda: ExecutionContext(CONFIG)))
    try:
        assert middleware_active()
    finally:
        current_context.reset(token)
    assert not middleware_active()


def test_pool_failure_logs_and_refuses_with_503(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="veronica_mw"):
        adm = pool_failure(ConnectionError("redis down"), "/chat")
    assert not adm.allowed and adm.status == 503 and adm.ledger is None
    status, headers, body = refusal_response(adm, CONFIG)
    data = json.loads(body)
    assert status == 503 and data["reason"] == "policy_denied"
    assert data["detail"] == "budget pool unavailable (ConnectionError)"
    assert dict(headers)[b"retry-after"] == b"1"
    assert len(caplog.records) == 1 and isinstance(caplog.records[0].exc_info[1], ConnectionError)  # type: ignore[index]


def test_observers_hear_of_every_pool_refusal(caplog: pytest.LogCaptureFixture) -> None:
    heard: list[tuple[str, str, int]] = []

    class Listener(Observer):
        def refused(self, reason: str, detail: str, status: int) -> None:
            heard.append((reason, detail, status))

    listener = Listener()
    add_observer(listener)
    try:
        with caplog.at_level(logging.CRITICAL, logger="veronica_mw"):
            refusal_response(pool_failure(ConnectionError("redis down"), "/chat"), CONFIG)
    finally:
        remove_observer(listener)
    refusal_response(pool_failure(ConnectionError("not heard"), "/chat"), CONFIG)
    assert heard == [("policy_denied", "budget pool unavailable (ConnectionError)", 503)]
