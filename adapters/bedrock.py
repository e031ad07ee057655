"""Amazon Bedrock instrumentation (boto3 ``bedrock-runtime``): each ``converse``,
``converse_stream``, ``invoke_model`` and ``invoke_model_with_response_stream`` call is one step.

Hooked through botocore's own event system, not by patching boto3: ``instrument()`` registers
handlers on boto3's default session, so every ``boto3.client("bedrock-runtime")`` made afterwards
carries them (:func:`instrument_client` adds them to a client made before, or from another
session). Inside an execution context, per call:

- ``before-parameter-build``: notes the ``modelId`` (it travels in the URL, not the body);
- ``before-call`` (the request is serialized, about to be sent): admits the step with its worst
  case reserved -- estimated prompt tokens plus the body's output limit (``inferenceConfig.maxTokens``,
  an invoke body's ``max_tokens`` and its per-model names, :mod:`._bedrock_bodies`) or the configured
  default -- and raises ExecutionHalted, with nothing sent, when a limit refuses it. Under
  ``FitOutputToBudget`` the serialized body is sent with that limit lowered to what is left;
- ``request-created`` (each attempt, right before it is signed and sent): marks the request sent;
  an attempt after the first is botocore's own retry and draws one retry from
  ``max_retries_total`` -- refused when it is spent, the retry is not sent (ExecutionHalted);
- ``after-call``: settles with the usage Bedrock reported (converse ``usage``; invoke_model's
  ``x-amzn-bedrock-*-token-count`` headers or its body's usage), priced with genai-prices under
  provider ``aws`` for the ``modelId``, estimated from the generated text when missing (never
  $0); a stream is settled when its EventStream ends (:mod:`._bedrock_stream`): from the
  ``metadata`` event (converse_stream) or the last chunk's invocation metrics (invoke streams);
- ``after-call-error``: the request failed (an error costs nothing).

Not covered: ``DowngradeAt`` (a Bedrock request keeps its ``modelId``).
"""

from __future__ import annotations

from .. import MissingFrameworkError

try:
    import boto3 as _boto3  # type: ignore[import-untyped]  # boto3 ships no type hints
except ImportError as exc:
    raise MissingFrameworkError("bedrock", "bedrock", exc) from exc

import io
import json
import threading
from collections.abc import Mapping
from typing import Any

from . import _bedrock_bodies as bodies
from . import _bedrock_stream as stream
from ._provider_calls import Plan, ProviderCall, begin, context_now
from ._provider_fit import lowered_body

__all__ = ["instrument", "instrument_client", "instrumented", "uninstrument"]

PROVIDER = bodies.PROVIDER
_KEY = "veronica_mw_call"  # where the step travels in botocore's per-request context dict
_MODEL = "veronica_mw_model"  # the modelId, noted before the parameters are serialized
_LAST = "veronica_mw_retry_error"  # what the attempt botocore is about to retry failed with
_ID = "veronica_mw.bedrock"  # unique_id of each handler: registering twice is a no-op
_OPERATIONS = {
    "Converse": "bedrock.converse",
    "ConverseStream": "bedrock.converse_stream",
    "InvokeModel": "bedrock.invoke_model",
    "InvokeModelWithResponseStream": "bedrock.invoke_model_with_response_stream",
}


def _note_model(params: Any = None, context: Any = None, **_: Any) -> None:
    if isinstance(context, dict) and isinstance(params, Mapping) and context_now() is not None:
        model = params.get("modelId")
        context[_MODEL] = model if isinstance(model, str) else None


def _plan(
    operation: str, request_dict: dict[str, Any], model: str | None
) -> tuple[Plan, dict[str, Any] | None]:
    raw: Any = request_dict.get("body")
    if hasattr(raw, "read"):  # a file-like invoke body: read once, sent as the bytes read
        raw = request_dict["body"] = raw.read()
    body = bodies.invoke_body(raw)
    if operation.startswith("InvokeModel"):
        return bodies.invoke_plan(body, raw, model, _OPERATIONS[operation]), body
    return bodies.converse_plan(body or {}, model, _OPERATIONS[operation]), body


