"""A real uvicorn server for the tests: ``app`` on 127.0.0.1 (ephemeral port), in a background thread.

Usage::

    with UvicornServer(app) as server:
        httpx.get(server.url + "/path")

The socket is bound before the thread starts, so the port is known at once and never races another
test; ``start`` waits until uvicorn serves (or raises if it died or did not start in time).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, TypeVar

import uvicorn

__all__ = ["UvicornServer"]

_S = TypeVar("_S", bound="UvicornServer")


class UvicornServer:
    """One uvicorn server in a daemon thread. ``options`` go to ``uvicorn.Config`` (``lifespan`` is
    off unless given); ``hang_guard_s`` bounds the start and the stop (a guard, never a timing)."""

    def __init__(self, app: Any, *, hang_guard_s: float = 30.0, **options: Any) -> None:
        self.hang_guard_s = hang_guard_s
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, **{"log_config": None, "lifespan": "off", **options})
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="uvicorn-test", daemon=True
        )

    def start(self: _S) -> _S:
        self.thread.start()
        deadline = time.monotonic() + self.hang_guard_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                self.stop()
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(self.hang_guard_s)
        self.sock.close()

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
