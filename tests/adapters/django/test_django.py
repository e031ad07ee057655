"""veronica_mw.adapters.django against a real Django project (./django_project): the MIDDLEWARE
class through django.test.Client, and the wsgi.py wrapping through werkzeug's client and a real server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application
from django.test import Client, override_settings
from werkzeug.test import Client as WerkzeugClient

from veronica_mw import ExecutionConfig, ExecutionContext, get_current_execution_context
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

from ...web.wsgi_support import (
    HANG_GUARD_S,
    Probe,
    drop_connection,
    get,
    open_stream,
    read_until,
    serve,
    timers,
)
from .django_project import pool as project_pool
from .django_project import settings as project_settings
from .django_project import views

CONTAINED = project_settings.CONTAINED_MIDDLEWARE
LIMITS = {"max_cost_usd": 1.0, "max_steps": 3, "max_retries_total": 0, "timeout_ms": 60_000}


@pytest.fixture(autouse=True)
def django_project() -> Iterator[None]:
    if not settings.configured:
        settings.configure(**project_settings.SETTINGS)
        django.setup()
    views.reset()
    with override_settings(
        ROOT_URLCONF=project_settings.SETTINGS["ROOT_URLCONF"], MIDDLEWARE=CONTAINED, VERONICA=dict(LIMITS)
    ):
        yield


def problem(response: Any) -> dict[str, Any]:
    assert response["Content-Type"] == "application/problem+json"
    return json.loads(response.content)  # type: ignore[no-any-return]


# -- the MIDDLEWARE class ---------------------------------------------------------------------------


def test_middleware_gives_each_request_its_own_context_and_resets_it() -> None:
    client = Client()
    first = client.get("/steps/2")
    second = client.get("/steps/1")
    assert (first.status_code, first.json()) == (200, {"contained": True, "steps": 2})
    assert (second.status_code, second.json()) == (200, {"contained": True, "steps": 1})
    a, b = views.STATE["view_ctx"]
    assert isinstance(a, ExecutionContext) and isinstance(b, ExecutionContext) and a is not b
    assert views.STATE["meta_ctx"] is b
    assert a.config.max_steps == 3 and a.config.timeout_ms == 60_000
    assert get_current_execution_context() is None


def test_halt_escaping_the_view_is_a_429_from_process_exception() -> None:
    response = Client().get("/steps/5")
    assert response.status_code == 429
    body = problem(response)
    assert (body["reason"], body["steps_used"], body["limits"]["max_steps"]) == ("step_limit", 3, 3)
    assert "Retry-After" not in response
    assert int(response["Content-Length"]) == len(response.content)


def test_halt_turned_into_a_500_by_django_is_replaced_by_the_429() -> None:
    response = Client(raise_request_exception=False).get("/middleware-halt")
    assert response.status_code == 429
    assert problem(response)["reason"] == "cancelled"


def test_view_that_chose_its_own_response_keeps_it_and_plain_500s_stay() -> None:
    client = Client(raise_request_exception=False)
    caught = client.get("/caught")
    assert (caught.status_code, caught.json()) == (402, {"mine": "step_limit"})
    assert client.get("/boom").status_code == 500


def test_streaming_response_keeps_the_context_until_closed(watched_deadlines: None) -> None:
    before = timers()
    response = Client().get("/stream/3")
    assert timers() == before + 1  # still live: the body has not been iterated yet
    body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    ctx = views.STATE["view_ctx"][0]
    assert isinstance(ctx, ExecutionContext)
    assert views.STATE["chunk_ctx"] == [ctx] * 3
    assert body.decode().splitlines() == [f"{i}:{ctx.chain_id}" for i in range(3)]
    assert (views.STATE["closed"], views.STATE["ctx_at_close"]) == (1, ctx)
    assert timers() == before
    assert get_current_execution_context() is None


def test_streaming_halt_after_start_ends_the_body_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        response = Client().get("/stream/6")
        body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    assert response.status_code == 200 and len(body.splitlines()) == 3
    assert views.STATE["closed"] == 1
    messages = [r.getMessage() for r in caplog.records if r.name == "veronica_mw"]
    assert len(messages) == 1 and "reason=step_limit" in messages[0] and "/stream/6" in messages[0]


def test_streaming_response_chosen_after_the_halt_is_not_cut(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        response = Client().get("/caught-stream")
        body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    assert (response.status_code, body) == (402, b"stopped: step_limit\npartial result\n")
    assert [r for r in caplog.records if r.name == "veronica_mw"] == []


def test_settings_config_callable_exclusions_and_usage_headers() -> None:
    veronica = {
        "config": project_pool.__name__ + ".plan_config",
        "default_config": {"max_cost_usd": 0.0, "max_steps": 0, "max_retries_total": 0},
        "exclude_paths": ["/health"],
        "usage_headers": True,
    }
    with override_settings(VERONICA=veronica):
        client = Client()
        assert client.get("/steps/2", headers={"X-Plan": "free"}).status_code == 429
        paid = client.get("/steps/2")
        assert (paid.status_code, paid["x-veronica-steps"]) == (200, "2/10")
        assert client.get("/steps/1", headers={"X-Plan": "broken"}).status_code == 429  # default: 0 steps
        assert client.get("/health").json() == {"contained": False, "steps": 0}


def test_settings_budget_pool_refuses_before_the_view() -> None:
    project_pool.POOL.asked.clear()
    with override_settings(VERONICA={**LIMITS, "budget_pool": project_pool.__name__ + ".POOL"}):
        response = Client().get("/steps/1")
    assert response.status_code == 429
    assert (response["Retry-After"], response["RateLimit"]) == ("5", "t=5")
    assert problem(response)["reason"] == "budget_exceeded"
    assert views.STATE["view_ctx"] == [] and len(project_pool.POOL.asked) == 1


def test_settings_budget_pool_admission_headers_and_ledger_reach_the_request() -> None:
    ledger = project_pool.LEDGER
    ledger.left_usd, ledger.settled[:] = 0.015, []
    with override_settings(VERONICA={**LIMITS, "budget_pool": project_pool.__name__ + ".OPEN_POOL"}):
        client = Client()
        ok = client.get("/steps/1")
        refused = client.get("/steps/2")  # 0.005 left after the first request: the second step is refused
    assert (ok.status_code, ok["RateLimit-Remaining"]) == (200, "4")
    assert (refused.status_code, refused["RateLimit-Remaining"]) == (429, "4")
    assert problem(refused)["reason"] == "budget_exceeded"
    assert len(ledger.settled) == 1 and ledger.left_usd == pytest.approx(0.005)


def test_settings_circuit_breaker_gives_retry_after() -> None:
    project_pool.BREAKER.record_failure()  # the shared upstream breaker is now open
    with override_settings(VERONICA={**LIMITS, "circuit_breaker": project_pool.__name__ + ".BREAKER"}):
        response = Client().get("/steps/1")
    assert response.status_code == 429
    assert response["Retry-After"] == "8"
    assert problem(response)["reason"] == "circuit_open"


def test_settings_warn_at_and_on_warn_give_the_warning_header() -> None:
    project_pool.WARNINGS.clear()
    veronica = {**LIMITS, "max_steps": 4, "warn_at": [0.5], "usage_headers": True}
    with override_settings(VERONICA={**veronica, "on_warn": project_pool.__name__ + ".record_warning"}):
        response = Client().get("/steps/2")
    assert (response.status_code, response["x-veronica-warning"]) == (200, "steps 0.5")
    assert [(e.kind, e.data["dimension"], e.data["used"]) for e in project_pool.WARNINGS] == [
        ("soft_limit", "steps", 2)
    ]


@pytest.mark.parametrize(
    "veronica",
    [
        None,
        {"max_steps": 3},
        {**LIMITS, "max_step": 3},
        {**LIMITS, "config": project_pool.__name__ + ".plan_config"},
        {**LIMITS, "max_steps": -1},
        {**LIMITS, "budget_pool": "builtins.object"},
        {**LIMITS, "circuit_breaker": "builtins.object"},
        {**LIMITS, "exclude_paths": "/health"},
        {**LIMITS, "exclude_paths": ["health"]},
        {**LIMITS, "warn_at": [1.5]},
        {**LIMITS, "on_warn": "veronica_mw.__version__"},
    ],
    ids=[
        "missing",
        "incomplete",
        "typo",
        "config-and-limits",
        "invalid",
        "bad-pool",
        "bad-breaker",
        "paths-as-str",
        "relative-path",
        "bad-warn-at",
        "bad-on-warn",
    ],  # fmt: skip
)
def test_bad_settings_fail_at_startup(veronica: Any) -> None:
    with override_settings(VERONICA=veronica), pytest.raises(ImproperlyConfigured):
        Client().get("/steps/0")


def test_middleware_under_the_wsgi_wrapper_passes_through() -> None:
    wrapped = VeronicaWSGIMiddleware(get_wsgi_application(), config=ExecutionConfig(1.0, 5, 0))
    response = WerkzeugClient(wrapped).get("/steps/4")
    assert (response.status_code, response.json) == (200, {"contained": True, "steps": 4})
    assert views.STATE["view_ctx"][0].config.max_steps == 5  # the outer (WSGI) context, counted once


# -- the wsgi.py wrapping ---------------------------------------------------------------------------


def test_wsgi_wrapper_turns_djangos_500_for_a_halt_into_the_429() -> None:
    from veronica_mw.adapters.django import wrap_wsgi_application

    with override_settings(MIDDLEWARE=[CONTAINED[1]]):
        client = WerkzeugClient(wrap_wsgi_application())
        refused = client.get("/steps/4")
        mw_refused = client.get("/middleware-halt")
        ok = client.get("/steps/3")
    assert refused.status_code == 429 and json.loads(refused.data)["reason"] == "step_limit"
    assert mw_refused.status_code == 429 and json.loads(mw_refused.data)["reason"] == "cancelled"
    assert (ok.status_code, ok.json) == (200, {"contained": True, "steps": 3})


def test_wsgi_wrapper_streams_django_through_a_real_server_and_survives_disconnects() -> None:
    before = timers()
    with override_settings(MIDDLEWARE=[]):
        probe = Probe(
            VeronicaWSGIMiddleware(get_wsgi_application(), config=ExecutionConfig(1.0, 3, 0, 60_000))
        )
        with serve(probe) as server:
            streamed = get(server, "/stream/3")
            assert probe.closed.wait(HANG_GUARD_S)
            sock = open_stream(server, "/endless")
            read_until(sock, b"xxxx")
            drop_connection(sock)
            assert probe.closed.wait(HANG_GUARD_S)
            refused = get(server, "/steps/4")
    ctx = views.STATE["chunk_ctx"][0]
    assert streamed.status == 200 and len(streamed.body.splitlines()) == 3
    assert views.STATE["chunk_ctx"][:3] == [ctx] * 3
    assert views.STATE["closed"] == 2 and len(views.STATE["chunk_ctx"]) < 3 + views.DISCONNECT_GUARD
    assert refused.status == 429 and refused.json()["reason"] == "step_limit"
    assert probe.seen_on_entry == [None] * 3
    assert timers() == before


def test_middleware_streams_through_a_real_server_and_closes_on_disconnect() -> None:
    before = timers()
    probe = Probe(get_wsgi_application())
    with serve(probe) as server:
        sock = open_stream(server, "/endless")
        read_until(sock, b"xxxx")
        drop_connection(sock)
        assert probe.closed.wait(HANG_GUARD_S)
        streamed = get(server, "/stream/2")
        assert probe.closed.wait(HANG_GUARD_S)
    assert streamed.status == 200
    assert views.STATE["closed"] == 2
    assert isinstance(views.STATE["ctx_at_close"], ExecutionContext)
    assert timers() == before
