"""HTTP plumbing of the approvals app: reading headers, cookies, queries and bodies that may be
malformed (never an exception a client can provoke), and sending responses with security headers.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

if TYPE_CHECKING:
    from ..web.types import Receive, Scope, Send

MAX_BODY = 64 * 1024
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
_HOST = re.compile(r"\A(\[[0-9A-Fa-f:.]+\]|[^:\[\]]*)(:\d+)?\Z")
SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    ),
]
HSTS = (b"strict-transport-security", b"max-age=31536000; includeSubDomains")


class BadRequest(Exception):
    """Input the app cannot read: answered with 400 (or ``status``), never a 500."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def base(scope: Scope) -> str:
    """Where the app is mounted, with a trailing slash: links, redirects and the cookie's path."""
    return str(scope.get("root_path") or "") + "/"


def header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return ""


def headers(scope: Scope) -> dict[str, str]:
    """Request headers by lower-case name (a repeated header: its values joined by ", ")."""
    found: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        name = bytes(key).decode("latin-1").lower()
        text = bytes(value).decode("latin-1")
        found[name] = f"{found[name]}, {text}" if name in found else text
    return found


def cookie(scope: Scope, name: str) -> str:
    for part in header(scope, b"cookie").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if isinstance(client, (tuple, list)) and client else "unknown"


def is_local_http(scope: Scope) -> bool:
    """Plain http to localhost: the one case a Secure cookie would never come back."""
    if scope.get("scheme", "http") != "http":
        return False
    match = _HOST.match(header(scope, b"host").strip())
    host = match.group(1).lower() if match else ""
    if not host:
        server = scope.get("server")
        host = str(server[0]) if isinstance(server, (tuple, list)) and server else ""
    return host in _LOCAL_HOSTS


def query_int(scope: Scope, name: str, default: int) -> int:
    try:
        values = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"), max_num_fields=20)
    except ValueError:
        return default
    raw = (values.get(name) or [""])[0]
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 6 else default


async def read(receive: Receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise BadRequest("request body too large", 413)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def form(body: bytes) -> dict[str, str]:
    """A urlencoded form's first value of each field."""
    try:
        fields = parse_qs(body.decode("utf-8"), max_num_fields=50, strict_parsing=False)
    except ValueError as exc:  # not UTF-8, or too many fields
        raise BadRequest(f"the form cannot be read: {exc}") from exc
    return {key: values[0] for key, values in fields.items() if values}


def json_body(body: bytes) -> Any:
    if not body.strip():
        return {}
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[" * 60000
        raise BadRequest(
            "the body must be JSON" if isinstance(exc, ValueError) else "JSON nested too deeply"
        ) from exc


async def respond(
    send: Send, status: int, body: bytes, content_type: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    response_headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS,
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": response_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def respond_json(
    send: Send, status: int, data: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await respond(send, status, json.dumps(data).encode(), b"application/json", extra)
