"""One process's audit chain on disk: its files, ``seq``/``prev``, head records and rotation.

Each process writes its own chain beside the configured path -- ``audit.jsonl`` becomes
``audit.<host>.<pid>.jsonl``, then ``audit.<host>.<pid>.1.jsonl``, ... -- created exclusively
(``O_EXCL``), so two processes never share a file, not even after a pid is reused. Every file opens
with a ``log`` record (the log id, file index, host, pid, digest algorithm) whose ``prev`` is the
previous file's head, and every file ends with a ``head`` record: on close, on rotation (naming the
next file), every ``head_every`` records and after a quiet spell. With a signing key the chain
also writes signed ``digest`` records (:mod:`._audit_digest`): right after its first records, every
``digest_interval_s``, at rotation and on close. A chain that starts after a write error or beside
files of crashed processes first states what it found in a ``recovery`` record
(:mod:`._audit_recover`). Files are created 0600. Used by the writer thread only.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from ._audit_anchor import Anchor
from ._audit_chain import FORMAT_VERSION, ZERO, Digester, seal
from ._audit_digest import Digests
from ._audit_recover import crashed, inspect
from ._audit_sign import Signer

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# Files some chain of this process created: never taken for a dead process's (pid reuse check).
_ours: set[str] = set()


def host_name() -> str:
    return _UNSAFE.sub("_", socket.gethostname() or "host")[:64] or "host"


def open_exclusive(path: Path) -> IO[bytes]:
    """Create ``path`` for writing, failing if it exists, readable by its owner only.

    The writer's one I/O seam: tests replace it to simulate a full disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def chain_file_name(stem: str, suffix: str, host: str, pid: int, index: int) -> str:
    tail = f".{index}" if index else ""
    return f"{stem}.{host}.{pid}{tail}{suffix}"


