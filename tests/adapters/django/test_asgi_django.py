"""Django under ASGI (``get_asgi_application()`` wrapped by the middleware)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import cast

import django
import httpx
import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test.utils import override_settings
from django.urls import path

from veronica_mw import ExecutionConfig, ExecutionHalted, get_current_execution_context
from veronica_mw.web.asgi import VeronicaASGIMiddleware
from veronica_mw.web.types import ASGIApp

pytestmark = pytest.mark.anyio

if not settings.configured:  # other test modules may have configured Django already
    settings.configure(DEBUG=False, SECRET_KEY="test", ALLOWED_HOSTS=["*"], MIDDLEWARE=[], INSTALLED_APPS=[])
    django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402  (needs configured settings)


def sync_view(request: HttpRequest) -> HttpResponse:
    ctx = get_current_execution_context()
    assert ctx is not None
    ctx.call_tool(lambda: None)
    steps = ctx.get_snapshot().step_count
    return JsonResponse({"chain": ctx.chain_id, "thread": threading.get_ident(), "steps": steps})


def runaway_view(request: HttpRequest) -> HttpResponse:
    ctx = get_current_execution_context()
    assert ctx is not None
    while True:
        ctx.call_tool(lambda: None)


def handled_view(request: HttpRequest) -> HttpResponse:
    try:
        runaway_view(request)
    except ExecutionHalted as exc:
        return JsonResponse({"reason": exc.reason}, status=402)
    return HttpResponse("unreachable")


async def async_view(request: HttpRequest) -> HttpResponse:
    ctx = get_current_execution_context()
    assert ctx is not None
    return JsonResponse({"chain": ctx.chain_id})


class _URLConf:
    """This module's routes, as an object so override_settings can point at it whatever the
    module is named under pytest's importlib import mode."""

    urlpatterns = [
        path("sync", sync_view),
        path("runaway", runaway_view),
        path("handled", handled_view),
        path("async", async_view),
    ]


URLS = _URLConf()


@pytest.fixture
def client() -> Iterator[httpx.AsyncClient]:
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=0)
    with override_settings(ROOT_URLCONF=URLS, ALLOWED_HOSTS=["*"], MIDDLEWARE=[], DEBUG=False):
        # Django types its handler with dict scopes and Mapping messages: same protocol, other names.
        django_app = cast(ASGIApp, get_asgi_application())
        app = VeronicaASGIMiddleware(django_app, config=config, usage_headers=True)
        yield httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


async def test_sync_view_sees_the_request_context(client: httpx.AsyncClient) -> None:
    async with client:
        first = await client.get("/sync")
        second = await client.get("/sync")
        third = await client.get("/async")
    for response in (first, second):
        assert response.status_code == 200
        body = response.json()
        assert body["chain"] == response.headers["x-veronica-chain-id"]
        assert body["steps"] == 1
        assert body["thread"] != threading.get_ident()  # really ran in asgiref's worker thread
    assert first.json()["chain"] != second.json()["chain"]
    assert third.json()["chain"] == third.headers["x-veronica-chain-id"]


async def test_django_500_for_a_halt_becomes_a_429(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="django.request"):
        async with client:
            response = await client.get("/runaway")
    assert response.status_code == 429
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert (body["reason"], body["steps_used"], body["limits"]["max_steps"]) == ("step_limit", 3, 3)
    # Django itself turned the exception into a 500 (and logged it); the middleware replaced it.
    assert [getattr(r, "status_code", None) for r in caplog.records] == [500]


async def test_django_view_that_handles_the_halt_keeps_its_response(client: httpx.AsyncClient) -> None:
    async with client:
        response = await client.get("/handled")
    assert (response.status_code, response.json()) == (402, {"reason": "step_limit"})
