"""Concurrent POSTs to a test server, and what each request's refusal at its step limit must be."""

from __future__ import annotations

import threading

import httpx


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
