"""Who is asking the approvals app: bearer tokens, ``authenticate(headers)``, server-side sessions,
their cookies and CSRF tokens, and sign-in throttling (see :mod:`veronica_mw.control._queue_app`)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _queue_http as http
from ._queue_auth import check_name

if TYPE_CHECKING:
    from ..web.types import Scope

logger = logging.getLogger("veronica_mw")
_COOKIE = "veronica_approvals"
_SID = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True, slots=True)
class Who:
    """An authenticated approver: ``how`` is "bearer", "header" or "session" (then ``sid``)."""

    name: str
    how: str
    sid: str = ""


class Throttled(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(retry_after)
        self.retry_after = retry_after


class Gate:
    """The app's authentication, shared by its routes (no per-request state)."""

    # ``queue``: the ApprovalQueue (typed Any: queue imports this module's importer, no import circle).
    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self._tokens = [(name, token.encode()) for name, token in queue._tokens_by_name().items()]
        self._csrf_key = queue._key("csrf")
        self._sid_key = queue._key("session")

    def match(self, given: str) -> str | None:
        """The approver whose token ``given`` is; every token is compared (constant time)."""
        found = None
        raw = given.encode("utf-8", "surrogateescape")
        for name, token in self._tokens:
            if hmac.compare_digest(raw, token):
                found = name
        return found

    async def throttle(self, scope: Scope) -> None:
        wait = await self._queue._store.retry_after(http.client_address(scope))
        if wait > 0:
            raise Throttled(wait)

    def secure(self, scope: Scope) -> bool:
        forced = self._queue.secure_cookies
        return forced if forced is not None else not http.is_local_http(scope)

    def cookie_name(self, scope: Scope) -> str:
        return f"__Host-{_COOKIE}" if self.secure(scope) else _COOKIE

    def sid_hash(self, sid: str) -> str:
        return hmac.new(self._sid_key, sid.encode(), hashlib.sha256).hexdigest()

    async def who(self, scope: Scope) -> Who | None:
        authorization = http.header(scope, b"authorization")
        if authorization:
            await self.throttle(scope)
            scheme, _, given = authorization.partition(" ")
            name = self.match(given.strip()) if scheme.lower() == "bearer" else None
            if name is None:
                await self._queue._store.failed(http.client_address(scope))
                return None
            return Who(name, "bearer")
        if self._queue.authenticate is not None:
            try:
                name = self._queue.authenticate(http.headers(scope))
            except Exception:
                logger.warning(
                    "veronica_mw: approvals authenticate() raised; nobody signed in", exc_info=True
                )
                name = None
            if name is not None:
                try:
                    return Who(check_name(name), "header")
                except ValueError:
                    logger.warning("veronica_mw: approvals authenticate() returned %r, not a name", name)
        sid = http.cookie(scope, self.cookie_name(scope))
        if not _SID.fullmatch(sid):  # absent or malformed ("a.².x"): no session
            return None
        queue = self._queue
        name = await queue._store.session_touch(self.sid_hash(sid), queue.session_idle_s, queue.session_max_s)
        if name is None or (name not in queue.approvers and queue.authenticate is None):
            return None
        return Who(name, "session", sid)

    def csrf(self, who: Who) -> str:
        bound = f"session.{who.sid}" if who.how == "session" else f"header.{who.name}"
        return hmac.new(self._csrf_key, bound.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, who: Who, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.csrf(who).encode())

    def cookie(self, scope: Scope, value: str, max_age: int) -> tuple[bytes, bytes]:
        secure = self.secure(scope)
        path = "/" if secure else http.base(scope)  # __Host- cookies must have Path=/
        flags = "; Secure" if secure else ""
        attributes = f"Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{flags}"
        text = f"{self.cookie_name(scope)}={value}; {attributes}"
        return b"set-cookie", text.encode("latin-1")
