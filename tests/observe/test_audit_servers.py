"""1,000 requests through real servers -- uvicorn with 4 worker processes, a threaded werkzeug -- write
logs that ``veronica-mw audit verify`` accepts, with exactly one call record per model call made."""

from __future__ import annotations

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from flask import Flask, request

from veronica_mw import AuditLog, ExecutionConfig, get_current_execution_context
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

from ._servers import UvicornWorkers, serve_wsgi
from .conftest import Cli, read_records

REQUESTS = 1000
# Never to be written: a query value and an auth header sent with every request.
SECRETS = ("query-secret-7f3a", "header-secret-9c2e")


def steps_of(i: int) -> int:
    return i % 3 + 1  # 1, 2 or 3 model calls per request (1,999 in all)


def hammer(url: str, path: str) -> list[dict[str, Any]]:
    """REQUESTS GETs from 8 client threads, each on a new connection (spread over the workers)."""
    headers = {"connection": "close", "authorization": f"Bearer {SECRETS[1]}"}

    with httpx.Client(timeout=60, headers=headers) as client:

        def one(i: int) -> dict[str, Any]:
            response = client.get(
                f"{url}{path}", params={"q": f"question {i}", "steps": steps_of(i), "token": SECRETS[0]}
            )
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(one, range(REQUESTS)))


def check_log(cli: Cli, directory: Path, replies: list[dict[str, Any]], chains: int, path: str) -> None:
    code, out, err = cli("audit", "verify", directory)
    assert code == 0, out + err
    match = re.fullmatch(r"ok: (\d+) records, (\d+) chains, head [0-9a-f]{64}\n", out)
    assert match and int(match.group(2)) == chains, out
    records = read_records(directory)
    assert int(match.group(1)) == len(records)
    kinds = Counter(r["type"] for r in records)
    assert kinds["call"] == kinds["call_admitted"] == sum(r["calls"] for r in replies) == 1999
    assert kinds["context_started"] == kinds["context_ended"] == REQUESTS
    assert kinds.get("dropped", 0) == 0 and kinds.get("halt", 0) == 0
    started = [r for r in records if r["type"] == "context_started"]
    assert {r["chain"] for r in started} == {r["chain"] for r in replies}
    assert all(r["attributes"] == {"method": "GET", "path": path} for r in started)
    raw = b"".join(p.read_bytes() for p in directory.iterdir())
    for secret in SECRETS:
        assert secret.encode() not in raw


def test_uvicorn_with_four_workers(tmp_path: Path, cli: Cli) -> None:
    env = {"AUDIT_PATH": str(tmp_path / "audit.jsonl"), "AUDIT_BODIES": "0", "AUDIT_KEY": ""}
    with UvicornWorkers("audit_app", env, workers=4) as server:
        replies = hammer(server.url, "/ask")
        assert server.stop() == 0, server.stderr.decode()[-2000:]
    pids = {r["pid"] for r in replies}
    files = sorted(tmp_path.glob("audit.*.jsonl"))
    assert {int(f.name.split(".")[-2]) for f in files} == pids  # one chain file per worker that served
    assert len(pids) >= 2  # the load really was spread over processes
    check_log(cli, tmp_path, replies, chains=len(pids), path="/ask")


def test_threaded_werkzeug(tmp_path: Path, cli: Cli) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    flask = Flask(__name__)

    @flask.get("/ask")
    def ask() -> dict[str, Any]:
        ctx = get_current_execution_context()
        assert ctx is not None
        steps = int(request.args["steps"])
        for _ in range(steps):
            ctx.call_llm(
                lambda **kw: "an answer", model="gpt-4o-mini", messages=[{"role": "user", "content": "q"}]
            )
        return {"calls": steps, "chain": ctx.chain_id}

    config = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0, timeout_ms=60_000)
    flask.wsgi_app = VeronicaWSGIMiddleware(flask.wsgi_app, config=config, audit=log)  # type: ignore[method-assign]
    with serve_wsgi(flask) as server:
        replies = hammer(f"http://127.0.0.1:{server.server_port}", "/ask")
    assert log.close()
    check_log(cli, tmp_path, replies, chains=1, path="/ask")
    bodies = [r for r in read_records(tmp_path) if r["type"] == "call"]
    assert all(r["response_text"] == "an answer" and r["request"]["messages"] for r in bodies)
