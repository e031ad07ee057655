"""Signed digest records: what one chain's files hold so far, signed with Ed25519, then anchored.

A digest record is an ordinary chained record (``seq``, ``prev``, ``digest``) of type ``digest``
carrying a ``statement`` and its ``sig``. The statement names the chain (``log``), counts the
digests (``n``), lists every file of the chain so far -- ``name``, ``bytes`` and ``sha256`` of
everything before this record -- gives the last record's ``last_seq`` and ``last_digest``, the
time ``t``, the SHA-256 of the previous statement (``prev``) and the signing key's fingerprint
(``key``). The signature is over the statement's canonical JSON, so anyone with the public key
can check it and nobody without the private key can make one. Used by :class:`ChainFiles`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

from ._audit_anchor import Anchor
from ._audit_chain import ZERO, canonical
from ._audit_sign import Signer

logger = logging.getLogger("veronica_mw.audit")
_MAX_PENDING = 1000  # anchor entries kept for a retry while the anchor is unreachable


def statement_hash(statement: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(statement)).hexdigest()


class Digests:
    """Per chain: the running SHA-256 of each file, the digest counter, entries waiting for the anchor."""

    def __init__(self, signer: Signer, anchor: Anchor | None, log_id: str, interval_s: float) -> None:
        self._signer = signer
        self._anchor = anchor
        self._log = log_id
        self._interval = interval_s
        self.n = 0
        self.prev = ZERO
        self._done: list[dict[str, Any]] = []
        self._name: str | None = None
        self._hash = hashlib.sha256()
        self._bytes = 0
        self.undigested = 0  # lines since the last digest record
        self._last = time.monotonic()
        self._pending: list[dict[str, Any]] = []
        self.anchor_failures = 0

    def new_file(self, name: str) -> None:
        if self._name is not None:
            self._done.append(self._entry())
        self._name, self._hash, self._bytes = name, hashlib.sha256(), 0

    def add(self, line: bytes) -> None:
        self._hash.update(line)
        self._bytes += len(line)
        self.undigested += 1

    def _entry(self) -> dict[str, Any]:
        return {"name": self._name, "bytes": self._bytes, "sha256": self._hash.hexdigest()}

    def due(self) -> bool:
        return self.undigested > 0 and time.monotonic() - self._last >= self._interval

    def record(self, reason: str, last_seq: int, last_digest: str) -> dict[str, Any]:
        """The next digest record (its line must be passed to :meth:`add` like any other)."""
        statement = {
            "log": self._log,
            "n": self.n,
            "reason": reason,
            "files": [*self._done, self._entry()],
            "last_seq": last_seq,
            "last_digest": last_digest,
            "t": round(time.time(), 6),
            "prev": self.prev,
            "key": self._signer.key_id,
        }
        sig = self._signer.sign(statement)
        self.n += 1
        self.prev = statement_hash(statement)
        self._last = time.monotonic()
        if self._anchor is not None:
            if len(self._pending) >= _MAX_PENDING:
                self._pending.pop(0)
            self._pending.append({"statement": statement, "sig": sig})
        return {"type": "digest", "reason": reason, "statement": statement, "sig": sig}

    def written(self) -> None:
        """The digest line is in the chain: nothing since, so the next digest is not yet due."""
        self.undigested = 0

    def send(self) -> None:
        """Hand the digests written so far to the anchor (after they reached the file)."""
        anchor = self._anchor
        while anchor is not None and self._pending:
            entry = self._pending[0]
            try:
                anchor(entry)
            except Exception as exc:  # an unreachable witness must not stop the log; retried later
                self.anchor_failures += 1
                if self.anchor_failures == 1 or self.anchor_failures % 100 == 0:
                    logger.error(
                        "veronica_mw: audit anchor %r failed (%s: %s)", anchor, type(exc).__name__, exc
                    )
                return
            self._pending.pop(0)
