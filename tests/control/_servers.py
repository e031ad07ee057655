"""``uvicorn approvals_server:app`` in a subprocess: one worker, or several sharing a Redis."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
HANG_GUARD_S = 60.0
TOKEN = "server-test-token-abcdefghijklmnop"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ApprovalsServer:
    def __init__(
        self, runs: Path, *, workers: int = 1, redis_url: str | None = None, token: str = TOKEN
    ) -> None:
        self.port = free_port()
        self.workers = workers
        self.runs = runs
        self.env = {
            **os.environ,
            "VERONICA_TEST_RUNS": str(runs),
            "VERONICA_TEST_TOKEN": token,
            "VERONICA_TEST_REDIS_URL": redis_url or "",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ApprovalsServer:
        args = [sys.executable, "-m", "uvicorn", "approvals_server:app", "--app-dir", str(HERE)]
        args += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers)]
        args += ["--log-level", "warning"]
        self.proc = subprocess.Popen(args, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + HANG_GUARD_S
        pids: set[int] = set()
        with httpx.Client(timeout=5) as client:
            while len(pids) < self.workers:  # every worker answers before the test starts
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    err = (
                        self.proc.stderr.read().decode()
                        if self.proc.poll() is not None and self.proc.stderr
                        else ""
                    )
                    self.__exit__()
                    raise RuntimeError(f"uvicorn did not start: {err[-2000:]}")
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

    def runs_of(self, tool: str = "send_email", *, to: str) -> list[dict[str, Any]]:
        """The tool runs (by any worker) addressed to ``to``."""
        if not self.runs.exists():
            return []
        lines = self.runs.read_text(encoding="utf-8").splitlines()
        return [run for run in map(json.loads, lines) if run["tool"] == tool and run["to"] == to]


class AgentCall:
    """``POST /agent`` in a background thread (it waits for a decision); ``result()`` joins it."""

    def __init__(self, url: str, **params: str) -> None:
        self._response: list[httpx.Response | BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(url, params), daemon=True)
        self._thread.start()

    def _run(self, url: str, params: dict[str, str]) -> None:
        try:
            with httpx.Client(timeout=HANG_GUARD_S) as client:
                self._response.append(client.post(url + "/agent", params=params))
        except BaseException as exc:
            self._response.append(exc)

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> httpx.Response:
        self._thread.join(HANG_GUARD_S)
        (outcome,) = self._response
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def wait_pending(url: str, count: int = 1) -> list[dict[str, Any]]:
    """Poll the approvals API until ``count`` requests wait."""
    deadline = time.monotonic() + HANG_GUARD_S
    with httpx.Client(timeout=10) as client:
        while time.monotonic() < deadline:
            pending: list[dict[str, Any]] = client.get(url + "/approvals/", headers=AUTH).json()["pending"]
            if len(pending) >= count:
                return pending
            time.sleep(0.05)
    raise AssertionError("no request became pending")
