"""FitOutputToBudget through the real OpenAI SDK: a call whose worst case does not fit what is left
is sent with its output limit lowered to what the budget affords (the server sees the value) and
reserved at exactly that; below ``min_output_tokens`` it is refused; without the policy nothing in
the request changes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, FitOutputToBudget, PolicyPipeline
from veronica_mw.adapters._provider_estimate import text_tokens, worst_case

from ...support.fake_bare import BareProvider

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "Write a long story."}]
CEILING = 0.0006  # gpt-4o-mini: about 1000 output tokens, not the default 4096


@pytest.fixture
def bare() -> Iterator[BareProvider]:
    with BareProvider(usage=True) as fake:
        yield fake


@pytest.fixture
def client(bare: BareProvider) -> Iterator[openai.OpenAI]:
    veronica_mw.instrument("openai")
    with openai.OpenAI(base_url=bare.url + "/v1", api_key="test", max_retries=0) as sdk:
        yield sdk
    veronica_mw.uninstrument()


def _ctx(ceiling: float = CEILING, policy: FitOutputToBudget | None = None) -> ExecutionContext:
    config = ExecutionConfig(max_cost_usd=ceiling, max_steps=10, max_retries_total=0)
    return ExecutionContext(config, PolicyPipeline([policy]) if policy is not None else None)


def _affordable(tokens_in: int, ceiling: float = CEILING, choices: int = 1) -> int:
    input_usd = worst_case(MODEL, "openai", tokens_in, 0)
    per_token = worst_case(MODEL, "openai", 0, 1_000_000)
    assert input_usd is not None and per_token is not None
    return int((ceiling - input_usd) / (per_token / 1_000_000 * choices) * (1 - 1e-9))


def test_a_chat_call_that_does_not_fit_is_sent_with_fewer_output_tokens(
    client: openai.OpenAI, bare: BareProvider
) -> None:
    with _ctx(policy=FitOutputToBudget()) as ctx:
        reply = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    expected = _affordable(text_tokens(MESSAGES))
    assert 256 <= expected < 4096
    assert bare.bodies()[0]["max_completion_tokens"] == expected
    (node,) = ctx.graph.nodes()
    assert node.reserved_usd == pytest.approx(worst_case(MODEL, "openai", text_tokens(MESSAGES), expected))
    assert node.reserved_usd <= CEILING and reply.choices[0].message.content
    (event,) = [e for e in ctx.get_events() if e.kind == "modified"]
    assert event.data["field"] == "max_completion_tokens"
    assert (event.data["original"], event.data["fitted"]) == (4096, expected)


def test_the_field_the_request_set_is_the_one_lowered_per_choice(
    client: openai.OpenAI, bare: BareProvider
) -> None:
    with _ctx(policy=FitOutputToBudget()):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3000, n=2)
    body = bare.bodies()[0]
    assert body["max_tokens"] == _affordable(text_tokens(MESSAGES), choices=2)
    assert "max_completion_tokens" not in body


def test_a_responses_call_lowers_max_output_tokens(client: openai.OpenAI, bare: BareProvider) -> None:
    with _ctx(policy=FitOutputToBudget()):
        client.responses.create(model=MODEL, input="Write a long story.")
    assert bare.bodies()[0]["max_output_tokens"] == _affordable(text_tokens("Write a long story."))


def test_a_call_that_fits_is_sent_unchanged(client: openai.OpenAI, bare: BareProvider) -> None:
    with _ctx(policy=FitOutputToBudget()) as ctx:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=100)
    assert bare.bodies()[0]["max_tokens"] == 100 and "max_completion_tokens" not in bare.bodies()[0]
    assert not [e for e in ctx.get_events() if e.kind == "modified"]


def test_below_the_minimum_it_is_refused(client: openai.OpenAI, bare: BareProvider) -> None:
    with _ctx(policy=FitOutputToBudget(min_output_tokens=2000)), pytest.raises(ExecutionHalted) as caught:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert caught.value.reason == "budget_exceeded" and bare.count() == 0


def test_without_the_policy_the_call_is_refused_unchanged(client: openai.OpenAI, bare: BareProvider) -> None:
    with _ctx(), pytest.raises(ExecutionHalted) as caught:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert caught.value.reason == "budget_exceeded" and bare.count() == 0


def test_instrument_fit_output_applies_to_every_context(client: openai.OpenAI, bare: BareProvider) -> None:
    veronica_mw.instrument(fit_output=True)
    try:
        with _ctx():
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
    finally:
        veronica_mw.instrument(fit_output=False)
    assert bare.bodies()[0]["max_completion_tokens"] == _affordable(text_tokens(MESSAGES))
