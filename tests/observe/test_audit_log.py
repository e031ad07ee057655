"""AuditLog as a kernel observer: one record per event, in order, with the limits, usage and (only
when asked) the call bodies -- never credentials."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from veronica_mw import (
    Approve,
    AuditLog,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    Forbidden,
    PolicyPipeline,
    Reject,
    RequireApproval,
    WrapOptions,
)
from veronica_mw.kernel.pricing import TokenUsage, price_usage
from veronica_mw.observe.audit_verify import verify

from .conftest import read_records, run_cli

CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=1, timeout_ms=60_000)


def chat_reply(
    text: str, model: str = "gpt-4o-mini", prompt: int = 12, completion: int = 5
) -> dict[str, Any]:
    """An OpenAI chat-completions response body, as a dict."""
    return {
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


def boom() -> None:
    raise ValueError("tool failed")


def test_a_run_is_recorded_in_order(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    with ExecutionContext(CONFIG, audit=log, attributes={"method": "POST", "path": "/chat"}) as ctx:
        ctx.call_llm(lambda: chat_reply("hi"), options=WrapOptions(operation_name="chat"))
        with pytest.raises(ValueError):
            ctx.call_tool(boom, options=WrapOptions(operation_name="search"))
        ctx.call_tool(lambda: 3, options=WrapOptions(operation_name="calc"))
        with pytest.raises(ExecutionHalted):
            ctx.call_tool(lambda: 4, options=WrapOptions(operation_name="never"))
    assert log.close()
    records = read_records(tmp_path)
    assert [r["type"] for r in records] == [
        "log",
        "context_started",
        "call_admitted", "call",
        "call_admitted", "call",
        "call_admitted", "call",
        "halt",
        "context_ended",
        "head",
    ]  # fmt: skip
    assert [r["seq"] for r in records] == list(range(len(records)))
    started = records[1]
    assert started["chain"] == ctx.chain_id and started["parent_chain"] is None
    assert started["limits"] == CONFIG.as_dict()
    canonical = json.dumps(CONFIG.as_dict(), sort_keys=True, separators=(",", ":")).encode()
    assert started["config_digest"] == hashlib.sha256(canonical).hexdigest()
    assert started["attributes"] == {"method": "POST", "path": "/chat"}
    chat, search, calc = (r for r in records if r["type"] == "call")
    expected_cost = price_usage(TokenUsage(12, 5), "gpt-4o-mini")
    assert (chat["kind"], chat["name"], chat["model"], chat["status"]) == ("llm", "chat", "gpt-4o-mini", "ok")
    assert (chat["tokens_in"], chat["tokens_out"]) == (12, 5)
    assert chat["cost_usd"] == pytest.approx(expected_cost) and chat["cost_usd"] > 0
    assert (search["status"], search["error"], search["kind"]) == ("error", "ValueError", "tool")
    assert calc["status"] == "ok" and "error" not in calc and "request" not in calc  # no bodies by default
    halt = records[8]
    assert (halt["reason"], halt["detail"]) == ("step_limit", "max_steps=3 reached")
    assert halt["usage"]["steps"] == 3 and halt["usage"]["retries"] == 1
    ended = records[9]
    assert ended["halted"] == "step_limit"
    assert ended["usage"]["cost_usd"] == pytest.approx(expected_cost)
    report = verify([tmp_path])
    assert report.ok and report.records == len(records) and len(report.chains) == 1


def test_bodies_are_a_copy_without_credentials(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]

    def create(**kwargs: Any) -> dict[str, Any]:
        return chat_reply("4")

    with ExecutionContext(CONFIG, audit=log) as ctx:
        ctx.call_llm(
            create,
            model="gpt-4o-mini",
            messages=messages,
            temperature=0.2,
            api_key="sk-live-SECRET",
            extra_headers={"Authorization": "Bearer TOKEN-1"},
            extra_body={"metadata": {"x-api-key": "KEY-2", "user": "u1"}},
        )
        messages.append({"role": "assistant", "content": "4"})  # agents extend the list in place
        ctx.call_llm(lambda prompt: "plain answer", "plain prompt")
        ctx.call_tool(lambda: "tool result")
    log.close()
    raw = b"".join(Path(f).read_bytes() for f in log.files)
    for secret in (b"sk-live-SECRET", b"TOKEN-1", b"KEY-2", b"Authorization", b"api_key"):
        assert secret not in raw
    first, second, tool = (r for r in read_records(tmp_path) if r["type"] == "call")
    assert first["request"] == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}],
        "parameters": {"temperature": 0.2, "extra_body": {"metadata": {"user": "u1"}}},
    }
    assert first["response_text"] == "4"
    assert second["request"]["prompt"] == "plain prompt" and second["response_text"] == "plain answer"
    assert second["model"] is None
    assert "request" not in tool  # bodies are kept for LLM calls only


@pytest.mark.anyio
async def test_async_calls_record_bodies(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)

    async def create(**kwargs: Any) -> dict[str, Any]:
        return chat_reply(f"echo {kwargs['messages'][-1]['content']}")

    async with ExecutionContext(CONFIG, audit=log) as ctx:
        await ctx.acall_llm(create, model="gpt-4o-mini", messages=[{"role": "user", "content": "ping"}])
    log.close()
    (call,) = (r for r in read_records(tmp_path) if r["type"] == "call")
    assert call["request"]["messages"] == [{"role": "user", "content": "ping"}]
    assert call["response_text"] == "echo ping"


def test_no_observer_wants_bodies_so_none_are_kept(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    with ExecutionContext(CONFIG, audit=log) as ctx:
        node = ctx.begin_call("llm")
        assert node.io is None and not node.wants_io
        node.record_io(request={"messages": []}, response_text="x")  # a no-op
        assert node.io is None
        node.commit()
    with ExecutionContext(CONFIG, audit=AuditLog(tmp_path / "b.jsonl", record_bodies=True)) as ctx:
        node = ctx.begin_call("llm")
        assert node.wants_io
        node.record_io(
            request={"messages": [{"role": "user", "content": "q"}], "api_key": "k"}, response_text="a"
        )
        assert node.io == {"request": {"messages": [{"role": "user", "content": "q"}]}, "response_text": "a"}
        node.commit()


def test_events_and_nested_contexts(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    with ExecutionContext(CONFIG, audit=log) as outer:
        outer.call_llm(lambda: chat_reply("x", model="no-such-model-xyz"))
        with ExecutionContext(CONFIG, audit=log) as inner:
            inner.call_tool(lambda: 1)
    log.close()
    records = read_records(tmp_path)
    (event,) = (r for r in records if r["type"] == "event")
    assert event["chain"] == outer.chain_id and event["kind"] == "unpriced"
    assert event["data"] == {"model": "no-such-model-xyz"}
    starts = {r["chain"]: r for r in records if r["type"] == "context_started"}
    assert starts[inner.chain_id]["parent_chain"] == outer.chain_id
    assert starts[outer.chain_id]["parent_chain"] is None


def test_hmac_chain_needs_its_key(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "audit.jsonl", key=b"k3y") as log, ExecutionContext(CONFIG, audit=log) as ctx:
        ctx.call_tool(lambda: 1)
    assert verify([tmp_path], key=b"k3y").ok
    wrong = verify([tmp_path], key=b"other")
    assert {p.what for p in wrong.problems} == {"bad digest"}
    assert AuditLog(tmp_path / "x.jsonl").record_bodies is False


def test_heads_every_n_records_and_after_a_quiet_spell(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", head_every=4, head_interval_s=0.05)
    with ExecutionContext(ExecutionConfig(1.0, 10, 0), audit=log) as ctx:
        for _ in range(6):  # 14 records: heads after the 4th, 8th and 12th, then 2 unheaded
            ctx.call_tool(lambda: 1)
    assert log.flush()
    deadline = time.monotonic() + 30
    while read_records(tmp_path)[-1]["type"] != "head":  # the idle head, without close()
        assert time.monotonic() < deadline, "no idle head record"
        time.sleep(0.02)
    heads = [r for r in read_records(tmp_path) if r["type"] == "head"]
    assert [h["reason"] for h in heads] == ["count", "count", "count", "idle"]
    assert all(h["records"] == h["seq"] for h in heads)
    report = verify([tmp_path])
    assert report.ok and log.head == report.head
    log.close()


def test_rotation_links_each_file_to_the_previous_head(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=4096)
    with ExecutionContext(ExecutionConfig(1.0, 200, 0), audit=log) as ctx:
        for _ in range(60):
            ctx.call_tool(lambda: 1, options=WrapOptions(operation_name="lookup"))
    log.close()
    files = [Path(f) for f in log.files]
    assert len(files) >= 3
    pid = os.getpid()
    assert files[0].name.endswith(f".{pid}.jsonl") and files[1].name.endswith(f".{pid}.1.jsonl")
    previous_head = "0" * 64
    for index, file in enumerate(files):
        lines = [json.loads(line) for line in file.read_text().splitlines()]
        assert (lines[0]["type"], lines[0]["file"], lines[0]["prev"]) == ("log", index, previous_head)
        assert lines[-1]["type"] == "head"
        assert file.stat().st_size < 4096 + 400  # the size limit, plus the closing head record
        if index < len(files) - 1:
            assert lines[-1]["next"] == files[index + 1].name
        previous_head = lines[-1]["digest"]
    assert verify([tmp_path]).ok
    middle = files[1].read_bytes()
    files[1].unlink()
    problems = [str(p) for p in verify([tmp_path]).problems]
    assert f"{files[0]}:{len(files[0].read_text().splitlines())}: missing record" in problems[0]
    assert any(p.startswith(f"{files[2]}:1: missing record") for p in problems)
    files[1].write_bytes(middle)
    files[-1].unlink()  # the newest file: the previous one's head names it
    (problem,) = verify([tmp_path]).problems
    assert (problem.file, problem.what) == (str(files[-2]), "missing record") and files[
        -1
    ].name in problem.detail


def test_invalid_arguments() -> None:
    with pytest.raises(TypeError):
        AuditLog(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        AuditLog("a.jsonl", key="text")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        AuditLog("a.jsonl", key=b"")
    bad: dict[str, Any]
    for bad in ({"max_bytes": 10}, {"head_every": 0}, {"queue_size": True}, {"head_interval_s": 0}):
        with pytest.raises(ValueError):
            AuditLog("a.jsonl", **bad)
    with pytest.raises(TypeError, match="AuditLog"):
        ExecutionContext(CONFIG, audit=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ExecutionContext(CONFIG, attributes=["method"])  # type: ignore[arg-type]


def test_the_log_is_closed_at_interpreter_exit(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext
        log = AuditLog({str(tmp_path / "audit.jsonl")!r})
        with ExecutionContext(ExecutionConfig(1.0, 5, 0), audit=log) as ctx:
            ctx.call_tool(lambda: 1)
        print(log.flush())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = read_records(tmp_path)
    assert records[-1]["type"] == "head" and records[-1]["reason"] == "close"
    assert verify([tmp_path]).ok


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_worker_writes_its_own_chain(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    with ExecutionContext(CONFIG, audit=log) as ctx:
        ctx.call_tool(lambda: "parent")  # the parent's writer thread is running when it forks
    assert log.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork of a threaded process
        pid = os.fork()
    if pid == 0:  # the child (a gunicorn --preload worker): its own files, its own writer thread
        code = 1
        try:
            with ExecutionContext(CONFIG, audit=log) as child:
                child.call_tool(lambda: "child")
            code = 0 if log.close() else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120  # a hung child fails the test instead of hanging it
    while (status := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status[1]) == 0
    log.close()
    report = verify([tmp_path])
    assert report.ok and len(report.chains) == 2
    names = sorted(Path(f).name for c in report.chains for f in c.files)
    assert any(f".{pid}." in name for name in names) and any(f".{os.getpid()}." in name for name in names)
    calls = [r for r in read_records(tmp_path) if r["type"] == "call"]
    assert len(calls) == 2  # the parent's queued records were not written twice


def test_check_and_approval_decisions_are_events(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    approvals = RequireApproval(
        "delete_*", lambda request: Approve() if request.tool == "delete_draft" else Reject("not that one")
    )
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=2)
    ctx = ExecutionContext(
        config, PolicyPipeline([approvals]), audit=log, checks=[(Forbidden(r"sk-\w+"), "warn")]
    )
    with ctx:
        ctx.call_llm(lambda: "the key is sk-abc123", options=WrapOptions(operation_name="chat"))
        ctx.call_tool(lambda: "deleted", options=WrapOptions(operation_name="delete_draft"))
        with pytest.raises(ExecutionHalted):
            ctx.call_tool(lambda: "gone", options=WrapOptions(operation_name="delete_all"))
    log.close()
    records = read_records(tmp_path)
    events = [(r["kind"], r["detail"]) for r in records if r["type"] == "event"]
    kinds = [kind for kind, _ in events]
    assert "check_failed" in kinds and kinds.count("approval_requested") == 2
    assert "approval_granted" in kinds
    assert "approval_rejected" in kinds
    (halt,) = (r for r in records if r["type"] == "halt")
    assert halt["reason"] == "policy_denied" and "not that one" in halt["detail"]
    assert verify([tmp_path]).ok


def test_children_write_to_their_parents_log(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    with ExecutionContext(CONFIG, audit=log, name="agent") as root:
        with root.child("researcher", max_steps=2) as researcher:  # no audit= of its own
            researcher.call_tool(lambda: 1, options=WrapOptions(operation_name="search"))
            with ExecutionContext(CONFIG) as grandchild:  # nested by being entered inside
                grandchild.call_tool(lambda: 2)
        with ExecutionContext(CONFIG, parent=None) as detached:  # not nested: not this log's
            detached.call_tool(lambda: 3)
    log.close()
    records = read_records(tmp_path)
    starts = {r["chain"]: r for r in records if r["type"] == "context_started"}
    assert set(starts) == {root.chain_id, researcher.chain_id, grandchild.chain_id}
    assert starts[root.chain_id]["name"] == "agent" and starts[root.chain_id]["parent_chain"] is None
    assert (starts[researcher.chain_id]["name"], starts[researcher.chain_id]["parent_chain"]) == (
        "researcher",
        root.chain_id,
    )
    assert starts[researcher.chain_id]["limits"]["max_steps"] == 2
    assert starts[grandchild.chain_id]["parent_chain"] == researcher.chain_id
    calls = {r["chain"]: r["name"] for r in records if r["type"] == "call"}
    assert calls == {researcher.chain_id: "search", grandchild.chain_id: "tool"}
    code, out, _ = run_cli("audit", "show", tmp_path)
    lines = out.splitlines()
    assert lines[0].startswith(f"agent [chain {root.chain_id}]")
    assert lines[1].startswith(f"  researcher [chain {researcher.chain_id}]")
    assert lines[3].startswith(f"    context [chain {grandchild.chain_id}]")


def test_who_decided_and_the_limits_a_halt_was_measured_against(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0)
    decision = {
        "approver": "alice@example.com",
        "args_sha256": "a" * 64,
        "edited_args_sha256": "b" * 64,
        "decided_at": 1796160000.5,
    }
    with ExecutionContext(config, audit=log) as ctx:
        ctx.add_event(
            "approval_granted", "delete_draft: ok", request_id="r1", tool="delete_draft", **decision
        )
        ctx.add_event("approval_requested", "delete_draft", request_id="r1", tool="delete_draft")
        ctx.call_tool(lambda: "done", options=WrapOptions(operation_name="delete_draft"))
        with pytest.raises(ExecutionHalted):
            ctx.call_tool(lambda: "again", options=WrapOptions(operation_name="delete_draft"))
    log.close()
    records = read_records(tmp_path)
    granted, requested = (r for r in records if r["type"] == "event")
    assert granted["decision"] == decision and "decision" not in requested
    (halt,) = (r for r in records if r["type"] == "halt")
    assert halt["limits"] == config.as_dict() and halt["usage"]["steps"] == 1
