"""The OpenTelemetry metric instruments of veronica-mw (through the OTel metrics API only).

The GenAI client metrics (``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration``,
with the bucket boundaries the GenAI conventions advise) and veronica's own counters:
``veronica.cost`` (USD), ``veronica.calls`` and ``veronica.halts``. Attributes are kept to
low-cardinality values — operation, provider, model, status, reason; never a chain id, tenant key
or path — so a busy service does not grow one time series per request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import metrics

from .._version import __version__
from ._otel_providers import ProviderCache

if TYPE_CHECKING:
    from ..kernel.graph import CallNode

_SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"
_TOKEN_BUCKETS = [4.0**k for k in range(14)]  # 1 ... 67_108_864 tokens
_DURATION_BUCKETS = [0.01 * 2.0**k for k in range(14)]  # 10 ms ... 81.92 s

FAILED = frozenset({"error", "interrupted", "rejected"})  # outcomes that set error.type


def _placeholder(provider: object) -> bool:
    """True for the API's placeholder provider (nobody configured an SDK yet): nothing records.

    The API has no public "is configured" query; this recognises only its own proxy class, so an
    SDK or vendor provider is never mistaken for it.
    """
    cls = type(provider)
    return cls.__name__ == "_ProxyMeterProvider" and cls.__module__.startswith("opentelemetry.metrics")


def _histogram(meter: metrics.Meter, name: str, unit: str, description: str, buckets: list[float]) -> Any:
    try:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
        )
    except TypeError:  # an older SDK without bucket advice: its default buckets
        return meter.create_histogram(name, unit=unit, description=description)


class Instruments:
    """The five instruments, made from one meter."""

    __slots__ = ("tokens", "duration", "cost", "calls", "halts")

    def __init__(self, meter: metrics.Meter) -> None:
        self.tokens = _histogram(
            meter,
            "gen_ai.client.token.usage",
            "{token}",
            "Input and output tokens per model call.",
            _TOKEN_BUCKETS,
        )
        self.duration = _histogram(
            meter,
            "gen_ai.client.operation.duration",
            "s",
            "Duration of contained model calls.",
            _DURATION_BUCKETS,
        )
        self.cost = meter.create_counter(
            "veronica.cost", unit="USD", description="Committed cost of contained calls."
        )
        self.calls = meter.create_counter(
            "veronica.calls", unit="{call}", description="Contained model and tool calls, by outcome."
        )
        self.halts = meter.create_counter(
            "veronica.halts", unit="{halt}", description="Runs, requests and sessions halted, by reason."
        )

    def record_call(self, node: CallNode, request_model: str | None, error: BaseException | None) -> None:
        """One settled call: counted; its cost; for a model call, its tokens and duration."""
        status = node.status
        if node.kind == "llm":
            options = node.options
            operation = options.gen_ai_operation or "chat"
            attributes = model_attributes(operation, request_model, options.provider, node.response_model)
        else:
            operation = "execute_tool"
            attributes = {"gen_ai.operation.name": operation}
        self.calls.add(1, {"gen_ai.operation.name": operation, "veronica.status": status})
        if node.cost_usd > 0.0:
            self.cost.add(node.cost_usd, attributes)
        if node.kind != "llm" or status == "released":  # a released call never ran
            return
        if node.tokens_in or node.tokens_out:
            self.tokens.record(node.tokens_in, {**attributes, "gen_ai.token.type": "input"})
            self.tokens.record(node.tokens_out, {**attributes, "gen_ai.token.type": "output"})
        if status in FAILED:
            attributes["error.type"] = error_type(error, status)
        self.duration.record(max(node.ended - node.started, 0.0), attributes)


def _instruments(provider: Any) -> Instruments | None:
    if isinstance(provider, metrics.NoOpMeterProvider):
        return None
    meter = provider.get_meter("veronica_mw", __version__, schema_url=_SCHEMA_URL)
    if isinstance(meter, metrics.NoOpMeter):  # e.g. an SDK provider with OTEL_SDK_DISABLED=true
        return None
    return Instruments(meter)


def instruments_of(meter_provider: Any = None) -> ProviderCache[Instruments]:
    """The instruments of ``meter_provider``, else of the global provider once one is configured."""
    return ProviderCache(meter_provider, metrics.get_meter_provider, _placeholder, _instruments)


def error_type(error: BaseException | None, status: str) -> str:
    """The exception's qualified class name (builtins unqualified); the status when none was raised."""
    if error is None:
        return status
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def model_attributes(
    operation: str, model: str | None, provider: str | None, response: str | None
) -> dict[str, Any]:
    attributes: dict[str, Any] = {"gen_ai.operation.name": operation}
    if provider:
        attributes["gen_ai.provider.name"] = provider
    if model:
        attributes["gen_ai.request.model"] = model
    if response:
        attributes["gen_ai.response.model"] = response
    return attributes
