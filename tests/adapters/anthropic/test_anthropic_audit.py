"""Call bodies of Anthropic SDK requests in the audit log: the messages, system prompt and
parameters sent, and the text answered (also streamed); never the API key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext
from veronica_mw.observe._audit_read import iter_records

from ...support.fake_provider import REPLY

MODEL = "claude-3-5-haiku-latest"
MESSAGES: list[Any] = [{"role": "user", "content": "What is an audit log?"}]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)


def test_messages_request_and_text_are_recorded(client: anthropic.Anthropic, tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    with ExecutionContext(LIMITS, audit=log):
        client.messages.create(model=MODEL, max_tokens=64, system="Be brief.", messages=MESSAGES)
        with client.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
            streamed = "".join(stream.text_stream)
    assert log.close()
    plain, live = (r for r in iter_records(log.files) if r["type"] == "call")
    assert plain["request"] == {
        "model": MODEL,
        "messages": MESSAGES,
        "parameters": {"max_tokens": 64, "system": "Be brief."},
    }
    assert plain["response_text"] == REPLY
    assert live["response_text"] == streamed == REPLY and live["request"]["parameters"]["stream"] is True
    assert b"x-api-key" not in b"".join(Path(f).read_bytes() for f in log.files).lower()
