"""Anchors: where every signed digest is also sent, out of reach of whoever can rewrite the log's host.

``AuditLog(anchor=...)`` takes a path (an append-only JSON Lines file, ideally on another volume
or a WORM mount), a Redis URL (``redis://host:port/db``; one list per log, key
``veronica-mw:audit:<log name>`` unless the URL says ``?key=...``) or any callable, which gets
each anchored entry -- ``{"statement": {...}, "sig": "..."}`` -- as a dict (S3 Object Lock, syslog,
an HTTP witness). ``audit verify --anchor PATH|URL`` reads the first two back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ._audit_chain import canonical

Anchor = Callable[[dict[str, Any]], None]
_SCHEMES = ("redis://", "rediss://", "unix://")


def is_redis_url(value: str) -> bool:
    return value.startswith(_SCHEMES)


def make_anchor(anchor: Any, log_name: str) -> Anchor | None:
    """The anchor callable for ``AuditLog(anchor=...)`` (None: no anchor)."""
    if anchor is None:
        return None
    if isinstance(anchor, str) and is_redis_url(anchor):
        return RedisAnchor(anchor, log_name)
    if isinstance(anchor, (str, os.PathLike)):
        return FileAnchor(Path(os.fspath(anchor)))
    if callable(anchor):
        return anchor  # type: ignore[no-any-return]
    raise TypeError(f"anchor must be a path, a redis:// URL or a callable, got {type(anchor).__name__}")


class FileAnchor:
    """Appends each entry as one line (O_APPEND, fsync); the file is created 0600, its directory 0700."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, entry: dict[str, Any]) -> None:
        if not self.path.parent.exists():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, canonical(entry) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        return f"<FileAnchor {str(self.path)!r}>"


def _redis_target(url: str, log_name: str) -> tuple[str, str]:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    key = query.pop("key", [f"veronica-mw:audit:{log_name}"])[0]
    rest = "&".join(f"{k}={v}" for k, values in query.items() for v in values)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, rest, "")), key


class RedisAnchor:
    """RPUSH of each entry onto the log's list (the ``redis`` package, imported on first use)."""

    def __init__(self, url: str, log_name: str) -> None:
        self.url, self.key = _redis_target(url, log_name)
        self._client: Any = None

    def __call__(self, entry: dict[str, Any]) -> None:
        if self._client is None:
            # The pools' client factory: a URL to a standalone Redis or to any node of a Redis
            # Cluster (detected), rediss:// for TLS -- the anchor list is one key, so one slot.
            from ..pools.redis_connect import RedisClients

            self._client = RedisClients(self.url, socket_timeout=5.0).sync()
        self._client.rpush(self.key, canonical(entry))

    def __repr__(self) -> str:
        return f"<RedisAnchor {self.key!r}>"


def read_anchor(source: str, log_name: str) -> list[Any]:
    """Every entry of an anchor file or Redis list, oldest first (lines that are not JSON: as None)."""
    if is_redis_url(source):
        from ..pools.redis_connect import RedisClients

        url, key = _redis_target(source, log_name)
        clients = RedisClients(url, socket_timeout=10.0)
        try:
            raw: list[bytes] = [
                item if isinstance(item, bytes) else item.encode()
                for item in clients.sync().lrange(key, 0, -1)
            ]
        finally:
            clients.close()
    else:
        raw = Path(source).read_bytes().splitlines()
    entries: list[Any] = []
    for line in raw:
        try:
            entries.append(json.loads(line))
        except ValueError:
            entries.append(None)
    return entries
