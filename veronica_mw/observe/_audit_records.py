"""Audit records built on the writer thread from what the observer captured on the request thread.

Each ``AuditLog`` observer method queues a tuple ``(builder, t, ...)``; :func:`format_item` calls the
builder with the rest and stamps the time. Values that come from outside the kernel (event data,
context attributes) are made JSON-ready here; call bodies already were, when they were recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..kernel._io import jsonable


def context_started(
    t: float, chain: str, parent: str | None, name: Any, config: Any, attrs: Any
) -> dict[str, Any]:
    limits, digest = config
    record = {"type": "context_started", "chain": chain, "parent_chain": parent, "limits": limits}
    record["config_digest"] = digest
    if name is not None:
        record["name"] = str(name)
    if attrs:
        record["attributes"] = jsonable(attrs)
    return record


def call_admitted(
    t: float, chain: str, call: int, parent: int | None, kind: str, name: str, model: Any, reserved: float
) -> dict[str, Any]:
    return {
        "type": "call_admitted",
        "chain": chain,
        "call": call,
        "parent_call": parent,
        "kind": kind,
        "name": name,
        "model": model,
        "reserved_usd": reserved,
    }


def call(
    t: float, chain: str, call: int, parent: int | None, kind: str, name: str, model: Any,
    tokens_in: int, tokens_out: int, cost: float, status: str, duration_ms: float, error: Any, io: Any,
) -> dict[str, Any]:  # fmt: skip
    record = {
        "type": "call",
        "chain": chain,
        "call": call,
        "parent_call": parent,
        "kind": kind,
        "name": name,
        "model": model,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cost_usd": cost,
        "status": status,
        "duration_ms": round(duration_ms, 3),
    }
    if error is not None:
        record["error"] = error
    if io:  # present when bodies are kept and the adapter (or call_llm) recorded them
        request = io.get("request")
        record["request"] = request
        record["response_text"] = io.get("response_text")
        if model is None and isinstance(request, dict) and isinstance(request.get("model"), str):
            record["model"] = request["model"]  # the model asked for, when nothing reported one
    return record


# What an approval decision says about who decided (see veronica_mw.control): kept as the event
# record's ``decision``, so an auditor finds it without knowing each event's data layout.
DECISION_KEYS = ("approver", "args_sha256", "edited_args_sha256", "decided_at")


def event(t: float, chain: str, kind: str, detail: str, data: Mapping[str, Any]) -> dict[str, Any]:
    record = {"type": "event", "chain": chain, "kind": kind, "detail": detail, "data": jsonable(data)}
    if kind.startswith("approval_") and data:
        decision = {k: jsonable(data[k]) for k in DECISION_KEYS if data.get(k) is not None}
        if decision:
            record["decision"] = decision
    return record


def halt(
    t: float, chain: str, reason: str, detail: str, usage: dict[str, Any], limits: dict[str, Any]
) -> dict[str, Any]:
    """A halt with the usage then and the limits that were in force (what it was measured against)."""
    return {
        "type": "halt",
        "chain": chain,
        "reason": reason,
        "detail": detail,
        "usage": usage,
        "limits": limits,
    }


def context_ended(t: float, chain: str, usage: dict[str, Any], reason: str | None) -> dict[str, Any]:
    return {"type": "context_ended", "chain": chain, "usage": usage, "halted": reason}


def refused(t: float, reason: str, detail: str, status: int) -> dict[str, Any]:
    return {"type": "refused", "reason": reason, "detail": detail, "status": status}


def format_item(item: tuple[Any, ...]) -> dict[str, Any]:
    record: dict[str, Any] = item[0](*item[1:])
    record["t"] = round(item[1], 6)
    return record
