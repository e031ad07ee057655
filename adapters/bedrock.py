"""Amazon Bedrock instrumentation (boto3 ``bedrock-runtime``): each ``converse`` call is one step.

Hooked through botocore's own event system, not by patching boto3: ``instrument()`` registers
handlers on boto3's default session, so every ``boto3.client("bedrock-runtime")`` made afterwards
carries them (:func:`instrument_client` adds them to a client made before, or from another
session). Inside an execution context, ``before-parameter-build.bedrock-runtime.Converse``
admits the step before the request is even serialized — with its worst case reserved: estimated
prompt tokens (messages, system, tools) plus ``inferenceConfig.maxTokens`` or the configured
default — and ``after-call.bedrock-runtime.Converse`` settles it with the usage Bedrock reported
(``usage.inputTokens``/``outputTokens``, cache reads included), priced with genai-prices under
provider ``aws`` for the ``modelId``; with no usage it is charged an estimate. An error response
costs nothing. Not covered yet: ``converse_stream`` and ``invoke_model`` (not steps: they pass
through), and botocore's own retries do not draw from ``max_retries_total``.
"""

from __future__ import annotations

from .. import MissingFrameworkError

try:
    import boto3 as _boto3  # type: ignore[import-untyped]  # boto3 ships no type hints
except ImportError as exc:
    raise MissingFrameworkError("bedrock", "bedrock", exc) from exc

import threading
from collections.abc import Mapping
from typing import Any

from ..kernel.pricing import TokenUsage
from ._provider_calls import Outcome, Plan, ProviderCall, begin, context_now, limit, text_tokens

__all__ = ["instrument", "instrument_client", "instrumented", "uninstrument"]

PROVIDER = "aws"  # genai-prices provider id of Bedrock
_KEY = "veronica_mw_call"  # where the step travels in botocore's per-request context dict
_BEFORE = "before-parameter-build.bedrock-runtime.Converse"
_AFTER = "after-call.bedrock-runtime.Converse"
_ERROR = "after-call-error.bedrock-runtime.Converse"
_ID = "veronica_mw.bedrock"  # unique_id of each handler: registering twice is a no-op


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _plan(params: Mapping[str, Any]) -> Plan:
    model = params.get("modelId")
    config = params.get("inferenceConfig")
    output = limit(config if isinstance(config, Mapping) else {}, "maxTokens")
    tokens_in = text_tokens(params.get("messages"), params.get("system"), params.get("toolConfig"))
    return Plan("bedrock.converse", model if isinstance(model, str) else None, PROVIDER, tokens_in, output)


def _outcome(parsed: Mapping[str, Any], model: str | None) -> Outcome:
    usage = parsed.get("usage")
    tokens = None
    if isinstance(usage, Mapping):
        cached = _count(usage.get("cacheReadInputTokens"))
        written = _count(usage.get("cacheWriteInputTokens"))
        tokens = TokenUsage(
            _count(usage.get("inputTokens")) + cached + written,
            _count(usage.get("outputTokens")),
            cached,
            written,
        )
    chars = 0
    message = (parsed.get("output") or {}).get("message") or {}
    for block in message.get("content") or ():
        if isinstance(block, Mapping):
            text = block.get("text")
            chars += len(text) if isinstance(text, str) else 0
            tool = block.get("toolUse")
            if isinstance(tool, Mapping):
                chars += len(str(tool.get("name", ""))) + len(str(tool.get("input", "")))
    return tokens, model, chars


def _admit(params: Any = None, context: Any = None, **_: Any) -> None:
    ctx = context_now()
    if ctx is None or not isinstance(params, Mapping) or not isinstance(context, dict):
        return
    context[_KEY] = begin(ctx, _plan(params))  # ExecutionHalted here: nothing was sent


def _settle(http_response: Any = None, parsed: Any = None, context: Any = None, **_: Any) -> None:
    call: ProviderCall | None = context.pop(_KEY, None) if isinstance(context, dict) else None
    if call is None:
        return
    status = getattr(http_response, "status_code", 500)
    if status >= 300 or not isinstance(parsed, Mapping):
        call.failed(RuntimeError(f"bedrock converse answered HTTP {status}"))  # errors cost nothing
        return
    call.finish(_outcome(parsed, call.plan.model), parsed)


def _failed(exception: Any = None, context: Any = None, **_: Any) -> None:
    call: ProviderCall | None = context.pop(_KEY, None) if isinstance(context, dict) else None
    if call is not None:
        call.failed(exception if isinstance(exception, BaseException) else RuntimeError(str(exception)))


_HANDLERS = ((_BEFORE, _admit), (_AFTER, _settle), (_ERROR, _failed))
_lock = threading.Lock()
_sessions: list[Any] = []  # the botocore sessions instrument() registered on


def _register(events: Any) -> None:
    for event, handler in _HANDLERS:
        events.register(event, handler, unique_id=f"{_ID}.{event}")


def instrument_client(client: Any) -> Any:
    """Add the handlers to an existing ``bedrock-runtime`` client (idempotent); returns it."""
    _register(client.meta.events)
    return client


def instrument() -> None:
    """Register the handlers on boto3's default session (idempotent); see the module docstring."""
    with _lock:
        if _sessions:
            return
        session = _boto3._get_default_session()._session  # the botocore session behind boto3.client()
        _register(session)
        _sessions.append(session)


def uninstrument() -> None:
    """Unregister the handlers from the sessions instrument() used (clients made since keep theirs)."""
    with _lock:
        while _sessions:
            session = _sessions.pop()
            for event, handler in _HANDLERS:
                session.unregister(event, handler, unique_id=f"{_ID}.{event}")


def instrumented() -> bool:
    return bool(_sessions)
