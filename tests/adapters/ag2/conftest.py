"""Fixtures shared by both AG2 generations' tests (each file runs in its own env)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ...support.servers import UvicornServer

HANG_GUARD_S = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def serve() -> Iterator[Callable[[Any], str]]:
    """Start an ASGI app on a real uvicorn server on 127.0.0.1 (ephemeral port); returns its URL."""
    running: list[UvicornServer] = []

    def start(app: Any) -> str:
        server = UvicornServer(app, hang_guard_s=HANG_GUARD_S)
        running.append(server)
        return server.start().url

    yield start
    for server in running:
        server.stop()
