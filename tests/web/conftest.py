"""Real uvicorn servers on 127.0.0.1 (ephemeral ports) for the ASGI middleware tests."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from veronica_mw.web.types import ASGIApp

from ..support.servers import UvicornServer

_PROTOCOL_ERRORS = (
    "Unexpected ASGI message",
    "Exception in ASGI application",
    "ASGI callable returned without",
    "Expected ASGI message",
    "LocalProtocolError",
    "Invalid HTTP",
)


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class LiveServer(UvicornServer):
    """One uvicorn server running ``app`` in a background thread, with its log records."""

    def __init__(self, app: ASGIApp, collector: _Collector, **options: Any) -> None:
        super().__init__(app, hang_guard_s=10, **options)
        self._collector = collector

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws_url(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def records(self, logger_prefix: str = "", min_level: int = logging.DEBUG) -> list[logging.LogRecord]:
        return [
            r
            for r in list(self._collector.records)
            if r.name.startswith(logger_prefix) and r.levelno >= min_level
        ]

    def protocol_errors(self) -> list[str]:
        """Everything uvicorn logged at WARNING or above, plus any known protocol-error message."""
        found = []
        for record in self.records("uvicorn"):
            message = record.getMessage()
            if record.levelno >= logging.WARNING or any(text in message for text in _PROTOCOL_ERRORS):
                found.append(f"{record.levelname} {record.name}: {message}")
        return found


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def live_server() -> Iterator[Callable[..., LiveServer]]:
    """``live_server(app, ws="websockets-sansio")`` starts a server; all are stopped at teardown."""
    collector = _Collector()
    loggers = [logging.getLogger(name) for name in ("uvicorn", "veronica_mw")]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
        logger.addHandler(collector)
    servers: list[LiveServer] = []

    def start(app: ASGIApp, **options: Any) -> LiveServer:
        server = LiveServer(app, collector, **options).start()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
        for logger, level in zip(loggers, saved, strict=True):
            logger.removeHandler(collector)
            logger.setLevel(level)
