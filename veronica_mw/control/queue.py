"""``ApprovalQueue``: a ready approver for web apps -- each request waits until a person decides.

``RequireApproval(["send_email"], queue)`` parks every matching tool call in the queue, and
``queue.asgi_app()`` (mount it anywhere) serves the decisions: a JSON API for programs and a small
HTML page for people (see :mod:`veronica_mw.control._queue_app`). With ``redis_url`` the pending
requests, decisions, sessions and failed sign-ins live in Redis (standalone or Cluster), so a
decision posted to any worker reaches the worker whose request waits. A queue only sees its own
namespace, and a waiter applies only a decision it can authenticate (see
:mod:`veronica_mw.control._queue_auth`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._queue_auth import (
    args_sha256,
    check_name,
    check_namespace,
    check_token,
    default_namespace,
    derive,
    sign_decision,
    verify_decision,
)
from ._queue_store import LocalStore, Store
from .approval import ApprovalRequest, Approve, Edit, Reject

if TYPE_CHECKING:
    from ..web.types import ASGIApp

__all__ = ["ApprovalQueue"]

logger = logging.getLogger("veronica_mw")
Authenticate = Callable[[Mapping[str, str]], "str | None"]


def _jsonable(value: Any) -> Any:
    """Arguments as JSON (what the page shows and Redis stores); anything else by its repr."""
    return json.loads(json.dumps(value, default=repr))


def _positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
    return float(value)


class ApprovalQueue:
    """An approver that waits for a person (use it with ``RequireApproval``).

    Who may decide: ``token`` (one approver named ``"default"``), and/or ``approvers`` (``{"alice":
    token_a, ...}``): each token is a secret of at least 128 bits (``secrets.token_urlsafe(16)``),
    sent as ``Authorization: Bearer <token>`` to the JSON API or typed once into the page's form;
    ``authenticate``: ``(headers) -> approver name | None`` for a reverse proxy that signs people
    in and sets a trusted header. ``secret``: the key of sessions and of the decisions' MAC
    (default: derived from the tokens; required with only ``authenticate``). ``namespace``: what
    this queue sees (default: derived from the secret: two queues with different tokens never see
    each other's items). ``redis_url``: a Redis URL (any node of a Cluster too) or a redis-py
    client, to share everything between workers (``pip install "veronica-mw[redis]"``); without
    it, this process. ``secure_cookies``: None (Secure and ``__Host-`` unless served over plain
    http to localhost), True or False. ``session_idle_s`` / ``session_max_s``: a session ends
    after 30 minutes unused or 8 hours after sign-in.
    """

    def __init__(
        self,
        token: str | None = None,
        redis_url: Any = None,
        *,
        approvers: Mapping[str, str] | None = None,
        authenticate: Authenticate | None = None,
        secret: str | None = None,
        namespace: str | None = None,
        prefix: str = "veronica-mw:approvals:",
        secure_cookies: bool | None = None,
        session_idle_s: float = 30 * 60,
        session_max_s: float = 8 * 3600,
    ) -> None:
        tokens: dict[str, str] = {}
        if token is not None:
            tokens["default"] = check_token(token)
        for name, value in (approvers or {}).items():
            if check_name(name) in tokens:
                raise ValueError(f"approver {name!r} is given twice")
            tokens[name] = check_token(value, f"the token of approver {name!r}")
        if len(set(tokens.values())) < len(tokens):
            raise ValueError("two approvers share one token: each person needs a token of their own")
        if authenticate is not None and not callable(authenticate):
            raise TypeError(
                f"authenticate must be a callable (headers) -> approver name | None, got {authenticate!r}"
            )
        if not tokens and authenticate is None:
            raise ValueError("give token=, approvers= or authenticate=: someone must be able to decide")
        if secret is None:
            if not tokens:
                raise ValueError("with only authenticate=, give secret= (the key of sessions and decisions)")
            secret = "\x00".join(f"{n}={t}" for n, t in sorted(tokens.items()))
        else:
            check_token(secret, "secret")
        if secure_cookies is not None and not isinstance(secure_cookies, bool):
            raise TypeError(f"secure_cookies must be None, True or False, got {secure_cookies!r}")
        self._tokens = tokens
        self.authenticate = authenticate
        self.namespace = check_namespace(namespace) if namespace is not None else default_namespace(secret)
        self._secret = secret
        self._decision_key = derive(secret, "decision")
        self.secure_cookies = secure_cookies
        self.session_idle_s = _positive(session_idle_s, "session_idle_s")
        self.session_max_s = _positive(session_max_s, "session_max_s")
        self._store: Store
        if redis_url is not None:
            from ._queue_redis import RedisStore

            self._store = RedisStore(redis_url, prefix, self.namespace)
        else:
            self._store = LocalStore()
        self.redis_url = redis_url

    @property
    def approvers(self) -> tuple[str, ...]:
        """The names of the approvers with a token."""
        return tuple(self._tokens)

    @property
    def token(self) -> str:
        """The token of the approver named "default" (``token=``)."""
        return self._tokens["default"]

    def _tokens_by_name(self) -> dict[str, str]:
        return dict(self._tokens)

    def _key(self, purpose: str) -> bytes:
        return derive(self._secret, purpose)

    async def __call__(self, request: ApprovalRequest) -> Approve | Reject | Edit:
        """Park ``request`` until someone decides (or until it expires: then it is a rejection)."""
        arguments = _jsonable(request.arguments)
        record = {**request.as_dict(), "arguments": arguments, "usage": _jsonable(request.usage)}
        await self._store.add(record)
        decision: dict[str, Any] | None = None
        try:
            remaining = max(0.0, request.expires - time.time())
            decision = await asyncio.wait_for(self._store.wait(request.id), remaining)
        finally:
            if decision is None:  # timed out or cancelled: later decisions get a 409, not a wait
                await asyncio.shield(self._store.decide(request.id, {"decision": "expired"}))
        return self._answer(request, arguments, decision)

    def _answer(
        self, request: ApprovalRequest, arguments: Any, decision: dict[str, Any]
    ) -> Approve | Reject | Edit:
        kind = decision.get("decision")
        if kind == "expired":
            return Reject("no decision in time")
        problem = verify_decision(self._decision_key, self.namespace, request.id, decision, arguments)
        if problem is not None:
            logger.warning(
                "veronica_mw: approvals: the decision stored for %s (%s) cannot be authenticated: %s;"
                " treated as a rejection",
                request.id,
                request.tool,
                problem,
            )
            return Reject(f"the decision could not be authenticated ({problem})")
        who = {"approver": decision.get("approver"), "decided_at": decision.get("decided_at")}
        if kind == "approve":
            return Approve(**who)
        if kind == "edit":
            return Edit(decision.get("arguments"), **who)
        return Reject(str(decision.get("message") or "rejected by a reviewer"), **who)

    async def pending(self, offset: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        """The requests waiting for a decision, oldest first (JSON-ready dicts)."""
        return (await self._store.pending(offset, limit))[0]

    async def pending_page(self, offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        """One page of the pending requests and how many wait in all."""
        return await self._store.pending(offset, limit)

    async def get(self, request_id: str) -> dict[str, Any] | None:
        """One request with its ``status`` (``pending``, ``approve``, ``reject``, ``edit``, ``expired``)
        and its ``approver`` once decided."""
        return await self._store.get(request_id)

    async def decide(
        self, request_id: str, answer: Approve | Reject | Edit, *, approver: str | None = None
    ) -> str:
        """Decide a pending request as ``approver`` (default: the only approver with a token):
        ``"ok"``, ``"unknown"`` (no such id) or ``"decided"`` (too late, or decided before)."""
        if approver is None:
            if len(self._tokens) != 1:
                raise ValueError("say which approver decides: decide(..., approver=name)")
            (approver,) = self._tokens
        check_name(approver)
        if isinstance(answer, Approve):
            decision: dict[str, Any] = {"decision": "approve"}
        elif isinstance(answer, Reject):
            decision = {"decision": "reject", "message": str(answer.message)}
        elif isinstance(answer, Edit):
            if not isinstance(answer.arguments, dict):
                raise TypeError("edited arguments must be a JSON object")
            edited = _jsonable(answer.arguments)
            decision = {"decision": "edit", "arguments": edited, "edited_args_sha256": args_sha256(edited)}
        else:
            raise TypeError(f"answer must be Approve(), Reject(message) or Edit(arguments), got {answer!r}")
        record = await self._store.get(request_id)
        if record is None:
            return "unknown"
        if record.get("status") != "pending":
            return "decided"
        decision.update(
            approver=approver, decided_at=time.time(), args_sha256=args_sha256(record.get("arguments"))
        )
        return await self._store.decide(
            request_id, sign_decision(self._decision_key, self.namespace, request_id, decision)
        )

    def asgi_app(self, *, title: str = "Pending approvals") -> ASGIApp:
        """The decisions app: ``GET /`` (JSON, or HTML for browsers), ``POST /{id}/approve``,
        ``POST /{id}/reject`` (``{"message": ...}``), ``POST /{id}/edit`` (``{"arguments": {...}}``)."""
        from ._queue_app import ApprovalsApp

        return ApprovalsApp(self, title=title)

    def __repr__(self) -> str:
        where = "redis" if self.redis_url is not None else "local"
        return f"<ApprovalQueue {where} namespace={self.namespace!r} approvers={list(self._tokens)}>"
