"""FitOutputToBudget through real LiteLLM: a call whose worst case does not fit what is left is sent
with its output limit lowered to what the budget affords -- over the OpenAI SDK (fitted once, at
the LiteLLM layer: the OpenAI layer adopts the step and sends it as fitted) and over LiteLLM's own
HTTP client (Anthropic). The fake server sees the lowered value."""

from __future__ import annotations

from typing import Any

import litellm
import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, FitOutputToBudget, PolicyPipeline
from veronica_mw.adapters._provider_estimate import text_tokens, worst_case

from ...support.fake_provider import FakeProvider

pytestmark = [
    pytest.mark.filterwarnings("ignore:Item.*using the `ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
    pytest.mark.usefixtures("instrumented"),
]

MESSAGES: list[Any] = [{"role": "user", "content": "Write a long story."}]
TOKENS_IN = text_tokens(MESSAGES)
# (LiteLLM model, the fake server's base url attribute, genai-prices model and provider, field sent)
ROUTES = [
    ("openai/gpt-4o-mini", "openai_url", "gpt-4o-mini", "openai", "max_tokens"),
    ("anthropic/claude-haiku-4-5", "anthropic_url", "claude-haiku-4-5", "anthropic", "max_tokens"),
]


def _ceiling(model: str, provider: str) -> float:
    return worst_case(model, provider, TOKENS_IN, 1000) or 0.0


def _affordable(model: str, provider: str) -> int:
    input_usd = worst_case(model, provider, TOKENS_IN, 0)
    per_token = worst_case(model, provider, 0, 1_000_000)
    assert input_usd is not None and per_token is not None
    return int((_ceiling(model, provider) - input_usd) / (per_token / 1_000_000) * (1 - 1e-9))


def _ctx(ceiling: float) -> ExecutionContext:
    config = ExecutionConfig(max_cost_usd=ceiling, max_steps=10, max_retries_total=0)
    return ExecutionContext(config, PolicyPipeline([FitOutputToBudget()]))


@pytest.mark.usefixtures("closes_litellms_loop")
@pytest.mark.parametrize(
    ("route", "base", "model", "provider", "field"), ROUTES, ids=["openai-sdk", "anthropic"]
)
def test_completion_is_sent_with_fewer_output_tokens(
    server: FakeProvider, route: str, base: str, model: str, provider: str, field: str
) -> None:
    expected = _affordable(model, provider)
    assert 256 <= expected < 4096
    with _ctx(_ceiling(model, provider)) as ctx:
        litellm.completion(
            model=route, messages=MESSAGES, api_base=getattr(server, base), api_key="t", max_tokens=3000
        )
    (received,) = server.received
    assert received.body[field] == expected
    (node,) = ctx.graph.nodes()  # one step, fitted once
    assert node.reserved_usd == pytest.approx(worst_case(model, provider, TOKENS_IN, expected))
    (event,) = [e for e in ctx.get_events() if e.kind == "modified"]
    assert (event.data["field"], event.data["original"], event.data["fitted"]) == (
        "max_tokens",
        3000,
        expected,
    )


@pytest.mark.anyio
async def test_acompletion_stream_lowers_max_completion_tokens(server: FakeProvider) -> None:
    with _ctx(_ceiling("gpt-4o-mini", "openai")):
        stream = await litellm.acompletion(
            model="openai/gpt-4o-mini",
            messages=MESSAGES,
            api_base=server.openai_url,
            api_key="t",
            stream=True,
        )
        async for _ in stream:
            pass
    (received,) = server.received
    assert received.body["max_completion_tokens"] == _affordable("gpt-4o-mini", "openai")
