"""Ends of chains that accidents explain: ``recovered:`` and ``not covered:`` notes instead of damage.

A chain whose last file ends mid-line or without its closing head was cut short: by a crash, a
write error, or by someone. A ``recovery`` record of a later chain that states exactly these
bytes (intact length, bytes cut) turns the problem into a ``recovered:`` note. With signatures
checked, an end *after* the last signed digest is not a problem either (``not covered:``): the
signatures never promised those records. Nothing here touches a problem inside what a digest or an
anchor covers; those were found by :mod:`._audit_signed` and stay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._audit_links import Checker, Item
from ._audit_read import Line
from ._audit_signed import Coverage


def recovery_facts(ordered: list[Item], log_id: str, facts: dict[tuple[str, int, int], str]) -> None:
    """Collect what intact ``recovery`` records of one chain state: (file, bytes, cut) -> note."""
    for item in ordered:
        record = item.line.record
        if not item.ok or record is None or record.get("type") != "recovery":
            continue
        found = record.get("found")
        for fact in found if isinstance(found, list) else []:
            if not isinstance(fact, dict):
                continue
            name, size, cut = fact.get("file"), fact.get("bytes"), fact.get("cut_bytes")
            if isinstance(name, str) and isinstance(size, int) and isinstance(cut, int):
                why = (
                    "a write error"
                    if fact.get("why") == "write_error"
                    else "its process ended without closing it"
                )
                after = (
                    f"after seq {fact.get('last_seq')}"
                    if fact.get("last_seq") is not None
                    else "before any record"
                )
                what = f"{cut} bytes cut" if cut else "no closing head"
                facts.setdefault(
                    (name, size, cut), f"{why}: intact {after}, {what} (stated by chain {log_id})"
                )


def explain(
    checker: Checker,
    tails: list[tuple[str, list[Line], bytes]],
    facts: dict[tuple[str, int, int], str],
    coverages: dict[str, Coverage] | None,
    empty: list[str],
) -> list[str]:
    """Turn explained tail problems into notes; returns the notes (the problems are removed)."""
    notes: list[str] = []
    for log_id, lines, data in tails:
        file = lines[0].file
        last = lines[-1]
        keys = [(file, last.lineno)] if last.partial else [(file, last.lineno + 1)]
        key = next(
            (k for k in keys if k in checker.problems and checker.problems[k].what == "truncated"), None
        )
        if key is None:
            continue
        cut = len(last.body) if last.partial else 0
        intact = len(data) - cut
        note = facts.get((Path(file).name, intact, cut))
        if note is not None:
            del checker.problems[key]
            notes.append(f"recovered: {file}: {note}")
            continue
        coverage = coverages.get(log_id) if coverages is not None else None
        if coverage is not None and coverage.until is not None and coverage.end.get(file, 0) <= intact:
            del checker.problems[key]
            notes.append(
                f"not covered: {file} ends {'mid-line' if cut else 'without its closing head'} after "
                "the last signed digest (a crash, or a cut: the signatures do not cover it)"
            )
    for file in empty:
        key = (file, 1)
        if (Path(file).name, 0, 0) in facts and key in checker.problems:
            del checker.problems[key]
            notes.append(f"recovered: {file}: empty, {facts[(Path(file).name, 0, 0)]}")
    return notes


def describe_coverage(coverages: list[Coverage]) -> dict[str, Any]:
    """What the signatures proved, for the report: the earliest 'intact up to' of all chains."""
    times = [c.until for c in coverages if c.until is not None]
    return {
        "chains": len(coverages),
        "until": min(times) if times else None,
        "uncovered": sum(c.uncovered for c in coverages),
    }
