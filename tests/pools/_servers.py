"""Real servers for the middleware-level budget tests: uvicorn (in a thread, or ``--workers 4`` in a
subprocess running examples/tenant_budget_app.py) and werkzeug for WSGI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from werkzeug.serving import BaseWSGIServer, make_server

from ..support.servers import UvicornServer
from .conftest import free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HANG_GUARD_S = 60.0


class ThreadedUvicorn(UvicornServer):
    """One uvicorn server running ``app`` (with its lifespan) in a background thread on an ephemeral port."""

    def __init__(self, app: Any) -> None:
        super().__init__(app, hang_guard_s=HANG_GUARD_S, lifespan="on")


class UvicornWorkers:
    """``uvicorn tenant_budget_app:app --workers N`` in a subprocess (N real worker processes)."""

    def __init__(self, env: dict[str, str], workers: int = 4) -> None:
        self.port = free_port()
        self.workers = workers
        self.env = {**os.environ, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> UvicornWorkers:
        args = [
            sys.executable,
            "-m",
            "uvicorn",
            "tenant_budget_app:app",
            "--app-dir",
            str(EXAMPLES),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            "--log-level",
            "warning",
        ]
        self.proc = subprocess.Popen(args, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + HANG_GUARD_S
        pids: set[int] = set()
        with httpx.Client(timeout=5) as client:
            # Wait until every worker answers (each reports its pid), so load spreads over all four.
            while len(pids) < self.workers:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("uvicorn workers did not start")
                try:
                    pids.add(client.get(self.url + "/pid", headers={"connection": "close"}).json()["pid"])
                except httpx.HTTPError:
                    time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(HANG_GUARD_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()


class ThreadedWSGI:
    """A threaded werkzeug server on an ephemeral port."""

    def __init__(self, app: Any) -> None:
        self._server: BaseWSGIServer = make_server("127.0.0.1", 0, app, threaded=True)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadedWSGI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(HANG_GUARD_S)
