"""Where an ``ApprovalQueue`` keeps pending requests, decisions, sessions and failed sign-ins:
this process, or Redis (:mod:`veronica_mw.control._queue_redis`).

Records are JSON-ready dicts (``ApprovalRequest.as_dict()``); a decision is
``{"decision": "approve" | "reject" | "edit" | "expired", "message", "arguments", "approver",
"decided_at", "args_sha256", "edited_args_sha256", "mac"}``. A request and its decision live and
expire together (one entry), so a decision is recorded at most once: ``decide`` answers ``"ok"``,
``"unknown"`` (no such request) or ``"decided"`` (already decided, or expired), which the approvals
app turns into 200, 404 and 409.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import OrderedDict
from typing import Any, Protocol

# A request is decidable until its waiter gives up; this grace covers scheduling.
EXPIRY_GRACE_S = 1.0
FAILURE_WINDOW_S = 60.0
MAX_FAILURES = 5


class Store(Protocol):
    async def add(self, record: dict[str, Any]) -> None: ...

    async def wait(self, request_id: str) -> dict[str, Any]: ...

    async def decide(self, request_id: str, decision: dict[str, Any]) -> str: ...

    async def pending(self, offset: int = 0, limit: int = 50) -> tuple[list[dict[str, Any]], int]: ...

    async def get(self, request_id: str) -> dict[str, Any] | None: ...

    async def session_add(self, sid_hash: str, approver: str, idle_s: float, absolute_s: float) -> None: ...

    async def session_touch(self, sid_hash: str, idle_s: float, absolute_s: float) -> str | None: ...

    async def session_drop(self, sid_hash: str) -> None: ...

    async def failed(self, client: str) -> None: ...

    async def retry_after(self, client: str) -> int: ...


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
        self._sessions: dict[str, tuple[str, float, float]] = {}  # hash -> approver, created, seen
        self._failures: dict[str, tuple[int, float]] = {}  # client -> count, window start

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

    async def pending(self, offset: int = 0, limit: int = 50) -> tuple[list[dict[str, Any]], int]:
        now = time.time()
        with self._lock:
            records = [e.record for e in self._entries.values() if not expired(e.record, now)]
        records.sort(key=lambda r: float(r.get("created", 0.0)))
        return records[offset : offset + limit], len(records)

    async def get(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(request_id) or self._decided.get(request_id)
            if entry is None:
                return None
            decision = entry.decision or {}
            return {
                **entry.record,
                "status": decision.get("decision", "pending"),
                "approver": decision.get("approver"),
            }

    async def session_add(self, sid_hash: str, approver: str, idle_s: float, absolute_s: float) -> None:
        now = time.time()
        with self._lock:
            for key, (_, created, seen) in list(self._sessions.items()):  # drop the ended ones
                if now - created > absolute_s or now - seen > idle_s:
                    del self._sessions[key]
            self._sessions[sid_hash] = (approver, now, now)

    async def session_touch(self, sid_hash: str, idle_s: float, absolute_s: float) -> str | None:
        now = time.time()
        with self._lock:
            found = self._sessions.get(sid_hash)
            if found is None:
                return None
            approver, created, seen = found
            if now - seen > idle_s or now - created > absolute_s:
                del self._sessions[sid_hash]
                return None
            self._sessions[sid_hash] = (approver, created, now)
            return approver

    async def session_drop(self, sid_hash: str) -> None:
        with self._lock:
            self._sessions.pop(sid_hash, None)

    async def failed(self, client: str) -> None:
        now = time.time()
        with self._lock:
            count, start = self._failures.get(client, (0, now))
            if now - start >= FAILURE_WINDOW_S:
                count, start = 0, now
            self._failures[client] = (count + 1, start)
            if len(self._failures) > 10_000:  # forget finished windows (many addresses)
                for key, (_, begun) in list(self._failures.items()):
                    if now - begun >= FAILURE_WINDOW_S:
                        del self._failures[key]

    async def retry_after(self, client: str) -> int:
        now = time.time()
        with self._lock:
            count, start = self._failures.get(client, (0, now))
        left = FAILURE_WINDOW_S - (now - start)
        return max(1, math.ceil(left)) if count >= MAX_FAILURES and left > 0 else 0
