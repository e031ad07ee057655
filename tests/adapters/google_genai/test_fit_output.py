"""FitOutputToBudget through the real google-genai SDK: a call whose worst case does not fit what is
left is sent with ``generationConfig.maxOutputTokens`` lowered to what the budget affords (the fake
server sees it), reserved at exactly that; the caller's config is not changed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google import genai
from google.genai import types

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, FitOutputToBudget, PolicyPipeline
from veronica_mw.adapters._provider_estimate import text_tokens, worst_case

from ...support.fake_provider import FakeProvider

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

MODEL = "gemini-2.0-flash"
PROMPT = "Write a long story."
TOKENS_IN = text_tokens(PROMPT)
CEILING = worst_case(MODEL, "google", TOKENS_IN, 1000) or 0.0  # about 1000 output tokens affordable


def _affordable() -> int:
    input_usd = worst_case(MODEL, "google", TOKENS_IN, 0)
    per_token = worst_case(MODEL, "google", 0, 1_000_000)
    assert input_usd is not None and per_token is not None
    return int((CEILING - input_usd) / (per_token / 1_000_000) * (1 - 1e-9))


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def client(server: FakeProvider) -> Iterator[genai.Client]:
    veronica_mw.instrument("google-genai")
    sdk = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.url))
    yield sdk
    sdk.close()
    veronica_mw.uninstrument()


def _ctx(policy: bool = True) -> ExecutionContext:
    config = ExecutionConfig(max_cost_usd=CEILING, max_steps=10, max_retries_total=0)
    return ExecutionContext(config, PolicyPipeline([FitOutputToBudget()]) if policy else None)


def _sent_limit(server: FakeProvider) -> object:
    (received,) = server.received
    return received.body.get("generationConfig", {}).get("maxOutputTokens")


def test_generate_content_is_sent_with_fewer_output_tokens(
    client: genai.Client, server: FakeProvider
) -> None:
    expected = _affordable()
    assert 256 <= expected < 4096
    with _ctx() as ctx:
        response = client.models.generate_content(model=MODEL, contents=PROMPT)
    assert response.text and _sent_limit(server) == expected
    (node,) = ctx.graph.nodes()
    assert node.reserved_usd == pytest.approx(worst_case(MODEL, "google", TOKENS_IN, expected))
    (event,) = [e for e in ctx.get_events() if e.kind == "modified"]
    assert event.data["field"] == "max_output_tokens"
    assert (event.data["original"], event.data["fitted"]) == (4096, expected)


def test_a_config_the_caller_set_is_copied_not_changed(client: genai.Client, server: FakeProvider) -> None:
    config = types.GenerateContentConfig(max_output_tokens=3000, temperature=0.5)
    with _ctx():
        chunks = list(client.models.generate_content_stream(model=MODEL, contents=PROMPT, config=config))
    assert chunks and _sent_limit(server) == _affordable()
    assert server.received[0].body["generationConfig"]["temperature"] == 0.5
    assert config.max_output_tokens == 3000


@pytest.mark.anyio
async def test_the_async_client_is_fitted_too(server: FakeProvider) -> None:
    veronica_mw.instrument("google-genai")
    sdk = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.url))
    try:
        with _ctx():
            await sdk.aio.models.generate_content(
                model=MODEL, contents=PROMPT, config={"max_output_tokens": 4000}
            )
    finally:
        await sdk.aio.aclose()
        sdk.close()
        veronica_mw.uninstrument()
    assert _sent_limit(server) == _affordable()


def test_a_call_that_fits_is_sent_unchanged(client: genai.Client, server: FakeProvider) -> None:
    with _ctx() as ctx:
        client.models.generate_content(
            model=MODEL, contents=PROMPT, config=types.GenerateContentConfig(max_output_tokens=100)
        )
    assert _sent_limit(server) == 100
    assert not [e for e in ctx.get_events() if e.kind == "modified"]
