"""The approvals ASGI app served by ``ApprovalQueue.asgi_app()`` (pure ASGI, no framework).

Routes, relative to where it is mounted:

- ``GET /``: pending requests as JSON, 50 a page (``?page=``), or the HTML page for
  ``Accept: text/html`` (a sign-in form until the browser holds a session);
- ``GET /{id}``: one request, its status and who decided it (JSON);
- ``POST /{id}/approve``, ``/{id}/reject`` (``{"message": ...}``), ``/{id}/edit``
  (``{"arguments": {...}}``): decide; 404 for an unknown id, 409 for a decided or expired one;
- ``POST /session`` (form field ``token``), ``POST /logout``: the browser's session.

Who asks: a bearer token (``Authorization: Bearer <token>``, compared in constant time with every
approver's), the queue's ``authenticate(headers)``, or a session. A session is a random id in an
HttpOnly, SameSite=Strict cookie (``__Host-`` and Secure unless plain http to localhost), kept in
the queue's store: logout deletes it, and it ends after ``session_idle_s`` unused or
``session_max_s`` after sign-in. Every form carries a CSRF token bound to the session (or to the
approver authenticated by header). After 5 failed sign-ins or bearer checks in a minute, an
address gets 429 with ``Retry-After`` (counted in the store: across workers with Redis). Every
input the app cannot read is a 4xx.
"""

from __future__ import annotations

import logging
import math
import re
import secrets
from typing import TYPE_CHECKING, Any

from . import _queue_http as http
from ._queue_page import PAGE_SIZE, login_page, queue_page
from ._queue_session import Gate, Throttled, Who
from .approval import Approve, Edit, Reject

if TYPE_CHECKING:
    from ..web.types import Receive, Scope, Send

logger = logging.getLogger("veronica_mw")
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ACTIONS = ("approve", "reject", "edit")
_STATUS_TEXT = {"unknown": (404, "unknown request"), "decided": (409, "request already decided or expired")}


