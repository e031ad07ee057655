"""The per-chain checks of ``audit verify``: where seq and prev stop following each other, and why.

Used by :mod:`.audit_verify`, which reads the files, groups them into chains and checks digests.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

from ._audit_chain import ZERO, Digester, is_hex_digest, plain_digest
from ._audit_read import Line


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    line: int
    what: str
    detail: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file  # line 0: the file as a whole
        return f"{where}: {self.what}" + (f" ({self.detail})" if self.detail else "")


@dataclass(slots=True)
class Item:
    line: Line
    ok: bool = False  # the content matches the stored digest
    flagged: bool = False  # a problem was reported for this line


@dataclass
class Checker:
    problems: dict[tuple[str, int], Problem] = field(default_factory=dict)

    def report(self, file: str, line: int, what: str, detail: str = "") -> None:
        self.problems.setdefault((file, line), Problem(file, line, what, detail))  # first cause wins


def check_file_end(
    lines: list[Line], physical_last: Line, next_file: list[Line] | None, checker: Checker
) -> None:
    """The file's last record in seq order must be a head record (and name the next file, if any);
    a signed digest may follow it."""
    at = len(lines) - 1
    while at > 0 and lines[at].record is not None and lines[at].record.get("type") == "digest":  # type: ignore[union-attr]
        at -= 1
    last = lines[at]
    if physical_last.partial:
        return  # already reported as truncated at that line
    record = last.record
    if record is None or record.get("type") != "head":
        detail = "no head record after the last line: cut short, or its process is still writing"
        checker.report(last.file, physical_last.lineno + 1, "truncated", detail)
        return
    following = record.get("next")
    if isinstance(following, str):
        if next_file is None or Path(next_file[0].file).name != following:
            checker.report(
                last.file, last.lineno, "missing record", f"the next file, {following}, is missing"
            )


def reorder(items: list[Item], checker: Checker) -> list[Item]:
    """Report lines whose seq is out of place (not on the longest increasing run of seqs) and put
    them back where their seq belongs, so the link check sees the chain in seq order."""
    good: list[tuple[int, int]] = []  # (position, seq) of the lines whose digest holds
    for i, it in enumerate(items):
        seq = it.line.record.get("seq") if it.ok and it.line.record is not None else None
        if isinstance(seq, int):
            good.append((i, seq))
    keep = _longest_increasing([seq for _, seq in good])
    kept = {good[k][0] for k in keep}
    kept_seqs = {good[k][1] for k in keep}
    movable = {i for i, _ in good} - kept
    ordered = [it for i, it in enumerate(items) if i not in movable]
    # Each moved line goes right after the last kept line with a smaller seq: found by bisection
    # over the kept seqs (increasing by construction), then all are merged in one pass, so a
    # shuffled file costs n log n, not n squared.
    kept_positions = [n for n, it in enumerate(ordered) if _seq(it) is not None]
    kept_values = [_seq(ordered[n]) for n in kept_positions]
    inserts: dict[int, list[Item]] = {}
    for i, seq in good:
        if i in kept:
            continue
        item = items[i]
        item.flagged = True
        line = item.line
        if seq in kept_seqs:
            checker.report(line.file, line.lineno, "modified", f"seq {seq} appears twice")
            continue
        k = bisect.bisect_left(kept_values, seq)  # type: ignore[type-var]
        at = kept_positions[k - 1] + 1 if k else 0
        neighbour = ordered[at - 1].line.lineno if at else 0
        checker.report(line.file, line.lineno, "reordered", f"seq {seq} belongs after line {neighbour}")
        inserts.setdefault(at, []).append(item)
    if not inserts:
        return ordered
    merged: list[Item] = []
    for n in range(len(ordered) + 1):
        group = inserts.get(n)
        if group:
            merged.extend(sorted(group, key=lambda it: _seq(it) or 0))
        if n < len(ordered):
            merged.append(ordered[n])
    return merged


def _seq(item: Item) -> int | None:
    record = item.line.record
    seq = record.get("seq") if item.ok and record is not None else None
    return seq if isinstance(seq, int) else None


def _longest_increasing(values: list[int]) -> list[int]:
    """Indices of one longest strictly increasing subsequence (on ties, the later elements)."""
    tails: list[int] = []  # tails[k]: smallest tail value of an increasing run of length k + 1
    tail_at: list[int] = []
    parent = [-1] * len(values)
    for i, value in enumerate(values):
        k = bisect.bisect_left(tails, value)
        if k == len(tails):
            tails.append(value)
            tail_at.append(i)
        else:
            tails[k] = value
            tail_at[k] = i
        parent[i] = tail_at[k - 1] if k else -1
    run: list[int] = []
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        run.append(i)
        i = parent[i]
    return run[::-1]


def walk(
    ordered: list[Item],
    members: list[tuple[int, list[Line]]],
    digester: Digester,
    key: bytes | None,
    checker: Checker,
) -> None:
    """Follow seq and prev along the chain; report where they break and why."""
    first = next((it.line.record for it in ordered if it.line.record is not None), None)
    orphan = members[0][0] < 0
    expected_seq = first.get("seq", 0) if orphan and first is not None else 0
    expected_prev: str | None = first.get("prev") if orphan and first is not None else ZERO
    previous: Item | None = None
    for position, item in enumerate(ordered):
        line, record = item.line, item.line.record
        if record is None:
            expected_seq, expected_prev, previous = expected_seq + 1, None, item
            continue
        if not item.ok:
            nxt = ordered[position + 1].line.record if position + 1 < len(ordered) else None
            rewritten = (
                (key is not None and line.digest == plain_digest(line.body))
                or not is_hex_digest(line.digest)
                or (nxt is not None and nxt.get("prev") != line.digest)
            )
            what = "bad digest" if rewritten else "modified"
            checker.report(line.file, line.lineno, what, "content does not match its digest")
            item.flagged = True
            expected_seq, expected_prev, previous = expected_seq + 1, line.digest, item
            continue
        seq, prev = record.get("seq"), record.get("prev")
        if not isinstance(seq, int) or not isinstance(prev, str):
            checker.report(line.file, line.lineno, "modified", "no seq/prev")
        elif seq > expected_seq:
            gap = seq - expected_seq
            checker.report(
                line.file,
                line.lineno,
                "missing record",
                f"{gap} record(s) before this line (seq {expected_seq}..{seq - 1})",
            )
        elif seq == expected_seq and expected_prev is not None and prev != expected_prev:
            if previous is not None and previous.flagged:
                pass  # explained by the problem already reported on the previous line
            elif previous is not None and previous.line.file == line.file:
                where = previous.line
                checker.report(
                    where.file, where.lineno, "modified", "re-hashed: the next record does not link to it"
                )
            else:
                checker.report(
                    line.file, line.lineno, "missing record", "prev does not link to the previous file"
                )
        if record.get("type") == "head" and record.get("records") != seq:
            checker.report(line.file, line.lineno, "modified", "head record count does not match its seq")
        expected_seq = (seq if isinstance(seq, int) else expected_seq) + 1
        expected_prev, previous = line.digest, item
