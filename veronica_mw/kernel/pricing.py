"""Usage extraction from LLM responses and offline pricing with genai-prices.

Resolving a model name is the expensive part of a lookup, so the resolved (provider, model) pair is
cached per ``(provider, model)`` key, misses included. Pricing never runs under a context's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_MISSING = object()
# A cost ceiling at or above this is no ceiling (what ``veronica-mw run`` sets when no
# ``--max-cost-usd`` is given): a call that cannot be priced may run under it.
UNLIMITED_USD = 1e300


@dataclass(frozen=True, slots=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        return 0
    return int(value)


_PLAIN_KEYS = frozenset(("input_tokens", "output_tokens", "total_tokens"))


def usage_from_mapping(raw: Any) -> TokenUsage | None:
    """Read OpenAI (prompt/completion), Anthropic and LangChain (input/output) token counts."""
    if raw is None:
        return None
    if isinstance(raw, TokenUsage):
        return raw
    if type(raw) is dict and raw.keys() <= _PLAIN_KEYS:
        # The common shape (LangChain's usage_metadata without details): the general path below
        # would find exactly these two counts.
        inp, out = raw.get("input_tokens"), raw.get("output_tokens")
        if type(inp) is int and type(out) is int and inp >= 0 and out >= 0:
            return TokenUsage(inp, out)
    inp = _get(raw, "input_tokens")
    if inp is None:
        inp = _get(raw, "prompt_tokens")
    out = _get(raw, "output_tokens")
    if out is None:
        out = _get(raw, "completion_tokens")
    if inp is None and out is None:
        return None
    cache_read = _get(raw, "cache_read_input_tokens")
    cache_write = _get(raw, "cache_creation_input_tokens")
    details = _get(raw, "input_token_details")  # LangChain UsageMetadata
    if details is not None:
        cache_read = cache_read or _get(details, "cache_read")
        cache_write = cache_write or _get(details, "cache_creation")
    prompt_details = _get(raw, "prompt_tokens_details")  # OpenAI chat completions
    if prompt_details is None:
        prompt_details = _get(raw, "input_tokens_details")  # OpenAI Responses API
    if prompt_details is not None and cache_read is None:
        cache_read = _get(prompt_details, "cached_tokens")
    return TokenUsage(_int(inp), _int(out), _int(cache_read), _int(cache_write))


def extract_usage(result: Any) -> tuple[TokenUsage | None, str | None]:
    """Find token usage and the model name in a response object or dict, if it carries them."""
    if result is None or isinstance(result, (str, bytes, int, float, bool)):
        return None, None
    usage: TokenUsage | None = None
    model: Any = None
    meta = _get(result, "usage_metadata")  # LangChain AIMessage
    if meta:
        usage = usage_from_mapping(meta)
        response_metadata = _get(result, "response_metadata")
        if response_metadata:
            model = _get(response_metadata, "model_name") or _get(response_metadata, "model")
    if usage is None:
        raw = _get(result, "usage")
        usage = usage_from_mapping(raw) if raw is not None else usage_from_mapping(result)
    if model is None:
        model = _get(result, "model") or _get(result, "model_name")
    return usage, model if isinstance(model, str) and model else None


_cache_lock = threading.Lock()
_resolved: dict[tuple[str | None, str], Any] = {}


def _resolve(model: str, provider: str | None) -> Any:
    key = (provider, model)
    hit = _resolved.get(key, _MISSING)
    if hit is _MISSING:
        from genai_prices import data_snapshot

        try:
            hit = data_snapshot.get_snapshot().find_provider_model(model, None, provider, None)
        except LookupError as exc:
            hit = exc
        with _cache_lock:
            _resolved[key] = hit
    if isinstance(hit, LookupError):
        raise LookupError(f"no price known for model {model!r} (provider {provider!r}): {hit}")
    return hit


def _library_price(provider_info: Any, model_info: Any, counts: tuple[int, int, int, int]) -> float:
    from genai_prices import Usage

    calc = model_info.calc_price(
        Usage(
            input_tokens=counts[0],
            output_tokens=counts[1],
            cache_read_tokens=counts[2],
            cache_write_tokens=counts[3],
        ),
        provider_info,
    )
    return float(calc.total_price)


# Probe points for the linear fit: cache reads and writes stay below the input tokens they are part of.
_BASE = (4_000_000, 1_000_000, 1_000_000, 1_000_000)
_STEP = 1_000_000
_CHECK = (7_000_000, 3_000_000, 2_500_000, 500_000)


def _linear_coefficients(provider_info: Any, model_info: Any) -> tuple[float, float, float, float] | None:
    """Per-token prices when the model's price is one flat, unconditional, untiered price.

    genai-prices computes each call in Decimal through its unit registry (~0.1 ms); for flat prices
    the total is linear in the four token counts, so it is fitted once from the library itself and
    verified on two further points. Conditional (time-dependent) or tiered prices return None and
    are always priced by the library.
    """
    from genai_prices.types import ModelPrice, TieredPrices

    prices = model_info.prices
    if not isinstance(prices, ModelPrice) or any(isinstance(v, TieredPrices) for v in vars(prices).values()):
        return None
    try:
        base = _library_price(provider_info, model_info, _BASE)
        fitted = [
            (_library_price(provider_info, model_info, _shifted(k)) - base) / _STEP for k in range(len(_BASE))
        ]
        checks = [(_BASE, base), (_CHECK, _library_price(provider_info, model_info, _CHECK))]
    except Exception:  # any oddity in the price data: keep using the library as is
        return None
    coeffs = (fitted[0], fitted[1], fitted[2], fitted[3])
    for counts, expected in checks:
        if abs(_apply(coeffs, counts) - expected) > 1e-9 * max(1.0, expected):
            return None
    return coeffs


def _shifted(k: int) -> tuple[int, int, int, int]:
    a, b, c, d = (n + (_STEP if i == k else 0) for i, n in enumerate(_BASE))
    return (a, b, c, d)


def _apply(coeffs: tuple[float, float, float, float], counts: tuple[int, int, int, int]) -> float:
    return coeffs[0] * counts[0] + coeffs[1] * counts[1] + coeffs[2] * counts[2] + coeffs[3] * counts[3]


_linear: dict[tuple[str | None, str], tuple[float, float, float, float] | None] = {}


# Prices set by the program for models genai-prices does not know (an in-house or fine-tuned
# model, a new release): USD per token for input, output, cache reads, cache writes. Consulted first.
_overrides: dict[str, tuple[float, float, float, float]] = {}


def set_price(
    model: str,
    *,
    input_usd_per_mtok: float,
    output_usd_per_mtok: float,
    cache_read_usd_per_mtok: float | None = None,
    cache_write_usd_per_mtok: float | None = None,
) -> None:
    """Price ``model`` (any provider) at these USD-per-million-token rates, in place of (or where
    there is no) genai-prices data. Cache reads and writes default to the input rate."""
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a model name, got {model!r}")
    rates = [input_usd_per_mtok, output_usd_per_mtok, cache_read_usd_per_mtok, cache_write_usd_per_mtok]
    for i, rate in enumerate(rates):
        if rate is None:
            rates[i] = input_usd_per_mtok
        elif isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < float("inf"):
            raise ValueError(f"a price must be a finite number >= 0 USD per million tokens, got {rate!r}")
    with _cache_lock:
        _overrides[model] = (rates[0] / 1e6, rates[1] / 1e6, rates[2] / 1e6, rates[3] / 1e6)  # type: ignore[operator]


def clear_price(model: str) -> None:
    """Forget a price given with :func:`set_price` (genai-prices' applies again, if any)."""
    with _cache_lock:
        _overrides.pop(model, None)


def is_priced(model: str, provider: str | None = None) -> bool:
    """Whether genai-prices knows ``model`` (cached, misses included; no exception raised)."""
    if model in _overrides:
        return True
    try:
        _resolve(model, provider)
    except LookupError:
        return False
    return True


def price_usage(usage: TokenUsage, model: str, provider: str | None = None) -> float:
    """Price ``usage`` for ``model``; raises ``LookupError`` when the model is unknown."""
    override = _overrides.get(model) if _overrides else None
    if override is not None:
        counts = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
        # Cache reads and writes are part of the input tokens: priced at their own rate instead.
        fresh = max(0, counts[0] - counts[2] - counts[3])
        return _apply(override, (fresh, counts[1], counts[2], counts[3]))
    key = (provider, model)
    coeffs = _linear.get(key)  # one lookup for a model priced before (every call after the first)
    if coeffs is None and key not in _linear:
        coeffs = _linear_coefficients(*_resolve(model, provider))  # LookupError: unknown, nothing kept
        with _cache_lock:
            _linear[key] = coeffs
    counts = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
    if coeffs is None:
        provider_info, model_info = _resolve(model, provider)
        return _library_price(provider_info, model_info, counts)
    return _apply(coeffs, counts)
