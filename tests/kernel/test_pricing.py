from __future__ import annotations

import random
from typing import Any

import pytest
from genai_prices import Usage, calc_price, data_snapshot

from veronica_mw.kernel.pricing import TokenUsage, _linear, extract_usage, price_usage, usage_from_mapping


def test_fast_path_matches_genai_prices_for_every_known_model() -> None:
    rng = random.Random(7)
    compared = 0
    for provider in data_snapshot.get_snapshot().providers:
        for model in provider.models:
            for _ in range(2):
                i = rng.randint(0, 400_000)
                cr = rng.randint(0, i // 2)
                cw = rng.randint(0, (i - cr) // 2)
                o = rng.randint(0, 60_000)
                try:
                    usage = Usage(
                        input_tokens=i, output_tokens=o, cache_read_tokens=cr, cache_write_tokens=cw
                    )
                    expected = float(calc_price(usage, model.id, provider_id=provider.id).total_price)
                except Exception:
                    continue  # the library itself cannot price this combination
                got = price_usage(TokenUsage(i, o, cr, cw), model.id, provider.id)
                assert got == pytest.approx(expected, rel=1e-9, abs=1e-12), (provider.id, model.id)
                compared += 1
    assert compared > 1000
    linear = [v for v in _linear.values() if v is not None]
    assert len(linear) > len(_linear) // 2  # most flat-priced models take the fast path


def test_unknown_model_raises_lookup_error() -> None:
    with pytest.raises(LookupError, match="no-such-model"):
        price_usage(TokenUsage(10, 10), "no-such-model-xyz")
    with pytest.raises(LookupError):  # the miss is cached, and still raises
        price_usage(TokenUsage(10, 10), "no-such-model-xyz")


class OpenAIUsage:
    prompt_tokens = 120
    completion_tokens = 30
    prompt_tokens_details = {"cached_tokens": 20}


class OpenAIResponse:
    model = "gpt-4o-mini"
    usage = OpenAIUsage()


@pytest.mark.parametrize(
    ("result", "expected", "model"),
    [
        (OpenAIResponse(), TokenUsage(120, 30, 20, 0), "gpt-4o-mini"),
        (
            {
                "model": "claude-3-5-sonnet",
                "usage": {"input_tokens": 5, "output_tokens": 7, "cache_read_input_tokens": 2},
            },
            TokenUsage(5, 7, 2, 0),
            "claude-3-5-sonnet",
        ),
        ({"input_tokens": 3, "output_tokens": 4}, TokenUsage(3, 4), None),
        (None, None, None),
        ("plain text", None, None),
        ({"usage": {"input_tokens": float("nan"), "output_tokens": -5}}, TokenUsage(0, 0), None),
    ],
)
def test_extract_usage_shapes(result: Any, expected: TokenUsage | None, model: str | None) -> None:
    assert extract_usage(result) == (expected, model)


def test_langchain_usage_metadata_shape() -> None:
    meta = {
        "input_tokens": 9,
        "output_tokens": 1,
        "total_tokens": 10,
        "input_token_details": {"cache_read": 4},
    }
    assert usage_from_mapping(meta) == TokenUsage(9, 1, 4, 0)
