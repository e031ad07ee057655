"""Message contents on model-call spans: never without the GenAI opt-in, even when another
observer (the audit log with bodies) has the kernel keep them; with it, in the conventions' shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext, WrapOptions
from veronica_mw.observe import otel as veronica_otel

from .otel_support import Telemetry, attrs, otel

__all__ = ["otel"]

LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)
GPT = WrapOptions(model="gpt-4o")
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "capital of France?"}]


def chat(messages: list[dict[str, Any]], model: str, temperature: float = 0.0) -> dict[str, Any]:
    """An OpenAI-style chat completion."""
    return {
        "model": model,
        "choices": [{"message": {"role": "assistant", "content": "Paris."}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 2},
    }


def run() -> None:
    with ExecutionContext(LIMITS) as ctx:
        ctx.call_llm(chat, messages=MESSAGES, model="gpt-4o", temperature=0.2, options=GPT)
        ctx.call_tool(len, "secret tool input", options=WrapOptions(operation_name="count"))


def test_no_contents_without_the_opt_in_even_when_bodies_are_kept(otel: Telemetry, tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    try:
        with ExecutionContext(LIMITS, observers=[audit]) as ctx:  # the kernel keeps bodies for it
            ctx.call_llm(chat, messages=MESSAGES, model="gpt-4o", options=GPT)
    finally:
        audit.close()
    recorded = json.dumps([attrs(s) for s in otel.spans()])
    assert "capital of France" not in recorded and "Paris" not in recorded
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output")) for s in otel.spans() for k in attrs(s))


@pytest.mark.parametrize("value", ["true", "SPAN_ONLY", "span_and_event"])
def test_the_opt_in_puts_request_messages_and_response_text_on_the_span(
    otel: Telemetry, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
    veronica_otel.enable(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    run()
    span = otel.span("chat gpt-4o")
    assert json.loads(attrs(span)["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "capital of France?"}]},
    ]
    assert json.loads(attrs(span)["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Paris."}]}
    ]
    assert "gen_ai.input.messages" not in attrs(otel.span("execute_tool count"))  # model calls only


@pytest.mark.parametrize("value", ["false", "NO_CONTENT", "EVENT_ONLY", "maybe"])
def test_other_values_record_nothing(otel: Telemetry, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
    veronica_otel.enable(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    run()
    assert "gen_ai.input.messages" not in attrs(otel.span("chat gpt-4o"))


def test_enable_can_opt_in_explicitly(otel: Telemetry) -> None:
    veronica_otel.enable(
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, capture_message_content=True
    )
    with ExecutionContext(LIMITS) as ctx:
        ctx.call_llm(lambda prompt: "a reply", "a plain prompt", options=GPT)
    span = otel.span("chat gpt-4o")
    assert json.loads(attrs(span)["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "a plain prompt"}]}
    ]
    assert "a reply" in attrs(span)["gen_ai.output.messages"]
