"""The writer never holds up or breaks a request: a stalled writer drops (and counts, in the chain) what
does not fit in its queue; a missing or read-only directory is logged while requests carry on."""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask
from werkzeug.test import Client

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext, get_current_execution_context
from veronica_mw.observe._audit_files import ChainFiles
from veronica_mw.observe.audit_verify import verify
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

from ._servers import HANG_GUARD_S, serve_wsgi
from .conftest import read_records

CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0, timeout_ms=60_000)
PER_REQUEST = 4  # context_started, call_admitted, call, context_ended


def app_with(log: AuditLog) -> Flask:
    flask = Flask(__name__)

    @flask.get("/ask")
    def ask() -> dict[str, Any]:
        ctx = get_current_execution_context()
        assert ctx is not None
        return {"answer": ctx.call_llm(lambda: "ok"), "chain": ctx.chain_id}

    flask.wsgi_app = VeronicaWSGIMiddleware(flask.wsgi_app, config=CONFIG, audit=log)  # type: ignore[method-assign]
    return flask


def ask(client: Client) -> int:
    """One GET /ask through werkzeug's test client, closing the response as a server would (the
    request's context ends with its body)."""
    response = client.get("/ask")
    response.close()
    return response.status_code


def payload(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] not in ("log", "head", "dropped")]


@pytest.fixture
def stalled(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """The writer blocks in its first write until released (a disk that stopped answering)."""
    entered, release = threading.Event(), threading.Event()
    original = ChainFiles.write

    def write(self: ChainFiles, records: list[dict[str, Any]]) -> None:
        entered.set()
        assert release.wait(HANG_GUARD_S), "the test never released the writer"
        original(self, records)

    monkeypatch.setattr(ChainFiles, "write", write)
    yield entered, release
    release.set()


def test_a_stalled_writer_drops_and_counts_without_holding_requests(
    tmp_path: Path, stalled: tuple[threading.Event, threading.Event]
) -> None:
    entered, release = stalled
    log = AuditLog(tmp_path / "audit.jsonl", queue_size=50)
    requests = 300
    with serve_wsgi(app_with(log)) as server, httpx.Client(timeout=HANG_GUARD_S) as client:
        url = f"http://127.0.0.1:{server.server_port}/ask"
        with ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(lambda _: client.get(url).status_code, range(requests)))
        # Every request was answered while the writer sat blocked in its first write.
        assert entered.is_set() and not release.is_set()
    assert codes == [200] * requests
    dropped = log.dropped
    assert dropped > 0 and log.stats()["dropped_by_reason"] == {"queue_full": dropped}
    release.set()
    assert log.close()
    records = read_records(tmp_path)
    marks = [r for r in records if r["type"] == "dropped"]
    assert sum(m["count"] for m in marks) == dropped and marks[-1]["total"] == dropped
    assert all(set(m["reasons"]) == {"queue_full"} for m in marks)
    # Nothing vanished without a trace: every record is either in the chain or counted as dropped.
    assert len(payload(records)) + dropped == PER_REQUEST * requests
    assert verify([tmp_path]).ok


def test_a_missing_directory_is_logged_and_the_log_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "not-yet"
    log = AuditLog(directory / "audit.jsonl", retry_s=0.05)
    client = Client(app_with(log))
    with caplog.at_level(logging.ERROR, logger="veronica_mw.audit"):
        assert [ask(client) for _ in range(5)] == [200] * 5
        assert log.flush()
    assert any("cannot be written" in r.getMessage() and "not-yet" in r.getMessage() for r in caplog.records)
    lost = log.dropped
    assert lost == 5 * PER_REQUEST and log.stats()["dropped_by_reason"] == {"write_failed": lost}
    directory.mkdir()
    deadline = time.monotonic() + HANG_GUARD_S
    while not log.files:  # the writer retries every retry_s; the next records open a new chain
        assert time.monotonic() < deadline
        assert ask(client) == 200
        log.flush()
        time.sleep(0.06)
    assert log.close()
    records = read_records(directory)
    assert records[0]["type"] == "log" and "No such file or directory" in records[0]["after_error"]
    marks = [r for r in records if r["type"] == "dropped"]
    assert sum(m["reasons"]["write_failed"] for m in marks) == log.dropped
    assert verify([directory]).ok


def _serve_read_only(directory: str) -> dict[str, Any]:
    """In the child: requests against a log whose directory cannot be written."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logging.getLogger("veronica_mw.audit").addHandler(Collect())
    log = AuditLog(Path(directory) / "audit.jsonl")
    client = Client(app_with(log))
    codes = [ask(client) for _ in range(10)]
    log.flush()
    return {"codes": codes, "messages": messages, "dropped": log.dropped, "files": log.files}


def test_a_read_only_directory_is_logged_and_requests_carry_on() -> None:
    # root ignores permission bits, so the requests run in a forked child that drops to "nobody".
    parent = Path(tempfile.mkdtemp(prefix="veronica-ro-"))
    directory = parent / "logs"
    directory.mkdir()
    try:
        os.chmod(parent, 0o755)
        os.chmod(directory, 0o555)
        read_fd, write_fd = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork of a threaded process
            pid = os.fork()
        if pid == 0:
            try:
                os.close(read_fd)
                if os.geteuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                result = _serve_read_only(str(directory))
                os.write(write_fd, json.dumps(result).encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            if not select.select([pipe], [], [], HANG_GUARD_S)[0]:  # a hung child fails the test
                os.kill(pid, signal.SIGKILL)
            raw = pipe.read()
        os.waitpid(pid, 0)
        result = json.loads(raw)
        assert result["codes"] == [200] * 10
        assert any("cannot be written" in m and "Permission denied" in m for m in result["messages"])
        assert result["dropped"] == 10 * PER_REQUEST and result["files"] == []
        assert list(directory.iterdir()) == []
    finally:
        os.chmod(directory, 0o755)
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()
        parent.rmdir()


def test_records_after_close_are_counted(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    with ExecutionContext(CONFIG, audit=log) as ctx:
        ctx.call_tool(lambda: 1)
    log.close()
    with ExecutionContext(CONFIG, audit=log) as ctx:
        ctx.call_tool(lambda: 1)
    assert log.stats()["dropped_by_reason"] == {"closed": PER_REQUEST}
    assert Counter(r["type"] for r in read_records(tmp_path))["call"] == 1
    assert verify([tmp_path]).ok
