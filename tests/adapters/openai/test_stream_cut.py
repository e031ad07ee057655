"""Streams cannot run past their reservation: against a server that ignores ``max_tokens``, the
output is counted as it streams and the stream is closed once it passes the output tokens reserved
for it; the part received reaches the caller first, then the context halts (``budget_exceeded``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason

from ...support.fake_bare import BareProvider

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me everything."}]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)
MAX_TOKENS = 40  # ignored by the server, which streams 2000 words (6 characters each)


@pytest.fixture
def bare() -> Iterator[BareProvider]:
    veronica_mw.instrument("openai", "anthropic")
    with BareProvider(words=2000) as fake:
        yield fake
    veronica_mw.uninstrument()


def _check_cut(ctx: ExecutionContext, received: str, bare: BareProvider, caught: ExecutionHalted) -> None:
    assert caught.reason == HaltReason.BUDGET_EXCEEDED and ctx.aborted
    # everything up to the chunk that passed the reservation was delivered, nothing after it
    assert MAX_TOKENS * 4 < len(received) <= MAX_TOKENS * 4 + len("word1999 ")
    assert bare.text().startswith(received)
    (node,) = ctx.graph.nodes()
    assert node.settled and node.cost_usd == pytest.approx(node.reserved_usd)
    assert "stream_cut" in [e.kind for e in ctx.get_events()]


def test_an_openai_stream_is_cut_at_its_reservation(bare: BareProvider) -> None:
    received: list[str] = []
    with openai.OpenAI(base_url=bare.url + "/v1", api_key="t", max_retries=0) as client:
        with ExecutionContext(LIMITS) as ctx, pytest.raises(ExecutionHalted) as caught:
            for chunk in client.chat.completions.create(
                model="gpt-4o-mini", messages=MESSAGES, max_tokens=MAX_TOKENS, stream=True
            ):
                received.extend(c.delta.content or "" for c in chunk.choices)
    _check_cut(ctx, "".join(received), bare, caught.value)


@pytest.mark.anyio
async def test_an_async_anthropic_stream_is_cut_at_its_reservation(bare: BareProvider) -> None:
    received: list[str] = []
    async with anthropic.AsyncAnthropic(base_url=bare.url, api_key="t", max_retries=0) as client:
        with ExecutionContext(LIMITS) as ctx:
            with pytest.raises(ExecutionHalted) as caught:
                stream = await client.messages.create(
                    model="claude-haiku-4-5", max_tokens=MAX_TOKENS, messages=MESSAGES, stream=True
                )
                async for event in stream:
                    if event.type == "content_block_delta" and event.delta.type == "text_delta":
                        received.append(event.delta.text)
    _check_cut(ctx, "".join(received), bare, caught.value)
