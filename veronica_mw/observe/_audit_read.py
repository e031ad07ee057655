"""Reading audit files back: which files a command line names, and their lines as records."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._audit_chain import unseal


class AuditInputError(Exception):
    """A path names nothing readable (the command line's fault, not the log's)."""


@dataclass(slots=True)
class Line:
    """One line of an audit file: the record (None if it is not one), its canonical body and digest."""

    file: str
    lineno: int
    record: dict[str, Any] | None
    body: bytes
    digest: str
    partial: bool  # the file's last line, without its newline (a write cut short)


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """Files named directly, ``*.jsonl`` under directories, or the chain files beside a configured
    ``AuditLog`` path (``logs/audit.jsonl`` -> ``logs/audit.<host>.<pid>*.jsonl``)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
            if not files:
                raise AuditInputError(f"{path}: no *.jsonl files in this directory")
            found.extend(files)
        elif path.is_file():
            found.append(path)
        else:
            stem = path.stem if path.suffix else path.name
            siblings = (
                sorted(path.parent.glob(f"{stem}.*{path.suffix or '.jsonl'}")) if path.parent.is_dir() else []
            )
            if not siblings:
                raise AuditInputError(f"{path}: no such file or directory")
            found.extend(siblings)
    unique: dict[Path, Path] = {}  # the same file named twice is read once, under its first name
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def read_lines(path: Path) -> list[Line]:
    return read_file(path)[0]


def read_file(path: Path) -> tuple[list[Line], bytes]:
    """The lines of ``path`` and its bytes (signed digests are checked against the bytes)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AuditInputError(f"{path}: {exc.strerror or exc}") from exc
    lines: list[Line] = []
    raw_lines = data.split(b"\n")
    complete = raw_lines[-1] == b""
    if complete:
        raw_lines.pop()
    name = str(path)
    for number, raw in enumerate(raw_lines, start=1):
        parsed = unseal(raw)
        partial = not complete and number == len(raw_lines)
        if parsed is None:
            lines.append(Line(name, number, None, raw, "", partial))
        else:
            record, body, digest = parsed
            lines.append(Line(name, number, record, body, digest, partial))
    return lines, data


def iter_records(paths: Iterable[str | Path]) -> Iterator[dict[str, Any]]:
    """Every record of the named files, leniently (for show/calls: a damaged line that is still a
    JSON object is read; ``verify`` is what judges integrity)."""
    for path in expand(paths):
        for line in read_lines(path):
            record = line.record
            if record is None:
                try:
                    loose = json.loads(line.body)
                except ValueError:
                    continue
                if not isinstance(loose, dict):
                    continue
                loose.pop("digest", None)
                record = loose
            yield record
