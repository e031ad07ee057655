"""The audit log's line format and its hash chain, shared by the writer and the verifier.

One record per line (JSON Lines). A line is the record's canonical JSON -- keys sorted, no spaces,
UTF-8, numbers as Python writes them (shortest round-trip form), no NaN -- with one more member,
``"digest"``, appended last. The digest is SHA-256 (or HMAC-SHA256 with the log's key) of the
canonical JSON *without* it, hex-encoded. Every record carries ``seq`` (0, 1, 2, ... along the chain)
and ``prev`` (the previous record's digest; 64 zeros for the first), so a changed, removed, added
or moved line breaks the chain where it happened. Without the key nobody can recompute an
HMAC-SHA256 chain; a SHA-256 chain proves integrity only against a reference head kept elsewhere
(``audit verify --expect-head``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

FORMAT_VERSION = 1
ZERO = "0" * 64
SHA256 = "sha256"
HMAC_SHA256 = "hmac-sha256"

_encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical(record: dict[str, Any]) -> bytes:
    """The canonical JSON of ``record`` (which must already be JSON-ready)."""
    return _encoder.encode(record).encode("utf-8")


class Digester:
    """Computes record digests: SHA-256, or HMAC-SHA256 when a key is given."""

    __slots__ = ("alg", "_key")

    def __init__(self, key: bytes | None) -> None:
        if key is not None and not isinstance(key, (bytes, bytearray)):
            raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
        if key is not None and not key:
            raise ValueError("key must not be empty")
        self._key = bytes(key) if key is not None else None
        self.alg = HMAC_SHA256 if key is not None else SHA256

    def digest(self, body: bytes) -> str:
        if self._key is None:
            return hashlib.sha256(body).hexdigest()
        return hmac.new(self._key, body, hashlib.sha256).hexdigest()


def plain_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def seal(record: dict[str, Any], digester: Digester) -> tuple[bytes, str]:
    """The line (with its newline) for ``record`` and the record's digest."""
    body = canonical(record)
    digest = digester.digest(body)
    return body[:-1] + b',"digest":"' + digest.encode("ascii") + b'"}\n', digest


_SUFFIX = len(b',"digest":""}') + 64  # what seal() appends to the canonical body


def unseal(line: bytes) -> tuple[dict[str, Any], bytes, str] | None:
    """Split a line into (record without digest, its canonical body, stored digest).

    None when the line is not a record in this format at all: not JSON, not an object, or not
    ending in the 64-character ``digest`` member. The body is the line without that member -- the
    exact bytes the writer hashed -- so it is not re-encoded here: any other change (spacing, key
    order, number spelling) is caught by the digest check, as an edit, in one pass.
    """
    tail = line[:-1] if line.endswith(b"\n") else line
    if len(tail) < _SUFFIX + 2 or tail[-_SUFFIX : -_SUFFIX + 11] != b',"digest":"' or tail[-2:] != b'"}':
        return None
    body = tail[:-_SUFFIX] + b"}"
    try:
        record = json.loads(body)
        digest = tail[-66:-2].decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or "digest" in record:
        return None
    return record, body, digest


def is_hex_digest(value: Any) -> bool:
    if not isinstance(value, str) or len(value) != 64:
        return False
    try:
        int(value, 16)
    except ValueError:
        return False
    return value == value.lower()
