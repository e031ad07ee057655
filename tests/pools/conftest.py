"""Fixtures for the budget-pool tests: real redis-server processes on 127.0.0.1 random ports.

Each test that needs Redis gets its own server (so it may kill and restart it mid-run). Without a
``redis-server`` binary the tests skip locally and FAIL under CI=true.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

REDIS_BIN = shutil.which("redis-server")
T = TypeVar("T")
Closer = Callable[[Any], Any]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server child process with append-only persistence (fsync always), so a SIGKILL and
    restart keeps every acknowledged write, like a production Redis configured for budgets."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS_BIN is not None
        args = [
            REDIS_BIN,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            str(self.directory),
            "--protected-mode",
            "no",
            "--loglevel",
            "warning",
            "--daemonize",
            "no",
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10.0  # hang guard only
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()


def _require_redis() -> None:
    if REDIS_BIN is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not installed (CI=true: the Redis tests must run)")
        pytest.skip("redis-server is not installed")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    _require_redis()
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def module_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for a whole module (hypothesis tests cannot use function-scoped fixtures)."""
    _require_redis()
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def closer() -> Iterator[Callable[[T], T]]:
    """``closer(obj)`` returns obj and closes it after the test (redis clients, backends, breakers):
    a connection left to the garbage collector is a ResourceWarning, which this suite treats as an error."""
    objects: list[Any] = []

    def register(obj: T) -> T:
        objects.append(obj)
        return obj

    yield register
    for obj in reversed(objects):
        obj.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


from ..support.redis_cluster import _redis_cluster_session, redis_cluster  # noqa: E402, F401  (fixtures)
