"""Replay recorded LLM calls against another model: "would the cheaper model have answered the same?"

Each recorded request (messages and parameters, from an audit log written with
``record_bodies=True``) is sent again with the new model to an OpenAI-compatible chat-completions
endpoint -- OpenAI itself, or a local Ollama / vLLM / llama.cpp server -- inside an
:class:`ExecutionContext` whose ``max_cost_usd`` is the replay's ceiling: the kernel refuses the
call that would take the replay past it, exactly as it would in production.

The HTTP client is the standard library's ``urllib`` on purpose: no SDK to install, nothing but
the wire format assumed, so any server speaking ``POST {base_url}/chat/completions`` works.
Streaming requests are replayed without streaming (the reply is compared as a whole).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kernel.config import ExecutionConfig, WrapOptions
from ..kernel.exceptions import ExecutionHalted
from ..kernel.execution import ExecutionContext
from ..kernel.observer import Observer
from ..kernel.pricing import TokenUsage, price_usage
from ..kernel.reasons import Decision
from ._redact import MARK, Redactor
from .audit_runs import Call

__all__ = ["ChatClient", "ReplayError", "ReplayReport", "ReplayRow", "replay_calls"]

_NOT_REPLAYED = ("stream", "stream_options", "model", "messages")


class ReplayError(Exception):
    """The endpoint refused or failed a request (HTTP error, bad JSON, unreachable)."""


class ChatClient:
    """A minimal OpenAI-compatible chat-completions client over ``urllib``."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 120.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base URL must start with http:// or https://, got {base_url!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self._timeout = timeout_s

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode("utf-8", "replace")
            raise ReplayError(f"HTTP {exc.code} from {self.url}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ReplayError(f"cannot reach {self.url}: {reason}") from exc
        try:
            reply = json.loads(raw)
        except ValueError as exc:
            raise ReplayError(f"{self.url} did not answer JSON: {raw[:200]!r}") from exc
        if not isinstance(reply, dict):
            raise ReplayError(f"{self.url} answered {type(reply).__name__}, not a JSON object")
        return reply


@dataclass(slots=True)
class ReplayRow:
    index: int
    chain: str
    call: int
    original_model: str | None
    original_tokens: tuple[int, int]
    original_cost_usd: float
    original_text: str | None
    model: str
    status: str = "not run"  # ok | error | halted | skipped | not run
    tokens: tuple[int, int] = (0, 0)
    cost_usd: float = 0.0
    text: str | None = None
    identical: bool | None = None
    duration_ms: float = 0.0
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "chain": self.chain,
            "call": self.call,
            "status": self.status,
            "detail": self.detail,
            "identical": self.identical,
            "original": {
                "model": self.original_model,
                "tokens_in": self.original_tokens[0],
                "tokens_out": self.original_tokens[1],
                "cost_usd": self.original_cost_usd,
                "text": self.original_text,
            },
            "replay": {
                "model": self.model,
                "tokens_in": self.tokens[0],
                "tokens_out": self.tokens[1],
                "cost_usd": self.cost_usd,
                "text": self.text,
                "duration_ms": round(self.duration_ms, 3),
            },
        }


@dataclass(slots=True)
class ReplayReport:
    model: str
    max_cost_usd: float
    rows: list[ReplayRow] = field(default_factory=list)
    halted: str | None = None  # the kernel's reason when the ceiling (or a limit) stopped the replay

    @property
    def complete(self) -> bool:
        return all(row.status in ("ok", "skipped") for row in self.rows)

    def totals(self) -> dict[str, Any]:
        done = [r for r in self.rows if r.status == "ok"]
        return {
            "calls": len(self.rows),
            "replayed": len(done),
            "identical": sum(1 for r in done if r.identical),
            "original": _sums([(r.original_tokens, r.original_cost_usd) for r in self.rows]),
            "replay": _sums([(r.tokens, r.cost_usd) for r in done]),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_cost_usd": self.max_cost_usd,
            "complete": self.complete,
            "halted": self.halted,
            "rows": [r.as_dict() for r in self.rows],
            "totals": self.totals(),
        }


def _sums(values: list[tuple[tuple[int, int], float]]) -> dict[str, Any]:
    return {
        "tokens_in": sum(t[0] for t, _ in values),
        "tokens_out": sum(t[1] for t, _ in values),
        "cost_usd": sum(c for _, c in values),
    }


