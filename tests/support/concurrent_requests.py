"""Concurrent POSTs to a test server, and what each request's refusal at its step limit must be."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

import veronica_mw
from veronica_mw import ExecutionConfig
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from .fake_tool_provider import FakeToolProvider
from .servers import UvicornServer


def post_all(url: str, requests: int) -> list[httpx.Response]:
    """POST ``url`` from ``requests`` threads at once; every answer (the join only guards hangs)."""
    responses: list[httpx.Response] = []

    def post() -> None:
        responses.append(httpx.post(url, timeout=120))

    threads = [threading.Thread(target=post) for _ in range(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    assert len(responses) == requests
    return responses


def assert_step_limit_refusals(responses: list[httpx.Response], steps: int) -> None:
    """Each request got the 429 problem+json at exactly its own ``steps``."""
    for response in responses:
        assert response.status_code == 429, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        body = response.json()
        assert (body["reason"], body["steps_used"]) == ("step_limit", steps), body


@contextmanager
def tool_loop_server(
    build: Callable[[str, list[str]], Any], steps: int, needs: set[str]
) -> Iterator[tuple[str, FakeToolProvider, list[str]]]:
    """``build(provider_url, ran)``'s app under VeronicaASGIMiddleware (``max_steps=steps``) on a real
    uvicorn, with every installed adapter and SDK instrumented (``needs`` among them) and a fake
    provider that answers every request offering tools with a tool call; yields (server url, the
    provider, the tool bodies that ran)."""
    ran: list[str] = []
    assert needs <= set(veronica_mw.instrument())
    try:
        with FakeToolProvider("-") as provider:
            config = ExecutionConfig(max_cost_usd=10.0, max_steps=steps, max_retries_total=0)
            app = VeronicaASGIMiddleware(build(provider.url, ran), config=config)
            with UvicornServer(app) as server:
                yield server.url, provider, ran
    finally:
        veronica_mw.uninstrument()
