"""The escalation's events reach the audit log through the kernel's ordinary event path."""

from __future__ import annotations

from pathlib import Path

from veronica_mw import Approve, AskForMore, AuditLog, ExecutionConfig, ExecutionContext, Reject
from veronica_mw.observe._audit_read import iter_records


def test_granted_and_rejected_escalations_are_audit_records(tmp_path: Path) -> None:
    answers = [Approve(approver="alice"), Reject("enough", approver="bob")]
    log = AuditLog(tmp_path / "audit.jsonl")
    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0), audit=log,
        on_limit=AskForMore(lambda request: answers.pop(0), add_steps=1),
    )  # fmt: skip
    ran = 0
    try:
        for _ in range(5):
            ctx.call_tool(lambda: None)
            ran += 1
    except Exception as exc:
        assert type(exc).__name__ == "ExecutionHalted"
    log.close()
    assert ran == 2 and answers == []
    events = [r for r in iter_records([tmp_path / "audit.jsonl"]) if r.get("type") == "event"]
    kinds = [r["kind"] for r in events if r["kind"].startswith("escalation")]
    assert kinds == [
        "escalation_requested",
        "escalation_granted",
        "escalation_requested",
        "escalation_rejected",
    ]
    granted = next(r for r in events if r["kind"] == "escalation_granted")
    assert granted["chain"] == ctx.chain_id and granted["data"]["add_steps"] == 1
    assert granted["data"]["max_steps"] == 2 and "alice" in granted["detail"]
    rejected = next(r for r in events if r["kind"] == "escalation_rejected")
    assert "rejected by bob: enough" in rejected["detail"]
