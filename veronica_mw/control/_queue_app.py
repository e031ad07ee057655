"""The approvals ASGI app served by ``ApprovalQueue.asgi_app()`` (pure ASGI, no framework).

Routes, relative to where it is mounted:

- ``GET /``: pending requests as JSON (``Authorization: Bearer <token>``), or the HTML page for
  ``Accept: text/html`` (a sign-in form until the browser holds a session);
- ``GET /{id}``: one request and its status (JSON);
- ``POST /{id}/approve``, ``/{id}/reject`` (``{"message": ...}``), ``/{id}/edit``
  (``{"arguments": {...}}``): decide; 404 for an unknown id, 409 for a decided or expired one;
- ``POST /session`` (form field ``token``), ``POST /logout``: the browser's session.

Authentication: the JSON API takes the bearer token (compared in constant time; 401 without). A
person types the token once into the page's form; the session is then an HttpOnly,
SameSite=Strict cookie signed with a key derived from the token (so every worker accepts it), and
every form carries a CSRF token bound to that session. The token never appears in a URL.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from ._queue_page import login_page, queue_page
from .approval import Approve, Edit, Reject

if TYPE_CHECKING:
    from ..web.types import Receive, Scope, Send

_COOKIE = "veronica_approvals"
_SESSION_S = 8 * 3600
_MAX_BODY = 64 * 1024
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ACTIONS = ("approve", "reject", "edit")
_SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    ),
]
_STATUS_TEXT = {"unknown": (404, "unknown request"), "decided": (409, "request already decided or expired")}


class _BodyTooLarge(Exception):
    pass


def _base(scope: Scope) -> str:
    """Where the app is mounted, with a trailing slash: links, redirects and the cookie's path."""
    return str(scope.get("root_path") or "") + "/"


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return ""


def _cookie(scope: Scope, name: str) -> str:
    for part in _header(scope, b"cookie").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