def _admit(params: Any = None, model: Any = None, context: Any = None, **_: Any) -> None:
    ctx = context_now()
    operation = getattr(model, "name", None)
    if ctx is None or not isinstance(context, dict) or _MODEL not in context or operation not in _OPERATIONS:
        return
    if not isinstance(params, dict):
        return
    plan, body = _plan(operation, params, context.pop(_MODEL))
    call = begin(ctx, plan)  # ExecutionHalted here: nothing was sent
    call.sent = False  # until botocore builds the first attempt
    if plan.fitted is not None and body is not None:  # FitOutputToBudget lowered the limit
        body = lowered_body(body, plan)
        params["body"] = json.dumps(body).encode()
    if body is not None:
        call.record_request({**body, "model": plan.model})
    context[_KEY] = call


def _sending(request: Any = None, **_: Any) -> None:
    context: Any = getattr(request, "context", None)
    call: ProviderCall | None = context.get(_KEY) if isinstance(context, dict) else None
    if call is None:
        return
    attempt = (context.get("retries") or {}).get("attempt", 1)
    if isinstance(attempt, int) and attempt > 1:  # botocore's retry of a failed attempt
        call.retry(context.pop(_LAST, None))  # ExecutionHalted: this attempt is not sent
    call.sent = True


def _needs_retry(
    response: Any = None, caught_exception: Any = None, request_dict: Any = None, **_: Any
) -> None:
    """Note why an attempt failed (the retry that may follow draws a retry for it); decides nothing."""
    context = request_dict.get("context") if isinstance(request_dict, dict) else None
    if not isinstance(context, dict) or _KEY not in context:
        return
    if isinstance(caught_exception, BaseException):
        context[_LAST] = caught_exception
    elif isinstance(response, tuple) and response:
        status = getattr(response[0], "status_code", 0)
        if status >= 300:
            code = (
                ((response[1] or {}).get("Error") or {}).get("Code", "")
                if isinstance(response[1], dict)
                else ""
            )
            context[_LAST] = RuntimeError(f"bedrock answered HTTP {status} {code}".rstrip())


def _settle(
    http_response: Any = None, parsed: Any = None, model: Any = None, context: Any = None, **_: Any
) -> None:
    call: ProviderCall | None = context.pop(_KEY, None) if isinstance(context, dict) else None
    if call is None:
        return
    status = getattr(http_response, "status_code", 500)
    if status >= 300 or not isinstance(parsed, dict):
        call.failed(RuntimeError(f"{call.plan.operation} answered HTTP {status}"))  # errors cost nothing
        return
    operation = getattr(model, "name", None)
    if operation == "ConverseStream":
        stream.observe(call, parsed, "stream", stream.ConverseMeter())
    elif operation == "InvokeModelWithResponseStream":
        stream.observe(call, parsed, "body", stream.InvokeMeter())
    elif operation == "InvokeModel":
        _settle_invoke(call, http_response, parsed)
    else:
        call.finish(bodies.converse_outcome(parsed), parsed)


def _settle_invoke(call: ProviderCall, http_response: Any, parsed: dict[str, Any]) -> None:
    """Read the (small, JSON) invoke body to find its usage; the caller gets a StreamingBody of
    the same bytes."""
    from botocore.response import StreamingBody  # type: ignore[import-untyped]

    body: Any = parsed.get("body")
    try:
        data = body.read() if hasattr(body, "read") else body
    except BaseException:
        call.abandon()  # sent, and its answer lost half-way: the reservation is kept as spent
        raise
    if not isinstance(data, (bytes, bytearray)):
        call.abandon()
        return
    data = bytes(data)
    parsed["body"] = StreamingBody(io.BytesIO(data), len(data))
    headers = getattr(http_response, "headers", None)
    outcome = bodies.invoke_outcome(headers if isinstance(headers, Mapping) else {}, data)
    call.record_response(text=data.decode(errors="replace"))
    call.finish(outcome)


def _failed(exception: Any = None, context: Any = None, **_: Any) -> None:
    call: ProviderCall | None = context.pop(_KEY, None) if isinstance(context, dict) else None
    if call is not None:
        call.failed(exception if isinstance(exception, BaseException) else RuntimeError(str(exception)))


_HANDLERS = tuple(
    (f"{event}.bedrock-runtime.{operation}", handler)
    for operation in _OPERATIONS
    for event, handler in (
        ("before-parameter-build", _note_model),
        ("before-call", _admit),
        ("request-created", _sending),
        ("needs-retry", _needs_retry),
        ("after-call", _settle),
        ("after-call-error", _failed),
    )
)
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
