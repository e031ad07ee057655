"""Where an ``ApprovalQueue`` keeps pending requests and decisions: this process, or Redis.

Records are JSON-ready dicts (``ApprovalRequest.as_dict()``); a decision is
``{"decision": "approve" | "reject" | "edit" | "expired", "message": ..., "arguments": ...}``.
``decide`` answers ``"ok"``, ``"unknown"`` (no such request) or ``"decided"`` (already decided or
expired), which the approvals app turns into 200, 404 and 409.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from typing import Any, Protocol

# A request is decidable until its waiter gives up; this grace covers clocks and scheduling.
EXPIRY_GRACE_S = 1.0


class Store(Protocol):
    async def add(self, record: dict[str, Any]) -> None: ...

    async def wait(self, request_id: str) -> dict[str, Any]: ...

    async def decide(self, request_id: str, decision: dict[str, Any]) -> str: ...

    async def pending(self) -> list[dict[str, Any]]: ...

    async def get(self, request_id: str) -> dict[str, Any] | None: ...


def expired(record: dict[str, Any], now: float | None = None) -> bool:
    return (time.time() if now is None else now) > float(record.get("expires", 0.0)) + EXPIRY_GRACE_S


class _Entry:
    __slots__ = ("record", "decision", "waiters")

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self.decision: dict[str, Any] | None = None
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[dict[str, Any]]]] = []


def _resolve(future: asyncio.Future[dict[str, Any]], decision: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(decision)


class LocalStore:
    """In-process store: one worker process. Thread-safe, and a waiter may sit on any event loop
    (the server's, or the private loop of a sync tool call): decisions are handed over with
    ``call_soon_threadsafe``."""

    def __init__(self, history: int = 1000) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._decided: OrderedDict[str, _Entry] = OrderedDict()  # so a late decision is a 409
        self._history = history

    async def add(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._entries[record["id"]] = _Entry(record)

    async def wait(self, request_id: str) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        with self._lock:
            entry = self._entries.get(request_id) or self._decided.get(request_id)
            if entry is None:
                raise KeyError(request_id)
            if entry.decision is not None:
                return entry.decision
            entry.waiters.append((loop, future))
        return await future

    async def decide(self, request_id: str, decision: dict[str, Any]) -> str:
        with self._lock:
            entry = self._entries.get(request_id)
            if entry is None:
                return "decided" if request_id in self._decided else "unknown"
            if decision.get("decision") != "expired" and expired(entry.record):
                decision = {"decision": "expired", "message": "no decision in time"}
                result = "decided"
            else:
                result = "ok"
            entry.decision = decision
            del self._entries[request_id]
            self._decided[request_id] = entry
            while len(self._decided) > self._history:
                self._decided.popitem(last=False)
            waiters, entry.waiters = entry.waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future, decision)
            except RuntimeError:  # that loop is closed: its waiter is gone
                pass
        return result

    async def pending(self) -> list[dict[str, Any]]:
        now = time.time()
        with self._lock:
            records = [e.record for e in self._entries.values() if not expired(e.record, now)]
        return sorted(records, key=lambda r: float(r.get("created", 0.0)))

    async def get(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(request_id) or self._decided.get(request_id)
            if entry is None:
                return None
            return {**entry.record, "status": (entry.decision or {}).get("decision", "pending")}
