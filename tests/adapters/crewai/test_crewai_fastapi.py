"""A crew inside a FastAPI request under the ASGI middleware: the halt becomes the client's 429.

One ``VeronicaCrewAIHooks().install()`` serves the whole app; each request's context comes from the
middleware, so concurrent requests each get their full budget.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from crewai.crews.crew_output import CrewOutput
from fastapi import FastAPI

from veronica_mw import ExecutionConfig
from veronica_mw.adapters.crewai import VeronicaCrewAIHooks
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...support.servers import UvicornServer
from .fakes import Crewed

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")


class App:
    def __init__(self) -> None:
        self.crews: list[Crewed] = []
        self.barrier: threading.Barrier | None = None
        self.app = FastAPI()
        self.app.post("/crew")(self.run_async)
        self.app.post("/crew-sync")(self.run_sync)  # FastAPI runs it in its threadpool

    def new_crew(self) -> Crewed:
        crewed = Crewed(tasks=2, barrier=self.barrier)
        self.crews.append(crewed)
        return crewed

    async def run_async(self) -> dict[str, str]:
        output = await self.new_crew().crew.akickoff()
        assert isinstance(output, CrewOutput)
        return {"raw": output.raw}

    def run_sync(self) -> dict[str, str]:
        output = self.new_crew().crew.kickoff()
        assert isinstance(output, CrewOutput)
        return {"raw": output.raw}


@pytest.fixture
def served() -> Iterator[tuple[str, App]]:
    app = App()
    wrapped = VeronicaASGIMiddleware(
        app.app, config=ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=3)
    )
    hooks = VeronicaCrewAIHooks().install()
    try:
        with UvicornServer(wrapped) as server:
            yield server.url, app
    finally:
        hooks.uninstall()


def assert_step_limit_429(response: httpx.Response) -> None:
    assert response.status_code == 429
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["reason"] == "step_limit"


@pytest.mark.parametrize("path", ["/crew", "/crew-sync"])
def test_request_limit_turns_a_crew_into_429(served: tuple[str, App], path: str) -> None:
    url, app = served
    for _ in range(2):  # each request has its own context: both get the full budget
        assert_step_limit_429(httpx.post(url + path, timeout=60))
    # model, tool, model, tool, model: the third tool call is refused and the crew stops there.
    assert [crewed.counts() for crewed in app.crews] == [[(3, 2), (0, 0)]] * 2


def test_concurrent_requests_do_not_share_counts(served: tuple[str, App]) -> None:
    url, app = served
    app.barrier = threading.Barrier(2)  # both requests are inside their first model call at once
    responses: list[httpx.Response] = []

    def post(path: str) -> None:
        responses.append(httpx.post(url + path, timeout=60))

    threads = [threading.Thread(target=post, args=(path,)) for path in ("/crew", "/crew-sync")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)  # hang guard only
    assert len(responses) == 2
    for response in responses:
        assert_step_limit_429(response)
    assert [crewed.counts() for crewed in app.crews] == [[(3, 2), (0, 0)]] * 2
