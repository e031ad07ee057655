"""Real servers for the audit-log tests: ``uvicorn --workers N`` in a subprocess, a threaded werkzeug."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HANG_GUARD_S = 120.0  # generous: two shared cores, four workers importing FastAPI


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class UvicornWorkers:
    """``uvicorn <module>:app --workers N`` from examples/, until every worker has answered /pid."""

    def __init__(self, module: str, env: dict[str, str], workers: int = 4) -> None:
        self.module = module
        self.port = free_port()
        self.workers = workers
        self.env = {**os.environ, **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr = b""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> UvicornWorkers:
        args = [
            sys.executable, "-m", "uvicorn", f"{self.module}:app", "--app-dir", str(EXAMPLES),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers),
            "--log-level", "warning",
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + HANG_GUARD_S
        pids: set[int] = set()
        with httpx.Client(timeout=5) as client:
            # Each worker reports its pid; wait for all of them so the load reaches every one.
            while len(pids) < self.workers:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"uvicorn workers did not start: {self.stderr.decode()[-2000:]}")
                try:
                    pids.add(client.get(self.url + "/pid", headers={"connection": "close"}).json()["pid"])
                except httpx.HTTPError:
                    time.sleep(0.05)
        return self

    def stop(self) -> int | None:
        """SIGINT (what Ctrl-C sends): the workers shut down cleanly and close their logs."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(HANG_GUARD_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            self.stderr = proc.stderr.read()
            proc.stderr.close()
        self.proc = None
        return proc.returncode

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Quiet(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


@contextmanager
def serve_wsgi(app: WSGIApplication) -> Iterator[BaseWSGIServer]:
    """``app`` on a threaded werkzeug server on an ephemeral port of 127.0.0.1."""
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(HANG_GUARD_S)
