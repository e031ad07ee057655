"""What a new chain finds of chains that ended badly: the facts its ``recovery`` record states.

A chain that starts after a write error (the previous chain of this process), or in a directory
holding files of a process of this host that is gone (a crash: SIGKILL, OOM; or a container
restarted with the same pid) looks at the end of each such file: how many bytes are intact (up to
the last newline), how many were cut after that, and the last intact record's ``seq``, ``digest``
and ``type``. Files that ended with their closing head are left alone. ``audit verify`` matches
these facts with what it reads and reports the ends they explain as ``recovered:`` instead of
damage; they never excuse a byte a signed digest or an anchor covers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._audit_chain import unseal

_TAIL = 1 << 16
_MAX_FILES = 256  # newest first: an old directory is not re-read in full by every new process


def inspect(path: Path) -> dict[str, Any] | None:
    """The end of ``path`` as a recovery record states it, or None if it closed cleanly (or is gone)."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            start = max(0, size - _TAIL)
            file.seek(start)
            tail = file.read()
            cut_at = tail.rfind(b"\n")
            if cut_at < 0 and start:
                file.seek(0)
                tail, start = file.read(), 0
                cut_at = tail.rfind(b"\n")
    except OSError:
        return None
    intact = start + cut_at + 1 if cut_at >= 0 else 0
    found: dict[str, Any] = {"file": path.name, "bytes": intact, "cut_bytes": size - intact}
    if cut_at >= 0:
        begin = tail.rfind(b"\n", 0, cut_at) + 1
        parsed = unseal(tail[begin:cut_at])
        if parsed is not None:
            record, _, digest = parsed
            found.update(last_seq=record.get("seq"), last_digest=digest, last_type=record.get("type"))
            if size == intact and _closed(record):
                return None
    return found


def _closed(record: dict[str, Any]) -> bool:
    kind = record.get("type")
    return (kind == "head" or kind == "digest") and record.get("reason") in ("close", "rotate")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # that pid is ours now: its earlier holder is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def crashed(directory: Path, stem: str, suffix: str, host: str, skip: set[str]) -> list[dict[str, Any]]:
    """Files of this host's dead processes in ``directory`` that did not close cleanly."""
    prefix = f"{stem}.{host}."
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(suffix)]
    except OSError:
        return []
    candidates: list[tuple[float, Path]] = []
    for name in names:
        pid_text = name[len(prefix) :].split(".", 1)[0]
        if name in skip or not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        path = directory / name
        try:
            candidates.append((path.stat().st_mtime, path))
        except OSError:
            continue
    candidates.sort(reverse=True)
    found = [inspect(path) for _, path in candidates[:_MAX_FILES]]
    return [f for f in found if f is not None]
