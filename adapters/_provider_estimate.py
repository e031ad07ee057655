"""The one worst-case estimator: what a model call may cost at most, reserved before it is sent.

Every layer that admits a model call -- the provider SDK instrumentation (:mod:`._provider_calls`)
and the framework adapters whose calls no provider instrumentation sees (Pydantic AI over an
unpatched SDK, LlamaIndex, LangChain, CrewAI) -- reserves the same figure, computed here:

- input: the prompt's text estimated at 4 characters a token (:func:`text_tokens`), plus a flat
  ``_BLOB_TOKENS`` per inline image or file;
- output: the request's own limit (``max_tokens`` and its per-SDK names, :func:`limit`), else the
  process-wide default (``instrument(max_output_tokens=...)``, ``veronica-mw run
  --max-output-tokens``), times the number of choices;
- priced for the model with genai-prices (or a price given with
  :func:`veronica_mw.kernel.pricing.set_price`).

A configured ``cost_estimate_hint`` replaces the figure. A named model that cannot be priced is
refused up front, before anything is sent, when the context has a cost limit (:func:`reservation`
raises :class:`~veronica_mw.ExecutionHalted` with reason ``unpriced``): running it would count $0
against a ceiling that promises to stop spending. Without a cost limit it runs, reserved at 0; so
does a call that names no model at all (a framework's local fake model).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import ExecutionContext, ExecutionHalted, TokenUsage
from .. import instrumentation as _instrumentation
from ..kernel.pricing import UNLIMITED_USD, price_usage

__all__ = ["OUTPUT_LIMITS", "UNPRICED", "limit", "price", "reservation", "text_tokens", "worst_case"]

# Where frameworks' chat models (LangChain invocation params and model fields, LlamaIndex metadata)
# keep their output limit.
OUTPUT_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "max_new_tokens", "num_predict")
UNPRICED = "unpriced"  # the reason of the refusal of a model that cannot be priced
# A data URL or base64 blob (an image, a file) is not text: counted as this many tokens instead.
_BLOB_TOKENS = 1000

_BLOB_CHARS = _BLOB_TOKENS * 4  # a blob counted as characters: exactly _BLOB_TOKENS after the division
_MIME_KEYS = ("media_type", "mime_type", "mimeType")
_LEAVES = (bytes, int, float, bool, type(None))  # never hold text


def _chars(value: Any, depth: int = 0) -> int:
    """The characters of the text in a request body (messages, contents), an inline file or image
    counting ``_BLOB_CHARS``. A plain recursive sum, not a generator (it runs on every request, over
    every message); a plain dict is told apart without the slower ``Mapping`` ABC check."""
    if isinstance(value, str):
        return _BLOB_CHARS if len(value) > 256 and value.startswith("data:") else len(value)
    if depth > 12 or isinstance(value, _LEAVES):
        return 0
    if type(value) is dict or isinstance(value, Mapping):
        if "data" in value and any(key in value for key in _MIME_KEYS):  # base64 image/file source
            return _BLOB_CHARS
        return _sum(value.values(), depth)
    if isinstance(value, (list, tuple)):
        return _sum(value, depth)
    fields = getattr(value, "__dict__", None)  # SDK objects (Gemini Content, pydantic messages)
    return _chars(fields, depth + 1) if isinstance(fields, dict) else 0


def _sum(items: Any, depth: int) -> int:
    total = 0
    for item in items:
        total += _chars(item, depth + 1)
    return total


def text_tokens(*values: Any) -> int:
    """Estimated tokens of the text in ``values``: characters / 4 rounded up, plus a flat
    ``_BLOB_TOKENS`` per inline image or file."""
    return -(-_sum(values, 0) // 4)


def limit(body: Mapping[str, Any], *names: str) -> int:
    """The request's own output limit (the first of ``names`` set), else the configured default."""
    for name in names:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return _instrumentation.settings.max_output_tokens


def price(
    usage: TokenUsage, models: tuple[str | None, ...], provider: str | None
) -> tuple[float, str] | None:
    """Price ``usage`` for the first of ``models`` genai-prices knows (under ``provider``, then any)."""
    for model in models:
        if not model:
            continue
        for prov in (provider, None) if provider else (None,):
            try:
                return price_usage(usage, model, prov), model
            except LookupError:
                continue
    return None


def worst_case(
    model: str | None, provider: str | None, input_tokens: int, output_tokens: int
) -> float | None:
    """USD of ``input_tokens`` in and ``output_tokens`` out at ``model``'s prices (None: unpriced)."""
    priced = price(TokenUsage(input_tokens, output_tokens), (model,), provider)
    return priced[0] if priced is not None else None


def reservation(
    ctx: ExecutionContext,
    model: str | None,
    provider: str | None,
    input_tokens: int,
    output_tokens: int,
    operation: str = "",
    hint: float | None = None,
) -> float:
    """What to reserve for the call: ``hint`` (or the configured ``cost_estimate_hint``) when given,
    else the worst case. Raises ExecutionHalted (``unpriced``, nothing sent) for a model that
    cannot be priced under a cost limit."""
    if hint is None:
        hint = _instrumentation.settings.cost_estimate_hint
    if hint is not None:
        return hint
    usd = worst_case(model, provider, input_tokens, output_tokens)
    if usd is not None:
        return usd
    if not model or ctx.config.max_cost_usd >= UNLIMITED_USD:
        # No cost limit; or a call that names no model (a framework's local fake, or one whose
        # provider request below names it and is reserved there): nothing to price it by.
        return 0.0
    raise unpriced(ctx, model, operation)


def unpriced(ctx: ExecutionContext, model: str | None, operation: str = "") -> ExecutionHalted:
    """The refusal of a call whose model has no known price (recorded as an ``unpriced`` event)."""
    what = f"model {model!r}" if model else "a model call that names no model"
    detail = (
        f"{operation + ': ' if operation else ''}no price known for {what} under max_cost_usd="
        f"{ctx.config.max_cost_usd:g}; give it a reservation with WrapOptions(cost_estimate_hint=...) "
        "(or the adapter's cost_estimate_hint=, instrument(cost_estimate_hint=...)) or a price with "
        "veronica_mw.kernel.pricing.set_price(model, input_usd_per_mtok=..., output_usd_per_mtok=...)"
    )
    ctx.add_event(UNPRICED, detail, model=model)
    return ExecutionHalted(UNPRICED, ctx.get_snapshot(), None, detail)
