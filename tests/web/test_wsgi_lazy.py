"""The WSGI and Django middlewares schedule a request's deadline timer only when the request uses its
context, and count that deadline from the request start however late the first use comes.

``environ["veronica.context"]`` must be the real context, so the object exists from the request
start; what a request that never uses it does not pay for is the timer (and the ContextVar holds a
``PendingContext`` that hands it out)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client as DjangoClient
from django.test import override_settings
from django.urls import path
from flask import Flask, request
from werkzeug.test import Client

from veronica_mw import ExecutionConfig, ExecutionContext, WrapOptions, get_current_execution_context
from veronica_mw.kernel.context import PendingContext, current_context
from veronica_mw.web.wsgi import ENVIRON_KEY, VeronicaWSGIMiddleware

from ..adapters.django.django_project import settings as project_settings
from .wsgi_support import call_direct, environ_for, timers

TIMED = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0, timeout_ms=60_000)


def llm_call(ctx: ExecutionContext | None = None) -> str:
    ctx = ctx or get_current_execution_context()
    assert ctx is not None
    return ctx.call_llm(lambda: "answer", options=WrapOptions(cost_estimate_hint=0.01))


def test_untouched_request_schedules_no_timer_but_environ_holds_the_real_context() -> None:
    seen: dict[str, Any] = {}

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen["pending"] = current_context.get()
        seen["environ_ctx"] = environ[ENVIRON_KEY]
        seen["timers"] = timers()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"static"]

    before = timers()
    calls, body = call_direct(VeronicaWSGIMiddleware(app, config=TIMED), environ_for("/"))
    assert ([c[0] for c in calls], body) == (["200 OK"], b"static")
    assert isinstance(seen["pending"], PendingContext)
    assert isinstance(seen["environ_ctx"], ExecutionContext)
    assert seen["environ_ctx"].config is TIMED
    assert seen["timers"] == before  # nothing used the context: no deadline was scheduled
    assert timers() == before


def test_first_use_through_the_contextvar_or_the_token_arms_the_environ_context(
    watched_deadlines: None,
) -> None:
    seen: dict[str, Any] = {}

    def via_contextvar(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        seen["before_use"] = timers()
        seen["ctx"] = get_current_execution_context()
        seen["after_use"] = timers()
        start_response("200 OK", [])
        yield llm_call().encode()

    def via_token(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        environ[ENVIRON_KEY].cancellation_token.add_callback(lambda: None)
        seen["after_token"] = timers()
        start_response("200 OK", [])
        return [b"ok"]

    before = timers()
    environ = environ_for("/")
    calls, body = call_direct(VeronicaWSGIMiddleware(via_contextvar, config=TIMED), environ)
    assert ([c[0] for c in calls], body) == (["200 OK"], b"answer")
    assert seen["ctx"] is environ[ENVIRON_KEY]  # one context, reachable both ways
    assert (seen["before_use"], seen["after_use"]) == (before, before + 1)
    assert timers() == before  # removed when the body was done
    call_direct(VeronicaWSGIMiddleware(via_token, config=TIMED), environ_for("/"))
    assert seen["after_token"] == before + 1
    assert timers() == before


@pytest.mark.parametrize("route", ["contextvar", "environ"])
def test_timeout_counts_from_the_request_start_when_the_context_is_first_used_late(route: str) -> None:
    timeout_ms = 150.0
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0, timeout_ms=timeout_ms)
    app = Flask(__name__)
    steps: list[int] = []

    @app.get("/slow")
    def slow() -> str:
        time.sleep(timeout_ms / 1000 * 1.5)  # past the deadline before anything used the context
        ctx = get_current_execution_context() if route == "contextvar" else request.environ[ENVIRON_KEY]
        assert ctx is not None
        steps.append(ctx.get_snapshot().step_count)
        return llm_call(ctx)

    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=config)  # type: ignore[method-assign]
    before = timers()
    reply = Client(app).get("/slow")
    assert steps == [0]
    assert reply.status_code == 429
    body = json.loads(reply.data)
    assert (body["reason"], body["steps_used"], body["limits"]["timeout_ms"]) == ("timeout", 0, timeout_ms)
    assert timers() == before


# -- Django's MIDDLEWARE class ------------------------------------------------------------------------

SEEN: dict[str, Any] = {}


def static_view(request: HttpRequest) -> HttpResponse:
    SEEN["pending"] = current_context.get()
    SEEN["meta_ctx"] = request.META["veronica.context"]
    SEEN["timers"] = timers()
    return HttpResponse("static")


def agent_view(request: HttpRequest) -> JsonResponse:
    ctx = get_current_execution_context()
    SEEN["ctx"] = ctx
    SEEN["meta_ctx"] = request.META["veronica.context"]
    SEEN["timers"] = timers()
    return JsonResponse({"answer": llm_call()})


class URLs:
    """A URLconf of this module's views (Django accepts any object with ``urlpatterns``)."""

    urlpatterns = [path("static", static_view), path("agent", agent_view)]


@pytest.fixture
def django_urls() -> Iterator[None]:
    if not settings.configured:
        settings.configure(**project_settings.SETTINGS)
        django.setup()
    SEEN.clear()
    limits = {"max_cost_usd": 1.0, "max_steps": 3, "max_retries_total": 0, "timeout_ms": 60_000}
    with override_settings(
        ROOT_URLCONF=URLs, MIDDLEWARE=["veronica_mw.adapters.django.VeronicaMiddleware"], VERONICA=limits
    ):
        yield


def test_django_middleware_arms_the_context_only_for_views_that_use_it(
    django_urls: None, watched_deadlines: None
) -> None:
    before = timers()
    client = DjangoClient()
    static = client.get("/static")
    assert static.status_code == 200 and static.content == b"static"
    assert isinstance(SEEN["pending"], PendingContext)
    assert isinstance(SEEN["meta_ctx"], ExecutionContext)
    assert SEEN["timers"] == before
    agent = client.get("/agent")
    assert agent.status_code == 200 and agent.json() == {"answer": "answer"}
    assert SEEN["ctx"] is SEEN["meta_ctx"]
    assert SEEN["timers"] == before + 1
    assert SEEN["ctx"].get_snapshot().step_count == 1
    assert timers() == before
