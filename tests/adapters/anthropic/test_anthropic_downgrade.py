"""DowngradeAt with the Anthropic SDK: the request reaches the (fake) server with the fallback model."""

from __future__ import annotations

import anthropic
import pytest

from veronica_mw import DowngradeAt, ExecutionConfig, ExecutionContext, PolicyPipeline

from ...support.fake_provider import FakeProvider, cost_of


def test_messages_are_sent_with_the_fallback(server: FakeProvider, client: anthropic.Anthropic) -> None:
    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0),
        PolicyPipeline([DowngradeAt(0.0, "claude-3-5-haiku-latest")]),
    )
    with ctx:
        message = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        )
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            stream.until_done()
    assert message.model == "claude-3-5-haiku-latest"
    assert [r.body["model"] for r in server.received] == ["claude-3-5-haiku-latest"] * 2
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "anthropic"))
    assert [e.kind for e in ctx.get_events()] == ["downgraded", "downgraded"]