def replay_request(call: Call, model: str) -> dict[str, Any] | None:
    """The chat-completions body that re-asks ``call`` of ``model`` (None: nothing to replay)."""
    request = call.request
    if not isinstance(request, dict):
        return None
    messages = request.get("messages")
    params = dict(request.get("parameters") or {})
    if not messages and isinstance(request.get("prompt"), str):
        messages = [{"role": "user", "content": request["prompt"]}]
    if not messages:  # a Responses API request: ``input`` is a string or a list of messages
        given = params.pop("input", None)
        if isinstance(given, str):
            messages = [{"role": "user", "content": given}]
        elif isinstance(given, list) and all(isinstance(m, dict) and "role" in m for m in given):
            messages = given
    if not isinstance(messages, list) or not messages:
        return None
    # The system prompt of an Anthropic request (``system``) or a Responses one (``instructions``).
    for name in ("system", "instructions"):
        system = params.pop(name, None)
        if isinstance(system, str) and system:
            messages = [{"role": "system", "content": system}, *messages]
    # Never the log's credentials: whatever a secret name holds, and any value redacted or shaped
    # like a key, stays out of the request (the caller's own key goes in the header).
    body = {
        k: v
        for k, v in params.items()
        if k not in _NOT_REPLAYED and not _REDACTOR.secret_name(k) and not _credential(v)
    }
    body.update({"model": model, "messages": messages, "stream": False})
    return body


_REDACTOR = Redactor()


def _credential(value: Any) -> bool:
    """A value that is, or holds, a credential (or its redaction mark)."""
    if isinstance(value, str):
        return MARK in value or _REDACTOR.text(value) != value
    if isinstance(value, dict):
        return any(_REDACTOR.secret_name(str(k)) or _credential(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_credential(v) for v in value)
    return False


def _hint(call: Call, model: str) -> float:
    """What the original call's token counts would cost on ``model`` (0 when it has no known price)."""
    try:
        return price_usage(TokenUsage(call.tokens_in, call.tokens_out), model)
    except LookupError:
        return 0.0


def _reply_text(reply: dict[str, Any]) -> str | None:
    choices = reply.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return content
    return None


def replay_calls(
    calls: Sequence[Call],
    *,
    model: str,
    client: ChatClient,
    max_cost_usd: float,
    audit: Observer | None = None,
) -> ReplayReport:
    """Re-send each call's recorded request with ``model``; stop where ``max_cost_usd`` says so."""
    report = ReplayReport(model, max_cost_usd)
    # One step per call; a failed call is reported on its row and must not end the replay, so the
    # retry budget covers every call failing. The ceiling is the only limit that can stop it.
    steps = max(len(calls), 1)
    config = ExecutionConfig(max_cost_usd=max_cost_usd, max_steps=steps, max_retries_total=steps)
    ctx = ExecutionContext(config, audit=audit, attributes={"replay_model": model})
    with ctx:
        for index, call in enumerate(calls, start=1):
            row = ReplayRow(
                index, call.chain, call.call, call.model, (call.tokens_in, call.tokens_out),
                call.cost_usd, call.response_text, model,
            )  # fmt: skip
            report.rows.append(row)
            if report.halted is not None:
                row.detail = f"not run: {report.halted}"
                continue
            body = replay_request(call, model)
            if body is None:
                row.status, row.detail = "skipped", "no request recorded (log written without record_bodies)"
                continue
            try:
                node = ctx.begin_call(
                    "llm", WrapOptions("replay", cost_estimate_hint=_hint(call, model), model=model)
                )
            except ExecutionHalted as halt:
                report.halted = halt.reason
                row.status, row.detail = "halted", f"{halt.reason}: {halt.detail}"
                continue
            node.record_io(request=body)
            started = time.monotonic()
            try:
                reply = client.create(body)
            except ReplayError as exc:
                node.fail(exc)
                row.status, row.detail = "error", str(exc)
                row.duration_ms = (time.monotonic() - started) * 1000.0
                continue
            row.duration_ms = (time.monotonic() - started) * 1000.0
            row.text = _reply_text(reply)
            node.record_io(response_text=row.text)
            usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else None
            decision = node.commit(reply, usage=usage, model=model)
            row.status = "ok"
            row.tokens, row.cost_usd = (node.tokens_in, node.tokens_out), node.cost_usd
            row.identical = row.text == call.response_text if call.response_text is not None else None
            if decision is Decision.HALT:
                report.halted = ctx.abort_reason
    return report
