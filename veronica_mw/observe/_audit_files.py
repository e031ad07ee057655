"""One process's audit chain on disk: its files, ``seq``/``prev``, head records and rotation.

Each process writes its own chain beside the configured path -- ``audit.jsonl`` becomes
``audit.<host>.<pid>.jsonl``, then ``audit.<host>.<pid>.1.jsonl``, ... -- created exclusively
(``O_EXCL``), so two processes never share a file, not even after a pid is reused. Every file opens
with a ``log`` record (the log id, file index, host, pid, digest algorithm) whose ``prev`` is the
previous file's head, and every file ends with a ``head`` record: on close, on rotation (naming the
next file), every ``head_every`` records and after a quiet spell. Used by the writer thread only.
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

from ._audit_chain import FORMAT_VERSION, ZERO, Digester, seal

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def host_name() -> str:
    return _UNSAFE.sub("_", socket.gethostname() or "host")[:64] or "host"


def chain_file_name(stem: str, suffix: str, host: str, pid: int, index: int) -> str:
    tail = f".{index}" if index else ""
    return f"{stem}.{host}.{pid}{tail}{suffix}"


class ChainFiles:
    """The chain of this process: appends sealed records, rotates at ``max_bytes``."""

    def __init__(
        self,
        base: Path,
        digester: Digester,
        *,
        max_bytes: int,
        head_every: int,
        bodies: bool,
        after_error: str | None = None,
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
        for record in records:
            self._append(record)
            if self.unheaded >= self._head_every:
                self.head("count")
        self._flush()

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
            self._flush(sync=True)
        finally:
            self._file.close()
            self._file = None

    def abandon(self) -> None:
        """Close after a write error without writing anything more (the file may be torn)."""
        file, self._file = self._file, None
        self._buf.clear()
        if file is not None:
            try:
                file.close()
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
                return open(path, "xb"), path, index  # stays open across batches
            except FileExistsError:  # a previous process with this pid (or an old rotation)
                index += 1

    def _start_file(self, file: IO[bytes], path: Path, index: int) -> None:
        self._file, self.index, self._size, self._in_file = file, index, 0, 0
        self.files.append(path)
        started = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        self._append(
            {
                "type": "log",
                "log": self.log_id,
                "file": index,
                "host": self.host,
                "pid": self.pid,
                "alg": self._digester.alg,
                "version": FORMAT_VERSION,
                "started": started,
                **self._meta,
            },
            is_head=True,
        )

    def _rotate(self) -> None:
        file, path, index = self._create(self.index + 1)
        try:
            self.head("rotate", next=path.name)
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