class ChainFiles:
    """The chain of this process: appends sealed records, rotates at ``max_bytes``."""

    open_file = staticmethod(open_exclusive)

    def __init__(
        self,
        base: Path,
        digester: Digester,
        *,
        max_bytes: int,
        head_every: int,
        bodies: bool,
        after_error: str | None = None,
        signer: Signer | None = None,
        anchor: Anchor | None = None,
        digest_interval_s: float = 60.0,
        previous: Path | None = None,
    ) -> None:
        self._dir = base.parent
        self._stem = base.stem if base.suffix else base.name
        self._suffix = base.suffix or ".jsonl"
        self._digester = digester
        self._max_bytes = max_bytes
        self._head_every = head_every
        self._meta: dict[str, Any] = {"bodies": bodies}
        if after_error:
            self._meta["after_error"] = after_error  # the previous chain of this process broke
        self.log_id = secrets.token_hex(8)
        self._signer = signer
        self.digests = Digests(signer, anchor, self.log_id, digest_interval_s) if signer else None
        if signer is not None:
            self._meta["signed"] = signer.key_id
        self._previous = previous  # the last file of this process's chain that broke, if any
        self.host = host_name()
        self.pid = os.getpid()
        self.seq = 0
        self.prev = ZERO
        self.index = -1
        self.files: list[Path] = []
        self.unheaded = 0  # records since the last head record
        self.last_head = time.monotonic()
        self._file: IO[bytes] | None = None
        self._size = 0
        self._in_file = 0
        self._buf = bytearray()

    # -- appending ---------------------------------------------------------------------------------

    def write(self, records: list[dict[str, Any]]) -> None:
        """Append ``records`` (and any head or rotation they trigger); raises OSError."""
        if self._file is None:
            self._start_file(*self._create(0))
            self._recover()
            self.digest("start")
        for record in records:
            self._append(record)
            if self.unheaded >= self._head_every:
                self.head("count")
        if self.digests is not None and self.digests.due():
            self.digest("interval")
        self._flush()
        self.anchor()

    def digest(self, reason: str) -> None:
        """Append a signed digest record (when signing): every file of the chain up to here."""
        digests = self.digests
        if digests is None or self._file is None:
            return
        self._append(digests.record(reason, self.seq - 1, self.prev), is_head=True)
        digests.written()

    def anchor(self) -> None:
        if self.digests is not None:
            self.digests.send()

    @property
    def undigested(self) -> bool:
        return self.digests is not None and self.digests.due()

    def head(self, reason: str, **extra: Any) -> None:
        """Append a head record: the chain's state so far, for ``verify`` and ``--expect-head``."""
        if self._file is None:
            return
        record = {"type": "head", "reason": reason, "records": self.seq, "t": round(time.time(), 6), **extra}
        self._append(record, is_head=True)
        self.unheaded = 0
        self.last_head = time.monotonic()

    def close(self, reason: str = "close") -> None:
        """Write the final head, flush to disk and close; the chain is done."""
        if self._file is None:
            return
        try:
            self.head(reason)
            self.digest(reason)
            self._flush(sync=True)
        finally:
            self._file.close()
            self._file = None
        self.anchor()

    def abandon(self) -> None:
        """Close after a write error without writing anything more (the file may be torn)."""
        file, self._file = self._file, None
        self._buf.clear()
        if file is not None:
            try:
                file.close()
            except OSError:
                pass
            try:  # a file that never got a byte would only read as "truncated (empty file)"
                if self.files and self.files[-1].stat().st_size == 0:
                    self.files[-1].unlink()
                    self.files.pop()
            except OSError:
                pass

    # -- internals ---------------------------------------------------------------------------------

    def _stamp(self, record: dict[str, Any]) -> tuple[bytes, str]:
        record["seq"] = self.seq
        record["prev"] = self.prev
        return seal(record, self._digester)

    def _append(self, record: dict[str, Any], *, is_head: bool = False) -> None:
        line, digest = self._stamp(record)
        if not is_head and self._in_file > 1 and self._size + len(line) > self._max_bytes:
            self._rotate()
            line, digest = self._stamp(record)  # seq is the same, prev is the new file's log record
        self._buf += line
        if self.digests is not None:
            self.digests.add(line)
        self._size += len(line)
        self._in_file += 1
        self.seq += 1
        self.prev = digest
        if not is_head:
            self.unheaded += 1

    def _create(self, index: int) -> tuple[IO[bytes], Path, int]:
        while True:
            path = self._dir / chain_file_name(self._stem, self._suffix, self.host, self.pid, index)
            try:
                return ChainFiles.open_file(path), path, index  # stays open across batches
            except FileExistsError:  # a previous process with this pid (or an old rotation)
                index += 1

    def _start_file(self, file: IO[bytes], path: Path, index: int) -> None:
        self._file, self.index, self._size, self._in_file = file, index, 0, 0
        if self.digests is not None:
            self.digests.new_file(path.name)
        number = len(self.files)  # the file's place in this chain (its name may skip a number)
        self.files.append(path)
        _ours.add(path.name)
        started = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        self._append(
            {
                "type": "log",
                "log": self.log_id,
                "file": number,
                "host": self.host,
                "pid": self.pid,
                "alg": self._digester.alg,
                "version": FORMAT_VERSION,
                "started": started,
                **self._meta,
            },
            is_head=True,
        )

    def _recover(self) -> None:
        """State, as this chain's first record after ``log``, what ended badly before it."""
        found = []
        if self._previous is not None:
            previous = inspect(self._previous)
            if previous is not None:
                found.append({**previous, "why": "write_error"})
        skip = _ours | ({self._previous.name} if self._previous else set())
        for item in crashed(self._dir, self._stem, self._suffix, self.host, skip):
            found.append({**item, "why": "process_gone"})
        if found:
            self._append({"type": "recovery", "found": found, "t": round(time.time(), 6)})

    def _rotate(self) -> None:
        file, path, index = self._create(self.index + 1)
        try:
            self.head("rotate", next=path.name)
            self.digest("rotate")
            self._flush(sync=True)
            self._file.close()  # type: ignore[union-attr]
        except BaseException:
            file.close()
            raise
        self._start_file(file, path, index)

    def _flush(self, sync: bool = False) -> None:
        file = self._file
        if file is None:
            return
        if self._buf:
            file.write(self._buf)
            self._buf.clear()
        file.flush()
        if sync:
            os.fsync(file.fileno())
