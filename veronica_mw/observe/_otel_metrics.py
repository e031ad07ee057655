"""The OpenTelemetry metric instruments of veronica-mw (through the OTel metrics API only).

The GenAI client metrics (``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration``,
with the bucket boundaries the GenAI conventions advise) and veronica's own counters:
``veronica.cost`` (USD), ``veronica.calls`` and ``veronica.halts``. Attributes are kept to
low-cardinality values — operation, provider, model, status, reason; never a chain id, tenant key
or path — so a busy service does not grow one time series per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics

from .. import __version__
from ._otel_providers import ProviderCache

_SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"
_TOKEN_BUCKETS = [4.0**k for k in range(14)]  # 1 ... 67_108_864 tokens
_DURATION_BUCKETS = [0.01 * 2.0**k for k in range(14)]  # 10 ms ... 81.92 s

_Attributes = Mapping[str, Any]


def _placeholder(provider: object) -> bool:
    """True for the API's placeholder provider (nobody configured an SDK yet): nothing records.

    The API has no public "is configured" query; this recognises only its own proxy class, so an
    SDK or vendor provider is never mistaken for it.
    """
    cls = type(provider)
    return cls.__name__ == "_ProxyMeterProvider" and cls.__module__.startswith("opentelemetry.metrics")


class Instruments:
    """The five instruments, made from one meter."""

    __slots__ = ("tokens", "duration", "cost", "calls", "halts")

    def __init__(self, meter: metrics.Meter) -> None:
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used per model call.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of model calls contained by veronica-mw.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
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
