"""Request/response capture for observers that asked for call bodies (the audit log's ``record_bodies``).

What is kept (:meth:`CallNode.record_io`, or the kernel's own ``call_llm``) is a JSON-ready *copy*
taken at that moment (agents append to their ``messages`` right after the call), with credentials
removed at every level: API keys, auth headers and header dicts never reach an observer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .pricing import _get

# Keys dropped wherever they appear (compared lower-case, "-" read as "_"). Header dicts go whole:
# besides Authorization they carry tokens under vendor-specific names.
SECRET_KEYS = frozenset({
    "api_key", "apikey", "x_api_key", "api_token", "access_token", "refresh_token", "authorization",
    "proxy_authorization", "auth", "bearer", "password", "secret", "client_secret", "cookie", "set_cookie",
    "headers", "extra_headers", "default_headers", "http_client", "client",
})  # fmt: skip
_MAX_DEPTH = 32  # a self-referencing structure ends here instead of recursing forever
_INF = float("inf")


_verdicts: dict[str, bool] = {}  # key -> is it a secret (message keys repeat: role, content, ...)


def is_secret_key(key: str) -> bool:
    verdict = _verdicts.get(key)
    if verdict is None:
        verdict = key.lower().replace("-", "_") in SECRET_KEYS
        if len(_verdicts) < 4096:
            _verdicts[key] = verdict
    return verdict


def jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON-ready deep copy of ``value`` without credentials (objects become their ``repr``)."""
    kind = type(value)
    # Exact-type fast paths first: chat messages are plain dicts, lists and strings.
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if depth >= _MAX_DEPTH:
        return "..."
    if kind is dict or isinstance(value, Mapping):
        return {
            (k if type(k) is str else str(k)): jsonable(v, depth + 1)
            for k, v in value.items()
            if not is_secret_key(k if type(k) is str else str(k))
        }
    if kind is list or kind is tuple:
        return [jsonable(v, depth + 1) for v in value]
    if kind is float or isinstance(value, float):
        return value if value == value and value not in (_INF, -_INF) else repr(value)
    if isinstance(value, (str, int)):  # str/int subclasses (enums)
        return str.__str__(value) if isinstance(value, str) else int(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    dump = getattr(value, "model_dump", None)  # pydantic models (SDK message and tool objects)
    if callable(dump):
        try:
            return jsonable(dump(), depth + 1)
        except Exception:  # an odd model: fall back to its repr
            pass
    return repr(value)


def call_request(args: tuple[Any, ...], kwargs: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    """The request of ``ctx.call_llm(fn, *args, **kwargs)``: messages (or a first positional list of
    role/content dicts; a first positional str is a prompt), model, other keywords, other args."""
    params = {k: v for k, v in kwargs.items() if k not in ("messages", "model")}
    messages = kwargs.get("messages")
    rest = list(args)
    prompt = None
    if messages is None and rest:
        first = rest[0]
        if isinstance(first, list) and all(isinstance(m, Mapping) and "role" in m for m in first):
            messages = rest.pop(0)
        elif isinstance(first, str):
            prompt = rest.pop(0)
    request: dict[str, Any] = {
        "model": kwargs.get("model") if isinstance(kwargs.get("model"), str) else model,
        "messages": jsonable(messages) if messages is not None else None,
        "parameters": jsonable(params),
    }
    if prompt is not None:
        request["prompt"] = prompt
    if rest:
        request["args"] = jsonable(rest)
    return request


def _text_of_blocks(blocks: Any) -> str | None:
    parts = []
    for block in blocks:
        text = block if isinstance(block, str) else _get(block, "text")
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts) if parts else None


def response_text(result: Any) -> str | None:
    """The text of a model response: a string, an OpenAI chat completion or Responses object (or
    dict), an Anthropic message, a LangChain message. None when it has none."""
    if result is None or isinstance(result, (bool, int, float)):
        return None
    if isinstance(result, str):
        return result
    if isinstance(result, bytes):
        return result.decode("utf-8", "replace")
    choices = _get(result, "choices")  # OpenAI chat completions
    if isinstance(choices, (list, tuple)) and choices:
        message = _get(choices[0], "message")
        content = _get(message, "content") if message is not None else _get(choices[0], "text")
        if isinstance(content, str):
            return content
    output_text = _get(result, "output_text")  # OpenAI Responses
    if isinstance(output_text, str):
        return output_text
    content = _get(result, "content")  # Anthropic messages, LangChain messages
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return _text_of_blocks(content)
    text = _get(result, "text")
    return text if isinstance(text, str) else None
