"""1,000 requests through real servers -- uvicorn with 3 worker processes (keyed, signed, anchored),
a threaded werkzeug -- write logs that ``veronica-mw audit verify`` accepts, with exactly one call
record per model call made; and the signed multi-process log reports every tampering."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from flask import Flask, request

from veronica_mw import AuditLog, ExecutionConfig, get_current_execution_context
from veronica_mw.observe._audit_sign import keygen
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


def check_log(
    cli: Cli, directory: Path, replies: list[dict[str, Any]], chains: int, path: str, *extra: str | Path
) -> dict[str, str]:
    """Verify, count every record kind; returns each chain's own head (log id -> digest)."""
    code, out, err = cli("audit", "verify", directory, *extra)
    assert code == 0, out + err
    match = re.search(r"^ok: (\d+) records, (\d+) chains", out, re.M)
    assert match and int(match.group(2)) == chains, out
    heads = dict(re.findall(r"^chain (\S+): \d+ records, head ([0-9a-f]{64})$", out, re.M))
    if chains == 1:
        heads = dict(re.findall(r"^ok: \d+ records, 1 chains, head ([0-9a-f]{64})$()", out, re.M))
    assert len(heads) == chains, out
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
    return heads


def test_uvicorn_three_workers_keyed_signed_anchored(tmp_path: Path, cli: Cli) -> None:
    logs, witness = tmp_path / "logs", tmp_path / "witness"
    private, public = keygen(tmp_path / "signing")
    key_file = tmp_path / "hmac"
    key_file.write_bytes(b"server-key")
    env = {
        "AUDIT_PATH": str(logs / "audit.jsonl"), "AUDIT_BODIES": "0", "AUDIT_KEY": "server-key",
        "AUDIT_SIGNING_KEY": str(private), "AUDIT_ANCHOR": str(witness / "anchors.jsonl"),
    }  # fmt: skip
    with UvicornWorkers("audit_app", env, workers=3) as server:
        replies = hammer(server.url, "/ask")
        assert server.stop() == 0, server.stderr.decode()[-2000:]
    pids = {r["pid"] for r in replies}
    files = sorted(logs.glob("audit.*.jsonl"))
    assert {int(f.name.split(".")[-2]) for f in files} == pids  # one chain file per worker that served
    assert len(pids) >= 2  # the load really was spread over processes
    assert (logs.stat().st_mode & 0o777, witness.stat().st_mode & 0o777) == (0o700, 0o700)
    assert {f.stat().st_mode & 0o777 for f in [*files, witness / "anchors.jsonl"]} == {0o600}
    proof = ("--key-file", key_file, "--public-key", public, "--anchor", witness / "anchors.jsonl")
    heads = check_log(cli, logs, replies, len(pids), "/ask", *proof)
    # Each chain's own head, printed now, still verifies later whatever the other chains wrote.
    for head in heads.values():
        code, out, err = cli("audit", "verify", logs, *proof, "--expect-head", head)
        assert code == 0 and "intact up to" in out, out + err

    def tampered(name: str) -> Path:
        copy = tmp_path / name
        shutil.copytree(logs, copy)
        return copy

    one, two = sorted(logs.glob("audit.*.jsonl"))[:2]
    # A whole chain deleted: the anchor names it.
    gone = tampered("deleted")
    (gone / one.name).unlink()
    code, out, _ = cli("audit", "verify", gone, *proof)
    assert code == 1 and "missing chain" in out and heads and any(log in out for log in heads), out
    # Two chains' files swapped: each chain's signed digest names a file that is not its own.
    swapped = tampered("swapped")
    (swapped / one.name).rename(swapped / "tmp")
    (swapped / two.name).rename(swapped / one.name)
    (swapped / "tmp").rename(swapped / two.name)
    code, out, _ = cli("audit", "verify", swapped, *proof)
    assert code == 1 and out.count("missing file") == 2, out
    # Cut back to an earlier head (whole lines, chain still consistent): the anchor catches it.
    cut = tampered("cut")
    lines = (cut / one.name).read_bytes().splitlines(keepends=True)
    earlier = max(i for i, line in enumerate(lines[:-5]) if b'"type":"head"' in line)
    (cut / one.name).write_bytes(b"".join(lines[: earlier + 1]))
    code, out, _ = cli("audit", "verify", cut, *proof)
    assert code == 1 and "missing digest" in out, out


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
