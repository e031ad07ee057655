"""``ApprovalQueue``: a ready approver for web apps -- each request waits until a person decides.

``RequireApproval(["send_email"], queue)`` parks every matching tool call in the queue, and
``queue.asgi_app()`` (mount it anywhere) serves the decisions: a JSON API for programs and a small
HTML page for people (see :mod:`veronica_mw.control._queue_app`). With ``redis_url`` the pending
requests and decisions live in Redis, so a decision posted to any worker reaches the worker whose
request waits. Waiting is ``await``-ing: an async endpoint waiting for a decision leaves its worker
free for other requests.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from ._queue_store import LocalStore, Store
from .approval import ApprovalRequest, Approve, Edit, Reject

if TYPE_CHECKING:
    from ..web.types import ASGIApp

__all__ = ["ApprovalQueue"]

_MIN_TOKEN = 16


def _jsonable(value: Any) -> Any:
    """Arguments as JSON (what the page shows and Redis stores); anything else by its repr."""
    return json.loads(json.dumps(value, default=repr))


class ApprovalQueue:
    """An approver that waits for a person (use it with ``RequireApproval``).

    ``token``: the secret that grants access to the decisions (``Authorization: Bearer <token>``
    for the JSON API; typed once into the page's form by a person), at least 16 characters --
    ``secrets.token_urlsafe()`` makes one. ``redis_url``: share pending requests and decisions
    between worker processes and machines (``pip install "veronica-mw[redis]"``); without it they
    live in this process.
    """

    def __init__(
        self, token: str, redis_url: str | None = None, *, prefix: str = "veronica-mw:approvals:"
    ) -> None:
        if not isinstance(token, str) or len(token) < _MIN_TOKEN:
            raise ValueError(
                f"token must be a str of at least {_MIN_TOKEN} characters (e.g. secrets.token_urlsafe())"
            )
        self._token = token
        self._store: Store
        if redis_url is not None:
            from ._queue_redis import RedisStore

            self._store = RedisStore(redis_url, prefix)
        else:
            self._store = LocalStore()
        self.redis_url = redis_url

    @property
    def token(self) -> str:
        return self._token

    async def __call__(self, request: ApprovalRequest) -> Approve | Reject | Edit:
        """Park ``request`` until someone decides (or until it expires: then it is a rejection)."""
        record = {
            **request.as_dict(),
            "arguments": _jsonable(request.arguments),
            "usage": _jsonable(request.usage),
        }
        await self._store.add(record)
        decision: dict[str, Any] | None = None
        try:
            remaining = max(0.0, request.expires - time.time())
            decision = await asyncio.wait_for(self._store.wait(request.id), remaining)
        finally:
            if decision is None:  # timed out or cancelled: later decisions get a 409, not a wait
                await asyncio.shield(self._store.decide(request.id, {"decision": "expired"}))
        return _answer(decision)

    async def pending(self) -> list[dict[str, Any]]:
        """The requests waiting for a decision, oldest first (JSON-ready dicts)."""
        return await self._store.pending()

    async def get(self, request_id: str) -> dict[str, Any] | None:
        """One request with its ``status`` (``pending``, ``approve``, ``reject``, ``edit``, ``expired``)."""
        return await self._store.get(request_id)

    async def decide(self, request_id: str, answer: Approve | Reject | Edit) -> str:
        """Decide a pending request: ``"ok"``, ``"unknown"`` (no such id) or ``"decided"`` (too late)."""
        if isinstance(answer, Approve):
            decision: dict[str, Any] = {"decision": "approve"}
        elif isinstance(answer, Reject):
            decision = {"decision": "reject", "message": str(answer.message)}
        elif isinstance(answer, Edit):
            if not isinstance(answer.arguments, dict):
                raise TypeError("edited arguments must be a JSON object")
            decision = {"decision": "edit", "arguments": _jsonable(answer.arguments)}
        else:
            raise TypeError(f"answer must be Approve(), Reject(message) or Edit(arguments), got {answer!r}")
        decision["decided_at"] = time.time()
        return await self._store.decide(request_id, decision)

    def asgi_app(self, *, title: str = "Pending approvals") -> ASGIApp:
        """The decisions app: ``GET /`` (JSON, or HTML for browsers), ``POST /{id}/approve``,
        ``POST /{id}/reject`` (``{"message": ...}``), ``POST /{id}/edit`` (``{"arguments": {...}}``)."""
        from ._queue_app import ApprovalsApp

        return ApprovalsApp(self, title=title)

    def __repr__(self) -> str:
        where = "redis" if self.redis_url else "local"
        return f"<ApprovalQueue {where}>"


def _answer(decision: dict[str, Any]) -> Approve | Reject | Edit:
    kind = decision.get("decision")
    if kind == "approve":
        return Approve()
    if kind == "edit":
        return Edit(decision.get("arguments"))
    if kind == "reject":
        return Reject(str(decision.get("message") or "rejected by a reviewer"))
    return Reject("no decision in time")
