"""Instrument a Stainless-generated SDK (``openai``, ``anthropic``): one patch point per concern.

Every call shape of these SDKs — ``create`` (plain or ``stream=True``), ``parse``, the ``.stream()``
helpers, ``.with_raw_response``/``.with_streaming_response``, ``beta.*`` — ends in the client's
``request(cast_to, options, stream=..., stream_cls=...)``, which holds the body about to be sent
and runs the SDK's retry loop. So:

- ``SyncAPIClient.request``/``AsyncAPIClient.request``: outside a context, straight through;
  inside, the adapter's :class:`Endpoints` plans the request (None: not a model request, e.g.
  listing files), the step is admitted before the first byte is sent, and the returned value —
  unchanged — is settled now (a parsed response), when its stream ends (a ``Stream``), or when it
  is parsed (a raw-response wrapper);
- ``_sleep_for_retry``: runs right before each SDK retry is sent; it draws one retry from the
  context's budget or raises :class:`~veronica_mw.ExecutionHalted` (both SDKs let it propagate
  from there, unlike from their HTTP transport, whose errors anthropic wraps and retries);
- ``Stream.close``/``AsyncStream.close`` and the helper streams' ``close``: settle on close;
- ``parse()`` of the raw-response wrappers: hand over the stream or response inside.

The one change made to a request: when a policy chose a fallback model for the step
(``DowngradeAt``: ``node.fallback_model``), the body is sent with that ``model`` instead (a copy of
the request options; the caller's dict is untouched) and the step records ``downgraded``.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

from . import _provider_fit as _fit
from . import _provider_raw as raw
from . import _provider_streams as streams
from ._provider_calls import (
    Outcome,
    Plan,
    ProviderCall,
    active,
    begin,
    context_now,
    limit,
    retrying,
    text_tokens,
)
from ._provider_patch import Patches, attr

logger = logging.getLogger("veronica_mw.adapters")


class Endpoint(NamedTuple):
    """How the responses of one API path are read."""

    outcome: Callable[[Any], Outcome]  # a parsed response (or its JSON dict) -> usage, model, chars
    meter: Callable[[], streams.Meter]  # a fresh meter for one stream of this path


class Endpoints(Protocol):
    def plan(self, options: Any) -> tuple[Plan, Endpoint] | None:
        """The plan of the request ``options`` describes, or None when it is no model request."""


def post_body(options: Any) -> tuple[str, Mapping[str, Any]] | None:
    """The path and JSON body of a POST the SDK is about to send (None: another method, no JSON)."""
    if str(getattr(options, "method", "")).lower() != "post":
        return None
    body = getattr(options, "json_data", None)
    if not isinstance(body, Mapping):
        return None
    return str(getattr(options, "url", "")).split("?", 1)[0].rstrip("/"), body


def choices(body: Mapping[str, Any]) -> int:
    """How many choices a request asks for (``n``; each is generated and billed)."""
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def chat_plan(body: Mapping[str, Any], operation: str, provider: str) -> Plan:
    """The plan of an OpenAI-shaped ``/chat/completions`` body (OpenAI, Groq): the prompt's
    estimated tokens, ``max_completion_tokens``/``max_tokens`` (or the default) times ``n``."""
    model = body.get("model")
    n = choices(body)
    output = limit(body, "max_completion_tokens", "max_tokens") * n
    tokens_in = text_tokens(body.get("messages"), body.get("tools"))
    # FitOutputToBudget lowers the field the request set (max_tokens for the servers that know
    # only that one), else the current one.
    field = "max_tokens" if "max_tokens" in body and "max_completion_tokens" not in body else None
    name = model if isinstance(model, str) else None
    return Plan(operation, name, provider, tokens_in, output, field or "max_completion_tokens", n)


def _route(call: ProviderCall, endpoint: Endpoint, result: Any, stream: bool, sdk: SDK) -> Outcome | None:
    """The outcome to settle ``call`` with now, or None when a stream or raw wrapper settles it later."""
    try:
        if isinstance(result, sdk.stream_types):
            streams.observe(call, result, endpoint.meter())
        elif isinstance(result, sdk.raw_types):
            raw.settle_raw(call, result, stream, endpoint.meter, endpoint.outcome)
        else:
            return endpoint.outcome(result)
    except Exception:  # our own failure must never break the caller's request
        logger.exception("veronica_mw: could not settle %s; its reservation is kept", call.plan.operation)
        call.abandon()
    return None


def _with_body(options: Any, body: Mapping[str, Any]) -> Any:
    """A copy of the request options with another JSON body (the caller's options are untouched)."""
    copier = getattr(options, "model_copy", None)  # FinalRequestOptions is a pydantic model
    if callable(copier):
        return copier(update={"json_data": body})
    options = copy.copy(options)  # pragma: no cover - pydantic v1 builds of the SDK
    options.json_data = body
    return options


def fitted(call: ProviderCall, options: Any) -> Any:
    """``options`` with the output limit FitOutputToBudget lowered (see ``_provider_fit``)."""
    plan = call.plan
    body = getattr(options, "json_data", None)
    if plan.fitted is None or not isinstance(body, Mapping):
        return options
    return _with_body(options, _fit.lowered_body(body, plan))


def downgrade(call: ProviderCall, options: Any) -> Any:
    """``options`` with the body's ``model`` swapped for the step's fallback, when it has one."""
    node = call.node
    fallback = node.fallback_model
    body = getattr(options, "json_data", None)
    if fallback is None or not isinstance(body, Mapping):
        return options
    requested = body.get("model")
    if requested != fallback:
        options = _with_body(options, {**body, "model": fallback})
        call.plan.model = fallback  # a response that names no model is priced as the fallback
    node.downgraded(requested if isinstance(requested, str) else None)
    return options


def load(module: Any, *names: str) -> None:
    """Import the SDK's private modules that hold patched classes (absent in some versions)."""
    for name in names:
        try:
            importlib.import_module(f"{module.__name__}.{name}")
        except ImportError:
            continue


class SDK:
    """The classes of one Stainless SDK that are patched (resolved with ``attr``; missing: skipped)."""

    def __init__(self, module: Any, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
        base = attr(module, "_base_client")
        self.sync_client = attr(base, "SyncAPIClient")
        self.async_client = attr(base, "AsyncAPIClient")
        self.base_client = attr(base, "BaseClient")
        found = [attr(module, f"_streaming.{name}") for name in ("Stream", "AsyncStream")]
        self.stream_types: tuple[type, ...] = tuple(t for t in found if isinstance(t, type))
        paths = ("_response.APIResponse", "_response.AsyncAPIResponse", "_legacy_response.LegacyAPIResponse")
        raws = [attr(module, path) for path in paths]
        self.raw_types: tuple[type, ...] = tuple(t for t in raws if isinstance(t, type))


def _sync_request(sdk: SDK) -> Callable[[Any], Callable[..., Any]]:
    def make(original: Any) -> Callable[..., Any]:
        def request(self: Any, cast_to: Any, options: Any, *args: Any, **kwargs: Any) -> Any:
            ctx = context_now()
            if ctx is None:
                return original(self, cast_to, options, *args, **kwargs)
            planned = sdk.endpoints.plan(options)
            if planned is None:
                return original(self, cast_to, options, *args, **kwargs)
            plan, endpoint = planned
            call = begin(ctx, plan)  # ExecutionHalted here: nothing was sent
            options = fitted(call, downgrade(call, options))
            call.record_request(getattr(options, "json_data", None))  # as sent; no-op unless bodies are kept
            call.sent = False  # until the SDK builds the HTTP request (see _build)
            token = active.set(call)
            try:
                result = original(self, cast_to, options, *args, **kwargs)
            except BaseException as exc:
                call.failed(exc)
                raise
            finally:
                active.reset(token)
            outcome = _route(call, endpoint, result, bool(kwargs.get("stream")), sdk)
            if outcome is not None:
                call.finish(outcome, result)  # output checks may raise OutputRejected: the caller's
            return result

        return request

    return make


def _async_request(sdk: SDK) -> Callable[[Any], Callable[..., Any]]:
    def make(original: Any) -> Callable[..., Any]:
        async def request(self: Any, cast_to: Any, options: Any, *args: Any, **kwargs: Any) -> Any:
            ctx = context_now()
            if ctx is None:
                return await original(self, cast_to, options, *args, **kwargs)
            planned = sdk.endpoints.plan(options)
            if planned is None:
                return await original(self, cast_to, options, *args, **kwargs)
            plan, endpoint = planned
            call = begin(ctx, plan)
            options = fitted(call, downgrade(call, options))
            call.record_request(getattr(options, "json_data", None))
            call.sent = False
            token = active.set(call)
            try:
                result = await original(self, cast_to, options, *args, **kwargs)
            except BaseException as exc:
                call.failed(exc)
                raise
            finally:
                active.reset(token)
            outcome = _route(call, endpoint, result, bool(kwargs.get("stream")), sdk)
            if outcome is not None:
                await call.afinish(outcome, result)
            return result

        return request

    return make


def _sleep(original: Any) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):

        async def asleep(self: Any, *args: Any, **kwargs: Any) -> Any:
            retrying(sys.exc_info()[1])  # before the wait: a refused retry is not even waited for
            return await original(self, *args, **kwargs)

        return asleep

    def sleep(self: Any, *args: Any, **kwargs: Any) -> Any:
        retrying(sys.exc_info()[1])
        return original(self, *args, **kwargs)

    return sleep


def _build(original: Any) -> Callable[..., Any]:
    """``_build_request``: the SDK builds each attempt's HTTP request right before sending it; from
    here on the request may have left the process (a cancellation then keeps the reservation)."""

    def build(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = active.get()
        if call is not None:
            call.sent = True
        return original(self, *args, **kwargs)

    return build


def _close(original: Any) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):

        async def aclose(self: Any) -> Any:
            try:
                return await original(self)
            finally:
                streams.closed(self)

        return aclose

    def close(self: Any) -> Any:
        try:
            return original(self)
        finally:
            streams.closed(self)

    return close


def _parse(original: Any) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):

        async def aparse(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = await original(self, *args, **kwargs)
            if raw.pending():  # only raw wrappers returned inside a context are pending
                raw.parsed(self, result)
            return result

        return aparse

    def parse(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if raw.pending():
            raw.parsed(self, result)
        return result

    return parse


def patch(sdk: SDK, module: Any, helper_streams: tuple[Any, ...]) -> Patches:
    """Apply every patch (see the module docstring); returns them for undo. ``helper_streams``:
    the SDK's helper stream classes whose ``close`` does not go through ``Stream.close``."""
    patches = Patches()
    patches.wrap(sdk.sync_client, "request", _sync_request(sdk))
    patches.wrap(sdk.async_client, "request", _async_request(sdk))
    for client in (sdk.sync_client, sdk.async_client):
        patches.wrap(client, "_sleep_for_retry", _sleep)
    patches.wrap(sdk.base_client, "_build_request", _build)
    for stream_type in sdk.stream_types:
        patches.wrap(stream_type, "close", _close)
    for helper in helper_streams:
        if isinstance(helper, type):
            patches.wrap(helper, "close", _close)
    for raw_type in sdk.raw_types:
        patches.wrap(raw_type, "parse", _parse)
    return patches
