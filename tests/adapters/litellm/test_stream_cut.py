"""LiteLLM streams cannot run past their reservation: against a server that ignores ``max_tokens``,
the output is counted as it streams and the stream is closed once it passes the output tokens
reserved for it; the part received reaches the caller first, then the context halts
(``budget_exceeded``) -- sync and async, over the OpenAI SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import litellm
import pytest

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason

from ...support.fake_bare import BareProvider

pytestmark = [
    pytest.mark.filterwarnings("ignore:Item.*using the `ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me everything."}]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)
MAX_TOKENS = 40  # ignored by the server, which streams 2000 words (6 to 9 characters each)


@pytest.fixture
def bare() -> Iterator[BareProvider]:
    veronica_mw.instrument("litellm", "openai")
    with BareProvider(words=2000) as fake:
        yield fake
    veronica_mw.uninstrument()


def _check_cut(ctx: ExecutionContext, received: str, bare: BareProvider, caught: ExecutionHalted) -> None:
    assert caught.reason == HaltReason.BUDGET_EXCEEDED and ctx.aborted
    # everything up to the chunk that passed the reservation was delivered, nothing after it
    assert MAX_TOKENS * 4 < len(received) <= MAX_TOKENS * 4 + len("word1999 ")
    assert bare.text().startswith(received)
    assert bare.count() == 1
    (node,) = ctx.graph.nodes()  # one step, however many layers metered it
    assert node.settled and node.cost_usd == pytest.approx(node.reserved_usd)
    assert "stream_cut" in [e.kind for e in ctx.get_events()]


@pytest.mark.usefixtures("closes_litellms_loop")
def test_a_litellm_stream_over_the_openai_sdk_is_cut_at_its_reservation(bare: BareProvider) -> None:
    received: list[str] = []
    with ExecutionContext(LIMITS) as ctx, pytest.raises(ExecutionHalted) as caught:
        stream = litellm.completion(
            model="openai/gpt-4o-mini",
            messages=MESSAGES,
            api_base=bare.url + "/v1",
            api_key="t",
            max_tokens=MAX_TOKENS,
            stream=True,
        )
        for chunk in stream:
            received.extend(c.delta.content or "" for c in chunk.choices)
    _check_cut(ctx, "".join(received), bare, caught.value)


@pytest.mark.anyio
async def test_an_async_litellm_stream_over_its_own_client_is_cut_at_its_reservation(
    bare: BareProvider,
) -> None:
    received: list[str] = []
    with ExecutionContext(LIMITS) as ctx:
        with pytest.raises(ExecutionHalted) as caught:
            stream = await litellm.acompletion(
                model="openai/gpt-4o-mini",
                messages=MESSAGES,
                api_base=bare.url + "/v1",
                api_key="t",
                max_tokens=MAX_TOKENS,
                stream=True,
            )
            async for chunk in stream:
                received.extend(c.delta.content or "" for c in chunk.choices)
    _check_cut(ctx, "".join(received), bare, caught.value)
