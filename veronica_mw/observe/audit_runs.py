"""Audit records regrouped as runs: each context with its calls, events, halt and child contexts.

This is what ``veronica-mw audit show`` draws and ``audit calls`` / ``replay`` read. Records of
several processes (chain files) are merged by the context's chain id, which is unique across
processes. Reading is lenient; ``audit verify`` is what judges integrity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._audit_read import iter_records

__all__ = ["Call", "Run", "load_runs", "replayable", "roots"]


@dataclass(slots=True)
class Call:
    chain: str
    call: int
    parent_call: int | None
    kind: str
    name: str
    model: str | None = None
    status: str = "running"  # admitted, never settled (the process stopped mid-call)
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    duration_ms: float = 0.0
    error: str | None = None
    request: dict[str, Any] | None = None
    response_text: str | None = None
    t: float = 0.0  # admission time
    children: list[Call] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "chain": self.chain,
            "call": self.call,
            "parent_call": self.parent_call,
            "kind": self.kind,
            "name": self.name,
            "model": self.model,
            "status": self.status,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost_usd": self.cost_usd,
            "duration_ms": self.duration_ms,
            "error": self.error,
            "request": self.request,
            "response_text": self.response_text,
        }


@dataclass(slots=True)
class Run:
    chain: str
    parent_chain: str | None = None
    name: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    config_digest: str | None = None
    started: float = 0.0
    usage: dict[str, Any] | None = None  # from context_ended: None while (or if never) ended
    halt: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[int, Call] = field(default_factory=dict)
    children: list[Run] = field(default_factory=list)

    @property
    def label(self) -> str:
        method, path = self.attributes.get("method"), self.attributes.get("path")
        if method or path:
            return f"{method or ''} {path or ''}".strip()
        return self.name or "context"

    def call_tree(self) -> list[Call]:
        """Top-level calls, each with its nested calls, in call order."""
        roots: list[Call] = []
        for call in sorted(self.calls.values(), key=lambda c: c.call):
            call.children = []
        for call in sorted(self.calls.values(), key=lambda c: c.call):
            parent = self.calls.get(call.parent_call) if call.parent_call is not None else None
            (parent.children if parent is not None else roots).append(call)
        return roots

    def descendants(self) -> list[Run]:
        """This run and every context nested in it, depth first."""
        out = [self]
        for child in self.children:
            out.extend(child.descendants())
        return out


def load_runs(
    paths: Iterable[str | Path],
    refusals: list[dict[str, Any]] | None = None,
    clean: Callable[[Any], Any] | None = None,
) -> dict[str, Run]:
    """Every run in the named files, keyed by chain id; ``children`` link nested contexts.
    ``refusals`` (when given) receives the ``refused`` records: requests without a context.
    ``clean`` (when given) is applied to every record first (the CLI makes them terminal-safe)."""
    runs: dict[str, Run] = {}

    def run_of(chain: str) -> Run:
        run = runs.get(chain)
        if run is None:
            run = runs[chain] = Run(chain)
        return run

    for record in iter_records(paths):
        if clean is not None:
            record = clean(record)
        kind, chain = record.get("type"), record.get("chain")
        if kind == "refused" and refusals is not None:
            refusals.append(record)
        if not isinstance(chain, str):
            continue
        run = run_of(chain)
        if kind == "context_started":
            run.parent_chain = record.get("parent_chain")
            run.name = record.get("name")
            run.attributes = record.get("attributes") or {}
            run.limits = record.get("limits") or {}
            run.config_digest = record.get("config_digest")
            run.started = record.get("t", 0.0)
        elif kind in ("call_admitted", "call") and isinstance(record.get("call"), int):
            _merge_call(run, record)
        elif kind == "event":
            run.events.append(record)
        elif kind == "halt":
            run.halt = record
        elif kind == "context_ended":
            run.usage = record.get("usage")
    for run in runs.values():
        parent = runs.get(run.parent_chain) if run.parent_chain else None
        if parent is not None and parent is not run:
            parent.children.append(run)
    for run in runs.values():
        run.children.sort(key=lambda r: r.started)
    return runs


def _merge_call(run: Run, record: dict[str, Any]) -> None:
    number = record["call"]
    call = run.calls.get(number)
    if call is None:
        call = run.calls[number] = Call(
            run.chain, number, record.get("parent_call"), str(record.get("kind")), str(record.get("name"))
        )
    call.model = record.get("model") or call.model
    if record.get("type") == "call_admitted" or not call.t:
        call.t = float(record.get("t") or 0.0)  # when it started: the order calls are replayed in
    if record.get("type") == "call":
        call.status = str(record.get("status"))
        call.tokens_in = int(record.get("tokens_in") or 0)
        call.tokens_out = int(record.get("tokens_out") or 0)
        call.cost_usd = float(record.get("cost_usd") or 0.0)
        call.duration_ms = float(record.get("duration_ms") or 0.0)
        call.error = record.get("error")
        call.request = record.get("request")
        call.response_text = record.get("response_text")


def roots(runs: dict[str, Run]) -> list[Run]:
    """Runs that are nobody's child, oldest first."""
    return sorted(
        (r for r in runs.values() if not r.parent_chain or r.parent_chain not in runs),
        key=lambda r: r.started,
    )


def replayable(run: Run) -> list[Call]:
    """The LLM calls of ``run`` and its nested contexts, in the order they were made."""
    calls = [c for r in run.descendants() for c in r.calls.values() if c.kind == "llm"]
    return sorted(calls, key=lambda c: (c.t, c.chain, c.call))
