"""``veronica-mw replay``: recorded requests go to an OpenAI-compatible server with the new model, the
report compares both sides, and the ceiling stops a replay before the call that would exceed it."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext
from veronica_mw.kernel.pricing import TokenUsage, price_usage
from veronica_mw.observe._audit_read import iter_records
from veronica_mw.observe.audit_runs import Call
from veronica_mw.observe.audit_verify import verify
from veronica_mw.observe.replay import replay_request

from ..observe.conftest import run_cli
from .fake_chat import FakeChatServer, completion, fake_chat_server

QUESTIONS = ["what is two plus two", "name a prime", "say hello"]


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with fake_chat_server() as fake:
        yield fake


def post(url: str, **body: Any) -> dict[str, Any]:
    """What the app's model call does: one chat-completions request (the real SDK would send the key
    as a header; here it arrives as a keyword the audit log must not keep)."""
    body.pop("api_key", None)
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        reply: dict[str, Any] = json.loads(response.read())
        return reply


def record_run(directory: Path, server: FakeChatServer, *, bodies: bool = True) -> str:
    """An agent run of three gpt-4o calls against the fake server; returns its chain id."""
    log = AuditLog(directory / "audit.jsonl", record_bodies=bodies)
    with ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0), audit=log
    ) as ctx:
        for question in QUESTIONS:
            ctx.call_llm(
                post,
                server.base_url + "/chat/completions",
                model="gpt-4o",
                messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": question}],
                temperature=0.3,
                max_tokens=64,
                stream=False,
                api_key="sk-never-recorded",
            )
    assert log.close()
    server.requests.clear()
    server.headers_seen.clear()
    return ctx.chain_id


def cost(model: str, question: str) -> float:
    reply = completion(
        model, [{"role": "system", "content": "be brief"}, {"role": "user", "content": question}]
    )
    usage = reply["usage"]
    return price_usage(TokenUsage(usage["prompt_tokens"], usage["completion_tokens"]), model)


def replay(directory: Path, chain: str, server: FakeChatServer, *args: str) -> tuple[int, Any, str]:
    code, out, err = run_cli(
        "replay", directory, "--chain", chain, "--base-url", server.base_url, "--json", *args
    )
    assert "Traceback" not in out + err
    return code, json.loads(out) if out.strip() else None, err


def test_replay_sends_the_recorded_requests_with_the_new_model(
    tmp_path: Path, server: FakeChatServer
) -> None:
    chain = record_run(tmp_path, server)
    code, report, _ = replay(tmp_path, chain, server, "--model", "gpt-4o-mini")
    assert code == 0
    assert server.requests == [
        {
            "model": "gpt-4o-mini",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": q}],
            "temperature": 0.3,
            "max_tokens": 64,
            "stream": False,
        }
        for q in QUESTIONS
    ]
    assert all("authorization" not in h for h in server.headers_seen)  # no key variable set: none sent
    assert (report["complete"], report["halted"], report["chain"]) == (True, None, chain)
    for row, question in zip(report["rows"], QUESTIONS, strict=True):
        assert (row["status"], row["identical"]) == ("ok", True)
        assert row["original"]["model"] == "gpt-4o" and row["replay"]["model"] == "gpt-4o-mini"
        assert row["original"]["text"] == row["replay"]["text"] == f"echo: {question}"
        assert row["original"]["cost_usd"] == pytest.approx(cost("gpt-4o", question))
        assert row["replay"]["cost_usd"] == pytest.approx(cost("gpt-4o-mini", question))
        assert row["replay"]["tokens_in"] == row["original"]["tokens_in"] > 0
    totals = report["totals"]
    assert (totals["calls"], totals["replayed"], totals["identical"]) == (3, 3, 3)
    assert totals["replay"]["cost_usd"] == pytest.approx(sum(cost("gpt-4o-mini", q) for q in QUESTIONS))
    assert totals["replay"]["cost_usd"] < totals["original"]["cost_usd"]


def test_a_different_answer_and_an_unpriced_local_model(
    tmp_path: Path, server: FakeChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = record_run(tmp_path, server)
    monkeypatch.setenv("LOCAL_KEY", "local-secret")
    code, out, _ = run_cli(
        "replay", tmp_path, "--chain", chain, "--model", "llama-shout",
        "--base-url", server.base_url, "--api-key-env", "LOCAL_KEY",
    )  # fmt: skip
    assert code == 0
    assert [h["authorization"] for h in server.headers_seen] == ["Bearer local-secret"] * 3
    lines = out.splitlines()
    assert "original model" in lines[0] and "replay model" in lines[0]
    rows = [line for line in lines if line.lstrip()[:1].isdigit()]
    assert len(rows) == 3 and all("gpt-4o" in r and "llama-shout" in r and r.endswith("  no") for r in rows)
    assert lines[-1].endswith("0/3 identical")  # a model with no known price replays at $0


def test_the_ceiling_stops_the_replay_before_the_call_that_would_exceed_it(
    tmp_path: Path, server: FakeChatServer
) -> None:
    chain = record_run(tmp_path, server)
    costs = [cost("gpt-4o-mini", q) for q in QUESTIONS]
    ceiling = costs[0] + costs[1] + costs[2] / 2
    code, report, _ = replay(
        tmp_path, chain, server, "--model", "gpt-4o-mini", "--max-cost-usd", repr(ceiling)
    )
    assert code == 1
    assert len(server.requests) == 2  # the third call was refused before it was sent
    assert [r["status"] for r in report["rows"]] == ["ok", "ok", "halted"]
    assert report["halted"] == "budget_exceeded" and report["complete"] is False
    assert report["totals"]["replay"]["cost_usd"] == pytest.approx(costs[0] + costs[1])
    assert report["totals"]["replay"]["cost_usd"] <= ceiling
    code, report, _ = replay(tmp_path, chain, server, "--model", "gpt-4o-mini", "--max-cost-usd", "0")
    assert code == 1 and len(server.requests) == 2 and report["rows"][0]["status"] == "halted"
    assert [r["status"] for r in report["rows"][1:]] == ["not run", "not run"]


def test_failures_are_rows_and_bad_input_exits_2(tmp_path: Path, server: FakeChatServer) -> None:
    chain = record_run(tmp_path, server)
    code, report, _ = replay(tmp_path, chain, server, "--model", "fail-model")
    assert code == 1 and [r["status"] for r in report["rows"]] == ["error"] * 3
    assert "HTTP 500" in report["rows"][0]["detail"] and "upstream exploded" in report["rows"][0]["detail"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"  # nothing listens there
    code, out, err = run_cli(
        "replay", tmp_path, "--chain", chain, "--model", "m", "--base-url", closed, "--json"
    )
    assert code == 1 and "cannot reach" in json.loads(out)["rows"][0]["detail"]
    (tmp_path / "plain").mkdir()
    plain = record_run(tmp_path / "plain", server, bodies=False)
    for args in (
        ("replay", tmp_path, "--chain", "no-such-chain", "--model", "m"),
        ("replay", tmp_path / "plain", "--chain", plain, "--model", "m"),  # no bodies recorded
        ("replay", tmp_path / "missing", "--chain", chain, "--model", "m"),
        ("replay", tmp_path, "--chain", chain, "--model", "m", "--base-url", "ftp://x"),
        ("replay", tmp_path, "--chain", chain, "--model", "m", "--max-cost-usd", "-1"),
        ("replay", tmp_path, "--chain", chain),
    ):
        code, out, err = run_cli(*args)
        assert code == 2 and "Traceback" not in out + err and err.strip(), args
    assert "record_bodies" in run_cli("replay", tmp_path / "plain", "--chain", plain, "--model", "m")[2]


def test_the_replay_can_be_audited_itself(tmp_path: Path, server: FakeChatServer) -> None:
    chain = record_run(tmp_path, server)
    replay_log = tmp_path / "replay" / "audit.jsonl"
    replay_log.parent.mkdir()
    code, _, _ = replay(tmp_path, chain, server, "--model", "gpt-4o-mini", "--audit", str(replay_log))
    assert code == 0
    assert verify([replay_log.parent]).ok
    calls = [r for r in iter_records([replay_log.parent]) if r["type"] == "call"]
    assert [c["model"] for c in calls] == ["gpt-4o-mini"] * 3
    assert [c["request"]["messages"][-1]["content"] for c in calls] == QUESTIONS
    assert [c["response_text"] for c in calls] == [f"echo: {q}" for q in QUESTIONS]


def test_requests_of_other_apis_are_replayed_as_chat_completions() -> None:
    params = {"input": "hi", "instructions": "terse", "stream": True}
    responses = Call(
        "c",
        1,
        None,
        "llm",
        "openai.responses",
        request={"model": "gpt-4o", "messages": None, "parameters": params},
    )
    assert replay_request(responses, "m") == {
        "model": "m",
        "messages": [{"role": "system", "content": "terse"}, {"role": "user", "content": "hi"}],
        "stream": False,
    }
    anthropic = Call("c", 2, None, "llm", "anthropic.messages", request={
        "model": "claude", "messages": [{"role": "user", "content": "q"}],
        "parameters": {"system": "be kind", "max_tokens": 10},
    })  # fmt: skip
    assert replay_request(anthropic, "m") == {
        "model": "m",
        "messages": [{"role": "system", "content": "be kind"}, {"role": "user", "content": "q"}],
        "max_tokens": 10,
        "stream": False,
    }
    assert (
        replay_request(Call("c", 3, None, "llm", "x", request={"messages": None, "parameters": {}}), "m")
        is None
    )


def _forge(directory: Path, change: Any) -> None:
    """Rewrite the (plain SHA-256) log consistently, as anyone could: ``change`` edits each record."""
    from veronica_mw.observe._audit_chain import ZERO, Digester, seal, unseal

    for path in directory.glob("audit.*.jsonl"):
        prev, out = ZERO, bytearray()
        for seq, line in enumerate(path.read_bytes().splitlines()):
            parsed = unseal(line)
            assert parsed is not None
            record = change(parsed[0])
            record["seq"], record["prev"] = seq, prev
            data, prev = seal(record, Digester(None))
            out += data
        path.write_bytes(bytes(out))


def test_replay_verifies_first_and_refuses_a_tampered_log(tmp_path: Path, server: FakeChatServer) -> None:
    chain = record_run(tmp_path, server)
    (path,) = tmp_path.glob("audit.*.jsonl")
    path.write_bytes(path.read_bytes().replace(b"name a prime", b"name a pr1me", 1))
    code, report, err = replay(tmp_path, chain, server, "--model", "gpt-4o-mini")
    assert code == 2 and report is None and "does not verify" in err and "modified" in err
    assert server.requests == []  # nothing was sent
    code, report, _ = replay(tmp_path, chain, server, "--model", "gpt-4o-mini", "--no-verify")
    assert code == 0 and len(server.requests) == 3


def test_replay_never_sends_credentials_found_in_the_log(tmp_path: Path, server: FakeChatServer) -> None:
    chain = record_run(tmp_path, server)
    planted = {
        "api_key": "sk-proj-planted0123456789abcdef",
        "extra_headers": {"Authorization": "Bearer planted-token-123456"},
        "user": "AKIAIOSFODNN7EXAMPLE",
        "aws_secret_access_key": "planted-aws-secret",
        "metadata": {"note": "[REDACTED]"},
    }

    def plant(record: dict[str, Any]) -> dict[str, Any]:
        if record.get("type") == "call" and record.get("request"):
            record["request"]["parameters"].update(planted)
        return record

    _forge(tmp_path, plant)
    code, _, err = replay(tmp_path, chain, server, "--model", "gpt-4o-mini")
    assert code == 0, err  # a plain log rewritten consistently verifies: only a key or signature would tell
    assert len(server.requests) == 3
    sent = json.dumps(server.requests) + json.dumps(server.headers_seen)
    assert "planted" not in sent and "AKIA" not in sent and "REDACTED" not in sent
    assert all(r["temperature"] == 0.3 and r["max_tokens"] == 64 for r in server.requests)  # the rest is kept
