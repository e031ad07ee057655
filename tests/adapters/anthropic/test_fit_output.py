"""FitOutputToBudget through the real Anthropic SDK: ``max_tokens`` lowered to what is left."""

from __future__ import annotations

from typing import Any

import anthropic

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, FitOutputToBudget, PolicyPipeline
from veronica_mw.adapters._provider_estimate import text_tokens, worst_case

from ...support.fake_bare import BareProvider

MODEL = "claude-haiku-4-5"
MESSAGES: list[Any] = [{"role": "user", "content": "Write a long story."}]


def test_max_tokens_is_lowered_to_what_the_budget_affords() -> None:
    full = worst_case(MODEL, "anthropic", text_tokens(MESSAGES), 8000)
    assert full is not None
    ceiling = full / 4
    veronica_mw.instrument("anthropic")
    try:
        with BareProvider(usage=True) as bare, anthropic.Anthropic(base_url=bare.url, api_key="t") as client:
            config = ExecutionConfig(max_cost_usd=ceiling, max_steps=5, max_retries_total=0)
            with ExecutionContext(config, PolicyPipeline([FitOutputToBudget()])) as ctx:
                message = client.messages.create(model=MODEL, max_tokens=8000, messages=MESSAGES)
            sent = bare.bodies()[0]["max_tokens"]
    finally:
        veronica_mw.uninstrument()
    assert message.content and 256 <= sent < 2000
    reserved = worst_case(MODEL, "anthropic", text_tokens(MESSAGES), sent)
    assert reserved is not None and reserved <= ceiling
    over = worst_case(MODEL, "anthropic", text_tokens(MESSAGES), sent + 2)
    assert over is not None and over > ceiling  # the most that fits (rounded down), not less
    assert [e.data["fitted"] for e in ctx.get_events() if e.kind == "modified"] == [sent]
