"""Call bodies of OpenAI SDK requests in the audit log (``record_bodies=True``): the JSON body the
SDK sends (never its headers or key) and the response text, for plain, streamed, async and
Responses API calls; and a recorded run replayed against another model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext
from veronica_mw.cli.main import main as cli
from veronica_mw.observe._audit_read import iter_records

from ...support.fake_provider import REPLY, FakeProvider

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is an audit log?"},
]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)


def calls(log: AuditLog) -> list[dict[str, Any]]:
    assert log.close()
    return [r for r in iter_records(log.files) if r["type"] == "call"]


def raw(log: AuditLog) -> bytes:
    return b"".join(Path(f).read_bytes() for f in log.files)


def test_chat_request_and_response_are_recorded(client: openai.OpenAI, tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    with ExecutionContext(LIMITS, audit=log):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0.3, max_tokens=50)
    (call,) = calls(log)
    assert call["request"] == {
        "model": MODEL,
        "messages": MESSAGES,
        "parameters": {"temperature": 0.3, "max_tokens": 50},
    }
    assert call["response_text"] == REPLY and call["model"] == MODEL and call["tokens_out"] > 0
    assert b"Bearer" not in raw(log) and b'"test"' not in raw(log)  # the SDK's key and auth header


def test_streams_keep_the_text_they_carried(client: openai.OpenAI, tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    with ExecutionContext(LIMITS, audit=log):
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    (call,) = calls(log)
    assert call["response_text"] == text == REPLY
    assert call["request"]["parameters"] == {"stream": True, "stream_options": {"include_usage": True}}


def test_async_and_responses_api(aclient: openai.AsyncOpenAI, tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)

    async def run() -> None:
        async with ExecutionContext(LIMITS, audit=log):
            await aclient.chat.completions.create(model=MODEL, messages=MESSAGES)
            await aclient.responses.create(model=MODEL, input="Say hello.", instructions="Be terse.")
        await aclient.close()

    asyncio.run(run())
    chat, responses = calls(log)
    assert chat["request"]["messages"] == MESSAGES and chat["response_text"] == REPLY
    assert responses["request"]["messages"] is None
    assert responses["request"]["parameters"] == {"input": "Say hello.", "instructions": "Be terse."}
    assert responses["response_text"] == REPLY


def test_without_record_bodies_nothing_is_kept(client: openai.OpenAI, tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    with ExecutionContext(LIMITS, audit=log):
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    (call,) = calls(log)
    assert "request" not in call and b"audit log?" not in raw(log)


def test_an_adopted_step_holds_the_sent_body(client: openai.OpenAI, tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    with ExecutionContext(LIMITS, audit=log) as ctx:
        ctx.call_llm(client.chat.completions.create, model=MODEL, messages=MESSAGES, top_p=0.9)
    (call,) = calls(log)  # one step, however many layers saw it
    assert call["request"]["messages"] == MESSAGES and call["request"]["parameters"] == {"top_p": 0.9}
    assert call["response_text"] == REPLY


def test_a_recorded_sdk_run_replays_against_another_model(
    client: openai.OpenAI, server: FakeProvider, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    with ExecutionContext(LIMITS, audit=log) as ctx:
        for question in ("first question", "second question"):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": question}])
    log.close()
    before = len(server.received)
    code = cli(
        [
            "replay",
            str(tmp_path),
            "--chain",
            ctx.chain_id,
            "--model",
            MODEL,
            "--base-url",
            server.openai_url,
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["complete"]
    sent = server.received[before:]
    assert [r.body["model"] for r in sent] == [MODEL, MODEL]
    assert [r.body["messages"] for r in sent] == [
        [{"role": "user", "content": "first question"}],
        [{"role": "user", "content": "second question"}],
    ]
    assert [row["identical"] for row in report["rows"]] == [True, True]  # the fake always says REPLY
    assert [row["original"]["model"] for row in report["rows"]] == ["gpt-4o", "gpt-4o"]