class ApprovalsApp:
    # ``queue``: the ApprovalQueue (typed Any: queue imports this module, no import circle).
    def __init__(self, queue: Any, *, title: str) -> None:
        self._queue = queue
        self._title = title
        self._gate = Gate(queue)

    # -- responses --------------------------------------------------------------------------------

    def _extra(
        self, scope: Scope, extra: list[tuple[bytes, bytes]] | None = None
    ) -> list[tuple[bytes, bytes]]:
        return [*(extra or []), *([http.HSTS] if self._gate.secure(scope) else [])]

    async def _html(
        self,
        scope: Scope,
        send: Send,
        status: int,
        page: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        await http.respond(send, status, page, b"text/html; charset=utf-8", self._extra(scope, extra))

    async def _json(
        self,
        scope: Scope,
        send: Send,
        status: int,
        data: object,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        await http.respond_json(send, status, data, self._extra(scope, extra))

    async def _redirect(
        self, scope: Scope, send: Send, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        location = (b"location", http.base(scope).encode("latin-1", "replace"))
        await http.respond(send, 303, b"", b"text/plain", self._extra(scope, [location, *(extra or [])]))

    async def _unauthorized(self, scope: Scope, send: Send) -> None:
        challenge = [(b"www-authenticate", b'Bearer realm="approvals"')]
        await self._json(scope, send, 401, {"error": "unauthorized"}, challenge)

    async def _page(self, scope: Scope, send: Send, who: Who, status: int = 200, notice: str = "") -> None:
        page = max(1, http.query_int(scope, "page", 1))
        records, total = await self._queue.pending_page((page - 1) * PAGE_SIZE, PAGE_SIZE)
        body = queue_page(
            self._title, http.base(scope), records, self._gate.csrf(who), notice, who.name, page, total
        )
        await self._html(scope, send, status, body)

    # -- routing ----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:  # served on its own: nothing to start or stop
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        path: str = scope.get("path", "")
        root: str = scope.get("root_path", "") or ""
        if root and path.startswith(root):
            path = path[len(root) :]
        try:
            await self._route(scope, receive, send, str(scope.get("method", "GET")), path)
        except http.BadRequest as exc:
            await self._json(scope, send, exc.status, {"error": str(exc)})
        except Throttled as exc:
            retry = [(b"retry-after", str(exc.retry_after).encode())]
            await self._json(scope, send, 429, {"error": "too many failed sign-ins; try again later"}, retry)

    async def _route(self, scope: Scope, receive: Receive, send: Send, method: str, path: str) -> None:
        if path == "":
            await self._redirect(scope, send)
            return
        parts = path.strip("/").split("/") if path != "/" else []
        allowed = b"GET, HEAD"
        if not parts:
            if method in ("GET", "HEAD"):
                await self._index(scope, send)
                return
        elif parts == ["session"] or parts == ["logout"]:
            if method == "POST":
                await (self._sign_in if parts == ["session"] else self._sign_out)(scope, receive, send)
                return
            allowed = b"POST"
        elif len(parts) == 1 and _ID.fullmatch(parts[0]):
            if method in ("GET", "HEAD"):
                await self._one(scope, send, parts[0])
                return
        elif len(parts) == 2 and parts[1] in _ACTIONS and _ID.fullmatch(parts[0]):
            if method == "POST":
                await self._decide(scope, receive, send, parts[0], parts[1])
                return
            allowed = b"POST"
        else:
            await self._json(scope, send, 404, {"error": "not found"})
            return
        await self._json(scope, send, 405, {"error": "method not allowed"}, [(b"allow", allowed)])

    async def _index(self, scope: Scope, send: Send) -> None:
        browser = "text/html" in http.header(scope, b"accept")
        who = await self._gate.who(scope)
        if who is None:
            if browser:
                await self._html(scope, send, 200, login_page(self._title, http.base(scope)))
            else:
                await self._unauthorized(scope, send)
            return
        if browser and who.how != "bearer":
            await self._page(scope, send, who)
            return
        page = max(1, http.query_int(scope, "page", 1))
        records, total = await self._queue.pending_page((page - 1) * PAGE_SIZE, PAGE_SIZE)
        pages = max(1, -(-total // PAGE_SIZE))
        await self._json(scope, send, 200, {"pending": records, "total": total, "page": page, "pages": pages})

    async def _one(self, scope: Scope, send: Send, request_id: str) -> None:
        if await self._gate.who(scope) is None:
            await self._unauthorized(scope, send)
            return
        record = await self._queue.get(request_id)
        await self._json(scope, send, 200 if record else 404, record or {"error": "unknown request"})

    async def _sign_in(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._gate.throttle(scope)
        fields = http.form(await http.read(receive))
        name = self._gate.match(fields.get("token", ""))
        if name is None:
            await self._queue._store.failed(http.client_address(scope))
            page = login_page(self._title, http.base(scope), "That token is not valid.")
            await self._html(scope, send, 401, page)
            return
        sid = secrets.token_urlsafe(32)
        queue = self._queue
        await queue._store.session_add(
            self._gate.sid_hash(sid), name, queue.session_idle_s, queue.session_max_s
        )
        await self._redirect(
            scope, send, [self._gate.cookie(scope, sid, max(1, math.ceil(queue.session_max_s)))]
        )

    async def _sign_out(self, scope: Scope, receive: Receive, send: Send) -> None:
        fields = http.form(await http.read(receive))
        who = await self._gate.who(scope)
        if who is None or who.how != "session" or not self._gate.csrf_ok(who, fields.get("csrf", "")):
            await self._json(scope, send, 403, {"error": "invalid session or CSRF token"})
            return
        await self._queue._store.session_drop(self._gate.sid_hash(who.sid))  # a copied cookie dies too
        await self._redirect(scope, send, [self._gate.cookie(scope, "", 0)])

    async def _decide(self, scope: Scope, receive: Receive, send: Send, request_id: str, action: str) -> None:
        body = await http.read(receive)
        who = await self._gate.who(scope)
        if who is None:
            await self._unauthorized(scope, send)
            return
        is_form = http.header(scope, b"content-type").startswith("application/x-www-form-urlencoded")
        if who.how == "bearer" or (who.how == "header" and not is_form):
            if who.how == "header" and not http.header(scope, b"content-type").startswith("application/json"):
                # A cross-site form could post text/plain with the proxy's header: JSON forces a preflight.
                await self._json(scope, send, 415, {"error": "send application/json"})
                return
            await self._decide_json(scope, send, who, request_id, action, body)
            return
        fields = http.form(body)
        if not self._gate.csrf_ok(who, fields.get("csrf", "")):
            await self._json(scope, send, 403, {"error": "invalid CSRF token"})
            return
        answer: Approve | Reject | Edit = Approve()
        if action == "reject":
            answer = Reject(fields.get("message", "").strip()[:2000])
        elif action == "edit":
            try:
                arguments = http.json_body(fields.get("arguments", "").encode())
            except http.BadRequest as exc:
                await self._page(scope, send, who, 400, f"The edited arguments are not valid JSON: {exc}")
                return
            if not isinstance(arguments, dict):
                await self._page(scope, send, who, 400, "The edited arguments must be a JSON object.")
                return
            answer = Edit(arguments)
        outcome = await self._record(request_id, answer, who)
        if outcome == "ok":
            await self._redirect(scope, send)
        else:
            status, message = _STATUS_TEXT[outcome]
            await self._page(scope, send, who, status, f"Request {request_id}: {message}.")

    async def _record(self, request_id: str, answer: Approve | Reject | Edit, who: Who) -> str:
        try:
            outcome: str = await self._queue.decide(request_id, answer, approver=who.name)
            return outcome
        except (ValueError, TypeError, RecursionError) as exc:  # edited arguments it cannot store
            raise http.BadRequest(f"the decision cannot be recorded: {type(exc).__name__}") from exc

    async def _decide_json(
        self, scope: Scope, send: Send, who: Who, request_id: str, action: str, body: bytes
    ) -> None:
        data = http.json_body(body)
        if not isinstance(data, dict):
            raise http.BadRequest("the body must be a JSON object")
        answer: Approve | Reject | Edit = Approve()
        if action == "reject":
            answer = Reject(str(data.get("message") or "")[:2000])
        elif action == "edit":
            if not isinstance(data.get("arguments"), dict):
                raise http.BadRequest('edit needs {"arguments": {...}}')
            answer = Edit(data["arguments"])
        outcome = await self._record(request_id, answer, who)
        if outcome == "ok":
            await self._json(scope, send, 200, {"id": request_id, "status": action, "approver": who.name})
        else:
            status, message = _STATUS_TEXT[outcome]
            await self._json(scope, send, status, {"error": message, "id": request_id})
