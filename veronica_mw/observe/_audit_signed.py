"""The signature checks of ``audit verify --public-key`` (and ``--anchor``): what the digests prove.

Per chain, every ``digest`` record must carry a statement signed by the public key, numbered
``n`` = 0, 1, 2, ... with ``prev`` the hash of the one before (a removed or reordered digest shows).
The last valid statement is then held against the bytes on disk: every file it names must exist in
that chain, be at least as long as it says and hash, over that length, to what it says. So an edit,
insertion, deletion, reordering, truncation or file swap anywhere before the last digest is found,
whoever knew the HMAC key. Anchored statements (``--anchor``) must each be in the log: a cut past an
anchored digest, or a whole chain deleted after it was anchored, is found too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._audit_chain import ZERO
from ._audit_digest import statement_hash
from ._audit_links import Checker, Item
from ._audit_read import Line
from ._audit_sign import Checker as SignatureChecker


@dataclass(slots=True)
class Coverage:
    """What the signatures of one chain prove: intact up to ``until`` (the last valid digest's time)."""

    log: str
    until: float | None
    uncovered: int  # records after that digest: not covered by a signature
    statements: set[str]  # hashes of the chain's valid statements (anchors are matched against them)
    end: dict[str, int]  # file -> bytes the last valid digest covers in it


def check_digests(
    log_id: str,
    members: list[tuple[int, list[Line]]],
    ordered: list[Item],
    data: dict[str, bytes],
    signatures: SignatureChecker,
    checker: Checker,
) -> Coverage:
    first_file = members[0][1][0].file
    digests = [
        it
        for it in ordered
        if it.ok and it.line.record is not None and it.line.record.get("type") == "digest"
    ]
    coverage = Coverage(log_id, None, 0, set(), {})
    if not digests:
        checker.report(
            first_file,
            0,
            "unsigned",
            "no signed digest in this chain: removed, or written without signing_key",
        )
        coverage.uncovered = sum(1 for it in ordered if it.line.record is not None)
        return coverage
    expected_n, expected_prev = 0, ZERO
    last: tuple[Item, dict[str, Any]] | None = None
    for item in digests:
        record = item.line.record or {}
        statement = record.get("statement")
        if (
            not isinstance(statement, dict)
            or not signatures.valid(statement, record.get("sig"))
            or statement.get("log") != log_id
        ):
            checker.report(
                item.line.file,
                item.line.lineno,
                "forged digest",
                "its signature does not verify with the public key",
            )
            continue
        n = statement.get("n")
        if n != expected_n or statement.get("prev") != expected_prev:
            detail = (
                f"signed digest {expected_n} of this chain is missing (next: {n})"
                if isinstance(n, int) and n > expected_n
                else "out of order"
            )
            checker.report(item.line.file, item.line.lineno, "missing digest", detail)
        expected_n = (n if isinstance(n, int) else expected_n) + 1
        expected_prev = statement_hash(statement)
        coverage.statements.add(expected_prev)
        last = (item, statement)
    if last is None:
        checker.report(
            first_file, 0, "forged digest", "no digest of this chain verifies with this public key"
        )
        coverage.uncovered = sum(1 for it in ordered if it.line.record is not None)
        return coverage
    item, statement = last
    _check_files(statement, members, data, checker, coverage)
    t = statement.get("t")
    coverage.until = float(t) if isinstance(t, (int, float)) else None
    position = ordered.index(item)
    coverage.uncovered = sum(1 for it in ordered[position + 1 :] if it.line.record is not None)
    return coverage


def _check_files(
    statement: dict[str, Any],
    members: list[tuple[int, list[Line]]],
    data: dict[str, bytes],
    checker: Checker,
    coverage: Coverage,
) -> None:
    by_name = {Path(lines[0].file).name: lines for _, lines in members if lines}
    when = statement.get("t")
    entries = statement.get("files")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        name, size, digest = entry.get("name"), entry.get("bytes"), entry.get("sha256")
        lines = by_name.get(name) if isinstance(name, str) else None
        if lines is None or not isinstance(size, int):
            where = members[-1][1][0].file
            checker.report(
                where, 0, "missing file", f"{name} ({size} bytes, signed at t={when}) is not in this chain"
            )
            continue
        file = lines[0].file
        blob = data[file]
        coverage.end[file] = size
        if len(blob) < size:
            line = blob.count(b"\n") + 1
            checker.report(
                file,
                line,
                "truncated",
                f"the signed digest at t={when} covers {size} bytes, the file has {len(blob)}",
            )
        elif hashlib.sha256(blob[:size]).hexdigest() != digest:
            checker.report(
                file,
                0,
                "modified",
                f"its first {size} bytes differ from what the digest signed at t={when} states",
            )


def check_anchors(
    entries: list[Any],
    source: str,
    coverages: dict[str, Coverage],
    last_lines: dict[str, tuple[str, int]],
    signatures: SignatureChecker,
    checker: Checker,
) -> int:
    """Every anchored statement must be in the log; returns how many were anchored and checked."""
    anchored: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for number, entry in enumerate(entries, start=1):
        statement = entry.get("statement") if isinstance(entry, dict) else None
        if not isinstance(statement, dict) or not signatures.valid(statement, entry.get("sig")):
            checker.report(
                source, number, "forged anchor", "this anchor entry does not verify with the public key"
            )
            continue
        log = statement.get("log")
        if isinstance(log, str):
            anchored.setdefault(log, []).append((number, statement))
    for log, statements in anchored.items():
        coverage = coverages.get(log)
        number, latest = statements[-1]
        if coverage is None:
            checker.report(
                source, number, "missing chain",
                f"chain {log} was anchored ({len(statements)} digests, the last at t={latest.get('t')}) "
                "but none of its files is in the log",
            )  # fmt: skip
            continue
        for _, statement in statements:
            if statement_hash(statement) not in coverage.statements:
                file, line = last_lines[log]
                checker.report(
                    file, line, "missing digest",
                    f"anchored digest {statement.get('n')} of chain {log} (t={statement.get('t')}) "
                    "is not in the log: cut or deleted",
                )  # fmt: skip
                break
    return sum(len(s) for s in anchored.values())