async def _read(receive: Receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY:
            raise _BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


class ApprovalsApp:
    # ``queue``: the ApprovalQueue (typed Any: queue imports this module, no import circle).
    def __init__(self, queue: Any, *, title: str) -> None:
        self._queue = queue
        self._title = title
        self._token = queue.token.encode()
        self._key = hmac.new(self._token, b"veronica-mw approvals session v1", hashlib.sha256).digest()

    # -- sessions ---------------------------------------------------------------------------------

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def _bearer(self, scope: Scope) -> bool:
        scheme, _, given = _header(scope, b"authorization").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token)

    def _session(self, scope: Scope) -> str | None:
        """The session id of a valid, unexpired session cookie."""
        sid, _, rest = _cookie(scope, _COOKIE).partition(".")
        expires, _, signature = rest.partition(".")
        if not sid or not expires.isdigit() or int(expires) < time.time():
            return None
        return (
            sid if hmac.compare_digest(signature.encode(), self._sign(f"{sid}.{expires}").encode()) else None
        )

    def _csrf(self, sid: str) -> str:
        return self._sign(f"csrf.{sid}")

    def _cookie_header(self, scope: Scope, value: str, max_age: int) -> tuple[bytes, bytes]:
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        path = _base(scope)
        cookie = f"{_COOKIE}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
        return b"set-cookie", cookie.encode("latin-1")

    # -- responses --------------------------------------------------------------------------------

    @staticmethod
    async def _send(
        send: Send,
        status: int,
        body: bytes,
        content_type: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        headers = [
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
            *_SECURITY_HEADERS,
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _json(
        self, send: Send, status: int, data: Any, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        await self._send(send, status, json.dumps(data).encode(), b"application/json", extra)

    async def _html(
        self, send: Send, status: int, page: bytes, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        await self._send(send, status, page, b"text/html; charset=utf-8", extra)

    async def _redirect(
        self, send: Send, location: str, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        headers = [(b"location", location.encode("latin-1")), *(extra or [])]
        await self._send(send, 303, b"", b"text/plain", headers)

    async def _unauthorized(self, send: Send) -> None:
        await self._json(
            send, 401, {"error": "unauthorized"}, [(b"www-authenticate", b'Bearer realm="approvals"')]
        )

    async def _page(self, scope: Scope, send: Send, sid: str, status: int = 200, notice: str = "") -> None:
        records = await self._queue.pending()
        page = queue_page(self._title, _base(scope), records, self._csrf(sid), notice)
        await self._html(send, status, page)

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
        method = scope.get("method", "GET")
        try:
            await self._route(scope, receive, send, method, path)
        except _BodyTooLarge:
            await self._json(send, 413, {"error": "request body too large"})

    async def _route(self, scope: Scope, receive: Receive, send: Send, method: str, path: str) -> None:
        if path == "":
            await self._redirect(send, _base(scope))
            return
        parts = path.strip("/").split("/") if path != "/" else []
        if not parts:
            if method in ("GET", "HEAD"):
                await self._index(scope, send)
            else:
                await self._json(send, 405, {"error": "method not allowed"}, [(b"allow", b"GET")])
            return
        if parts == ["session"] and method == "POST":
            await self._sign_in(scope, receive, send)
        elif parts == ["logout"] and method == "POST":
            await self._sign_out(scope, receive, send)
        elif len(parts) == 1 and method == "GET" and _ID.fullmatch(parts[0]):
            if not self._bearer(scope):
                await self._unauthorized(send)
                return
            record = await self._queue.get(parts[0])
            await (
                self._json(send, 200, record)
                if record
                else self._json(send, 404, {"error": "unknown request"})
            )
        elif len(parts) == 2 and parts[1] in _ACTIONS and method == "POST" and _ID.fullmatch(parts[0]):
            await self._decide(scope, receive, send, parts[0], parts[1])
        else:
            await self._json(send, 404, {"error": "not found"})

    async def _index(self, scope: Scope, send: Send) -> None:
        if "text/html" in _header(scope, b"accept"):
            sid = self._session(scope)
            if sid is None:
                await self._html(send, 200, login_page(self._title, _base(scope)))
            else:
                await self._page(scope, send, sid)
            return
        if not self._bearer(scope):
            await self._unauthorized(send)
            return
        await self._json(send, 200, {"pending": await self._queue.pending()})

    async def _sign_in(self, scope: Scope, receive: Receive, send: Send) -> None:
        form = parse_qs((await _read(receive)).decode("utf-8", "replace"))
        given = (form.get("token") or [""])[0].encode()
        if not hmac.compare_digest(given, self._token):
            await self._html(send, 401, login_page(self._title, _base(scope), "That token is not valid."))
            return
        sid = secrets.token_urlsafe(16)
        expires = int(time.time()) + _SESSION_S
        value = f"{sid}.{expires}.{self._sign(f'{sid}.{expires}')}"
        await self._redirect(send, _base(scope), [self._cookie_header(scope, value, _SESSION_S)])

    async def _sign_out(self, scope: Scope, receive: Receive, send: Send) -> None:
        form = parse_qs((await _read(receive)).decode("utf-8", "replace"))
        sid = self._session(scope)
        if sid is not None and hmac.compare_digest(
            (form.get("csrf") or [""])[0].encode(), self._csrf(sid).encode()
        ):
            await self._redirect(send, _base(scope), [self._cookie_header(scope, "", 0)])
        else:
            await self._json(send, 403, {"error": "invalid session or CSRF token"})

    async def _decide(self, scope: Scope, receive: Receive, send: Send, request_id: str, action: str) -> None:
        body = await _read(receive)
        if self._bearer(scope):
            await self._decide_json(send, request_id, action, body)
            return
        sid = self._session(scope)
        if sid is None:
            await self._unauthorized(send)
            return
        form = parse_qs(body.decode("utf-8", "replace"))
        if not hmac.compare_digest((form.get("csrf") or [""])[0].encode(), self._csrf(sid).encode()):
            await self._json(send, 403, {"error": "invalid CSRF token"})
            return
        answer: Approve | Reject | Edit = Approve()
        if action == "reject":
            answer = Reject((form.get("message") or [""])[0].strip())
        elif action == "edit":
            try:
                arguments = json.loads((form.get("arguments") or [""])[0])
            except ValueError as exc:
                await self._page(scope, send, sid, 400, f"The edited arguments are not valid JSON: {exc}")
                return
            if not isinstance(arguments, dict):
                await self._page(scope, send, sid, 400, "The edited arguments must be a JSON object.")
                return
            answer = Edit(arguments)
        outcome = await self._queue.decide(request_id, answer)
        if outcome == "ok":
            await self._redirect(send, _base(scope))
        else:
            status, message = _STATUS_TEXT[outcome]
            await self._page(scope, send, sid, status, f"Request {request_id}: {message}.")

    async def _decide_json(self, send: Send, request_id: str, action: str, body: bytes) -> None:
        try:
            data = json.loads(body) if body.strip() else {}
        except ValueError:
            await self._json(send, 400, {"error": "the body must be JSON"})
            return
        if not isinstance(data, dict):
            await self._json(send, 400, {"error": "the body must be a JSON object"})
            return
        answer: Approve | Reject | Edit = Approve()
        if action == "reject":
            answer = Reject(str(data.get("message") or ""))
        elif action == "edit":
            if not isinstance(data.get("arguments"), dict):
                await self._json(send, 400, {"error": 'edit needs {"arguments": {...}}'})
                return
            answer = Edit(data["arguments"])
        outcome = await self._queue.decide(request_id, answer)
        if outcome == "ok":
            await self._json(send, 200, {"id": request_id, "status": action})
        else:
            status, message = _STATUS_TEXT[outcome]
            await self._json(send, status, {"error": message, "id": request_id})
