"""``veronica-mw audit show`` (the run as a tree; colour only on a terminal) and ``audit calls``."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions

from ..observe.conftest import run_cli

CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=4, max_retries_total=0, timeout_ms=30_000)


def reply(text: str) -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 8},
    }


@pytest.fixture
def logged(tmp_path: Path) -> tuple[Path, ExecutionContext, ExecutionContext]:
    """A request-like run: an LLM call with a tool call nested in it, a child context, then a halt."""
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    with ExecutionContext(CONFIG, audit=log, attributes={"method": "POST", "path": "/agent"}) as ctx:

        def plan(**kwargs: Any) -> dict[str, Any]:
            ctx.call_tool(lambda: "42", options=WrapOptions(operation_name="search"))
            return reply("the plan")

        ctx.call_llm(plan, model="gpt-4o-mini", messages=[{"role": "user", "content": "plan it"}], top_p=0.5)
        with ExecutionContext(CONFIG, audit=log) as child:
            child.call_llm(
                lambda **kw: reply("sub answer"), messages=[{"role": "user", "content": "sub task"}]
            )
        with pytest.raises(ExecutionHalted):
            for _ in range(5):
                ctx.call_tool(lambda: None, options=WrapOptions(operation_name="loop"))
    log.close()
    return tmp_path, ctx, child


def test_show_draws_the_run_as_plain_text_into_a_pipe(
    logged: tuple[Path, ExecutionContext, ExecutionContext],
) -> None:
    directory, ctx, child = logged
    code, out, err = run_cli("audit", "show", directory)
    assert (code, err) == (0, "")
    assert "\x1b[" not in out and "└" not in out and "├" not in out
    lines = out.splitlines()
    assert lines[0].startswith(
        f"POST /agent [chain {ctx.chain_id}] limits $1/4 steps/0 retries/30000 ms used 4 steps"
    )
    assert lines[0].endswith("halted: step_limit")
    assert lines[1].startswith("  llm llm #1 gpt-4o-mini 20->8 tokens $0.0000") and " ok " in lines[1]
    assert lines[2].startswith("    tool search #2 $0.000000 ok")  # nested in the LLM call it ran in
    assert lines[3].startswith(f"  context [chain {child.chain_id}]") and lines[3].endswith(" ok")
    assert lines[4].startswith("    llm llm #1 gpt-4o-mini 20->8 tokens")
    # The child is nested in the run: its call was the run's 3rd step, so one loop call is left.
    assert lines[5].startswith("  tool loop #3")
    assert lines[6] == "  halt step_limit: max_steps=4 reached"
    assert len(lines) == 7


def read_pty(args: list[str], env: dict[str, str]) -> str:
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdout=slave, stderr=subprocess.STDOUT, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError("no output from the CLI on the terminal")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(60) == 0
    os.close(master)
    return b"".join(chunks).decode()


def test_show_uses_colour_and_a_tree_on_a_terminal(
    logged: tuple[Path, ExecutionContext, ExecutionContext],
) -> None:
    directory, ctx, _ = logged
    args = [sys.executable, "-m", "veronica_mw.cli", "audit", "show", str(directory)]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    out = read_pty(args, env)
    assert "\x1b[1m" in out and "\x1b[31;1mhalted: step_limit\x1b[0m" in out
    assert "├── " in out and "└── " in out and "│   └── " in out
    plain = read_pty(args, {**env, "NO_COLOR": "1"})
    assert "\x1b[" not in plain and "└── " in plain  # NO_COLOR: the tree stays, the colour goes


def test_show_one_chain_and_json(logged: tuple[Path, ExecutionContext, ExecutionContext]) -> None:
    directory, ctx, child = logged
    code, out, _ = run_cli("audit", "show", directory, "--chain", child.chain_id)
    assert code == 0 and out.splitlines()[0].startswith(f"context [chain {child.chain_id}]")
    code, out, _ = run_cli("audit", "show", directory, "--json")
    (run,) = json.loads(out)
    assert (run["chain"], run["label"], run["halt"]["reason"]) == (ctx.chain_id, "POST /agent", "step_limit")
    assert [c["name"] for c in run["calls"]] == ["llm", "loop"]  # the child took a step of the run
    assert run["calls"][0]["children"][0]["name"] == "search"
    assert run["children"][0]["chain"] == child.chain_id
    code, _, err = run_cli("audit", "show", directory, "--chain", "zzz")
    assert code == 2 and "no such context" in err


def test_calls_lists_the_llm_calls_replay_ready(
    logged: tuple[Path, ExecutionContext, ExecutionContext],
) -> None:
    directory, ctx, child = logged
    code, out, _ = run_cli("audit", "calls", directory, "--chain", ctx.chain_id, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["chain"] == ctx.chain_id
    first, sub = data["calls"]  # the child context's call belongs to the run too
    assert first["request"] == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "plan it"}],
        "parameters": {"top_p": 0.5},
    }
    assert (first["response_text"], first["tokens_in"], first["tokens_out"]) == ("the plan", 20, 8)
    assert first["cost_usd"] > 0 and first["duration_ms"] >= 0 and first["status"] == "ok"
    assert (sub["chain"], sub["response_text"]) == (child.chain_id, "sub answer")
    code, out, _ = run_cli("audit", "calls", directory, "--chain", ctx.chain_id)
    assert code == 0 and "2 LLM calls" in out.splitlines()[0]
    assert "   user: plan it" in out and "   response: the plan" in out


def test_bad_input_never_shows_a_traceback(tmp_path: Path) -> None:
    for args in (["audit", "show", str(tmp_path / "nope")], ["audit", "calls", str(tmp_path)], ["audit"]):
        done = subprocess.run(
            [sys.executable, "-m", "veronica_mw.cli", *args], capture_output=True, text=True
        )
        assert done.returncode == 2, args
        assert "Traceback" not in done.stdout + done.stderr and done.stderr.strip()


HOSTILE_URL = "".join(
    [
        "/x%1b[2J%1b]0;pwned%07%0a",
        "%E2%94%94%E2%94%80%E2%94%80 call 9 fake ok",
        "%E2%80%AEevil%E2%80%8B%7f%C2%9B",
    ]
)  # the same path, percent-encoded as it arrives on the wire
HOSTILE = "/x\x1b[2J\x1b]0;pwned\x07\n└── call 9 fake ok\u202eevil\u200b\x7f\x9b"


def test_show_calls_and_verify_escape_control_bidi_and_invisible_characters(tmp_path: Path) -> None:
    import asyncio

    import httpx

    from veronica_mw import get_current_execution_context
    from veronica_mw.web.asgi import VeronicaASGIMiddleware

    log_dir = tmp_path / "logs\x1b[31m\nok: fake"
    log_dir.mkdir()
    log = AuditLog(log_dir / "audit.jsonl", record_bodies=True)

    async def endpoint(scope: Any, receive: Any, send: Any) -> None:  # plain ASGI: any path at all
        ctx = get_current_execution_context()
        assert ctx is not None
        ctx.call_llm(
            lambda **kw: reply("answer\x1b[1A\u202e"), messages=[{"role": "user", "content": HOSTILE}]
        )
        body = json.dumps({"chain": ctx.chain_id}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    app = VeronicaASGIMiddleware(endpoint, config=CONFIG, audit=log)

    async def get() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            response = await client.get(HOSTILE_URL)
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

    chain = asyncio.run(get())["chain"]
    log.close()
    records = [json.loads(line) for p in log_dir.iterdir() for line in p.read_text().splitlines()]
    assert any((r.get("attributes") or {}).get("path") == HOSTILE for r in records)  # kept as data
    outputs = [
        run_cli("audit", "show", log_dir),
        run_cli("audit", "calls", log_dir, "--chain", chain),
    ]
    (path,) = log_dir.glob("audit.*.jsonl")
    path.write_bytes(path.read_bytes().replace(b"answer", b"ANSWER"))
    outputs.append(run_cli("audit", "verify", log_dir))
    for _code, out, err in outputs:
        text = out + err
        for bad in ("\x1b", "\x07", "\u202e", "\u200b", "\x7f", "\x9b"):
            assert bad not in text, (bad, text)
        assert text.count("\n") == len(text.splitlines())  # no line the log did not earn
    show, calls, check = (out for _, out, _ in outputs)
    assert "/x\\x1b[2J\\x1b]0;pwned\\x07\\x0a└── call 9 fake ok\\u202eevil\\u200b\\x7f\\x9b" in show
    assert "\\x1b[1A\\u202e" in calls and "└── call 9" not in show.replace("\\x0a└── call 9", "")
    assert outputs[2][0] == 1 and "logs\\x1b[31m\\x0aok: fake" in check
    assert not any(line.startswith("ok: fake") for line in check.splitlines())
    # --json stays plain JSON, the characters escaped by JSON itself.
    code, out, _ = run_cli("audit", "show", log_dir, "--json")
    assert code == 0 and "\x1b" not in out and json.loads(out)[0]["attributes"]["path"] == HOSTILE


def test_keygen_writes_a_private_key_only_its_owner_can_read(tmp_path: Path) -> None:
    code, out, err = run_cli("audit", "keygen", tmp_path / "signing")
    assert code == 0, err
    assert (tmp_path / "signing").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "signing.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert "0600" in out and "--public-key" in out
    code, _, err = run_cli("audit", "keygen", tmp_path / "signing")  # never overwritten
    assert code == 2 and "already exists" in err
    with pytest.raises(ValueError, match="signing_key"):
        AuditLog(tmp_path / "audit.jsonl", anchor=tmp_path / "anchors.jsonl")  # nothing to anchor
    with pytest.raises(ValueError, match="Ed25519|PEM"):
        AuditLog(tmp_path / "audit.jsonl", signing_key=tmp_path / "signing.pub")  # the public half
    code, _, err = run_cli("audit", "verify", tmp_path, "--anchor", tmp_path / "a.jsonl")
    assert code == 2 and "--public-key" in err
