"""FitOutputToBudget through the real ``mistralai`` SDK: a chat call whose worst case does not fit
what is left is sent with ``max_tokens`` lowered to what the budget affords (the fake server sees
it) and reserved at exactly that; one that fits is sent unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from mistralai.client import Mistral

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, FitOutputToBudget, PolicyPipeline
from veronica_mw.adapters._provider_estimate import text_tokens, worst_case

from ...support.fake_mistral import FakeMistral

MODEL = "mistral-small-latest"
MESSAGES: list[Any] = [{"role": "user", "content": "Write a long story."}]
TOKENS_IN = text_tokens(MESSAGES)
CEILING = worst_case(MODEL, "mistral", TOKENS_IN, 1000) or 0.0


def _affordable(choices: int = 1) -> int:
    input_usd = worst_case(MODEL, "mistral", TOKENS_IN, 0)
    per_token = worst_case(MODEL, "mistral", 0, 1_000_000)
    assert input_usd is not None and per_token is not None
    return int((CEILING - input_usd) / (per_token / 1_000_000 * choices) * (1 - 1e-9))


def _ctx(fit: bool = True) -> ExecutionContext:
    config = ExecutionConfig(max_cost_usd=CEILING, max_steps=10, max_retries_total=0)
    return ExecutionContext(config, PolicyPipeline([FitOutputToBudget()]) if fit else None)


def test_complete_is_sent_with_fewer_max_tokens(client: Mistral, server: FakeMistral) -> None:
    expected = _affordable()
    assert 256 <= expected < 4096
    with _ctx() as ctx:
        client.chat.complete(model=MODEL, messages=MESSAGES)
    assert server.bodies[0]["max_tokens"] == expected
    (node,) = ctx.graph.nodes()
    assert node.reserved_usd == pytest.approx(worst_case(MODEL, "mistral", TOKENS_IN, expected))
    (event,) = [e for e in ctx.get_events() if e.kind == "modified"]
    assert (event.data["field"], event.data["original"], event.data["fitted"]) == (
        "max_tokens",
        4096,
        expected,
    )


def test_a_stream_with_n_choices_is_lowered_per_choice(client: Mistral, server: FakeMistral) -> None:
    with _ctx():
        for _ in client.chat.stream(model=MODEL, messages=MESSAGES, max_tokens=3000, n=2):
            pass
    assert server.bodies[0]["max_tokens"] == _affordable(choices=2)


@pytest.mark.anyio
@pytest.mark.usefixtures("instrumented")
async def test_complete_async_is_fitted(server: FakeMistral) -> None:
    async with Mistral(api_key="test", server_url=server.url) as client:
        with _ctx():
            await client.chat.complete_async(model=MODEL, messages=MESSAGES, max_tokens=4000)
    assert server.bodies[0]["max_tokens"] == _affordable()


def test_a_call_that_fits_is_sent_unchanged(client: Mistral, server: FakeMistral) -> None:
    with _ctx() as ctx:
        client.chat.complete(model=MODEL, messages=MESSAGES, max_tokens=100)
    assert server.bodies[0]["max_tokens"] == 100
    assert not [e for e in ctx.get_events() if e.kind == "modified"]


def test_without_the_policy_it_is_refused_and_nothing_is_sent(client: Mistral, server: FakeMistral) -> None:
    with _ctx(fit=False), pytest.raises(ExecutionHalted) as caught:
        client.chat.complete(model=MODEL, messages=MESSAGES)
    assert caught.value.reason == "budget_exceeded" and server.count() == 0
