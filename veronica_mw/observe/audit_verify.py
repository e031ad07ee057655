"""Checking audit files: every digest, every link, every file of every chain, and the tail.

A problem names the file and line where the log stops being what the writer wrote:

- ``modified``: the line is not a record any more, or its content no longer matches its digest
  (the digest, and so the next record's ``prev``, are the writer's);
- ``bad digest``: the digest itself was rewritten -- recomputed without the key, or no longer what
  the next record links to;
- ``missing record``: ``seq`` jumps here (a line or a whole file was removed before it);
- ``reordered``: the line's ``seq`` belongs elsewhere (lines were swapped or moved);
- ``truncated``: the file ends mid-line, or without its closing ``head`` record, or the head the
  auditor expects (``expect_heads``) is not in the log;
- with ``public_key`` (:mod:`._audit_signed`): ``unsigned``, ``forged digest``, ``missing digest``,
  ``missing file``, and ``modified``/``truncated`` of bytes a signed digest covers; with
  ``anchors``: ``missing chain``, ``missing digest`` (an anchored digest is gone), ``forged anchor``.

Ends that a later chain's ``recovery`` record explains, or that lie after the last signed digest,
are not problems but notes (:mod:`._audit_tails`). Everything is linear in the size of the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._audit_anchor import read_anchor
from ._audit_chain import HMAC_SHA256, SHA256, Digester, canonical, is_hex_digest, plain_digest
from ._audit_links import Checker, Item, Problem, check_file_end, reorder, walk
from ._audit_read import AuditInputError, Line, expand, read_file
from ._audit_sign import Checker as SignatureChecker
from ._audit_signed import Coverage, check_anchors, check_digests
from ._audit_tails import describe_coverage, explain, recovery_facts

__all__ = ["ChainReport", "KeyRequired", "Problem", "VerifyReport", "verify"]


class KeyRequired(AuditInputError):
    """The log is keyed (HMAC-SHA256) and no key was given."""


@dataclass(slots=True)
class ChainReport:
    log: str
    alg: str
    files: list[str]
    records: int
    head: str | None


@dataclass(slots=True)
class VerifyReport:
    records: int
    chains: list[ChainReport]
    problems: list[Problem]
    head: str | None  # one chain: its head; several: the digest of all their heads
    notes: list[str] = field(default_factory=list)  # recovered: ... / not covered: ...
    signed: dict[str, Any] | None = None  # with a public key: chains, until (time), uncovered
    anchored: int = 0  # anchored digests checked

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(
    paths: Iterable[str | Path],
    *,
    key: bytes | None = None,
    expect_heads: Sequence[str] = (),
    public_key: Any = None,
    anchors: Sequence[str] = (),
) -> VerifyReport:
    """Verify the audit files named by ``paths`` (files, directories, or a configured log path).

    ``public_key`` (an Ed25519 public key, PEM bytes or a PEM file's path): every chain must carry
    signed digests that hold. ``anchors``: anchor files or ``redis://`` URLs whose every entry
    must be in the log (needs ``public_key``)."""
    if anchors and public_key is None:
        raise AuditInputError("--anchor needs --public-key: anchored digests are checked by their signature")
    try:
        signatures = SignatureChecker(public_key) if public_key is not None else None
    except (ValueError, TypeError) as exc:
        raise AuditInputError(f"--public-key: {exc}") from exc
    heads = [h.strip().lower() for h in expect_heads]
    for expected in heads:
        if not is_hex_digest(expected):
            raise AuditInputError(f"--expect-head must be 64 hex digits, got {expected!r}")
    files = expand(paths)
    checker = Checker()
    groups: dict[str, list[tuple[int, list[Line]]]] = {}
    data: dict[str, bytes] = {}
    empty: list[str] = []
    total = 0
    for path in files:
        lines, data[str(path)] = read_file(path)
        total += sum(1 for line in lines if line.record is not None)
        first = lines[0].record if lines else None
        if not lines:
            checker.report(str(path), 1, "truncated", "empty file")
            empty.append(str(path))
        elif first is not None and first.get("type") == "log" and isinstance(first.get("log"), str):
            index = first.get("file")
            groups.setdefault(first["log"], []).append((index if isinstance(index, int) else 0, lines))
        else:
            _report_no_opening(lines[0], key, checker)
            groups.setdefault(f"?{path}", []).append((-1, lines))
    chains: list[ChainReport] = []
    digests: set[str] = set()
    facts: dict[tuple[str, int, int], str] = {}
    coverages: dict[str, Coverage] = {}
    tails: list[tuple[str, list[Line], bytes]] = []
    for log_id, members in groups.items():
        members.sort(key=lambda m: m[0])
        report, ordered = _check_chain(log_id, members, key, checker, digests)
        chains.append(report)
        recovery_facts(ordered, log_id, facts)
        if signatures is not None and not log_id.startswith("?") and ordered:
            coverages[log_id] = check_digests(log_id, members, ordered, data, signatures, checker)
        last_lines = members[-1][1]
        tails.append((log_id, last_lines, data[last_lines[0].file]))
    # Explained ends first: an anchored digest cut off the same end must still be reported.
    notes = explain(checker, tails, facts, coverages if signatures is not None else None, empty)
    anchored = 0
    if signatures is not None:
        ends = {log: (ls[-1][1][0].file, ls[-1][1][-1].lineno + 1) for log, ls in groups.items()}
        for source in anchors:
            try:
                entries = read_anchor(source, _log_name(files))
            except Exception as exc:  # a missing file, an unreachable Redis: the auditor's input
                raise AuditInputError(f"--anchor {source}: {type(exc).__name__}: {exc}") from exc
            anchored += check_anchors(entries, source, coverages, ends, signatures, checker)
    head: str | None
    if len(chains) == 1:
        head = chains[0].head
    else:
        head = plain_digest(canonical({c.log: c.head for c in chains})) if chains else None
    for expected in heads:
        if expected in digests or expected == head:
            continue
        detail = f"expected head {expected[:16]}... is not in the log"
        real = [c for c in chains if not c.log.startswith("?")]
        if len(real) == 1 and real[0].files:
            last = real[0].files[-1]
            if not any(p.what == "truncated" and p.file == last for p in checker.problems.values()):
                checker.report(last, _line_count(groups[real[0].log][-1][1]) + 1, "truncated", detail)
        else:
            checker.report(", ".join(str(p) for p in files), 0, "truncated", detail)
    # In chain order (a rotated chain's files by index), then by line.
    rank = {lines[0].file: n for n, lines in enumerate(m[1] for ms in groups.values() for m in ms if m[1])}
    problems = sorted(checker.problems.values(), key=lambda p: (rank.get(p.file, len(rank)), p.file, p.line))
    signed = describe_coverage(list(coverages.values())) if signatures is not None else None
    return VerifyReport(total, chains, problems, head, notes, signed, anchored)


def _log_name(files: list[Path]) -> str:
    """The configured log's name, from its chain files (``audit.<host>.<pid>.jsonl`` -> ``audit``)."""
    return files[0].name.split(".", 1)[0] if files else "audit"


def _report_no_opening(first: Line, key: bytes | None, checker: Checker) -> None:
    """Line 1 is not the file's ``log`` record: removed (the line is an intact later record), or edited."""
    record = first.record
    intact = (
        record is not None
        and record.get("type") != "log"
        and Digester(key).digest(first.body) == first.digest
    )
    if intact:
        checker.report(first.file, 1, "missing record", "the file's opening log record is missing")
    elif record is None:
        checker.report(first.file, 1, "truncated" if first.partial else "modified", "not a valid record")
    else:
        checker.report(first.file, 1, "modified", "the opening log record was altered")


def _line_count(lines: list[Line]) -> int:
    return lines[-1].lineno if lines else 0


def _digester(
    log_id: str, members: list[tuple[int, list[Line]]], key: bytes | None, checker: Checker
) -> Digester:
    first = members[0][1][0]
    alg = first.record.get("alg") if first.record is not None and not log_id.startswith("?") else None
    if alg is None:  # an orphan file: judge it by the key the auditor brought
        return Digester(key)
    if alg == HMAC_SHA256:
        if key is None:
            raise KeyRequired(f"{first.file}: the log is keyed (hmac-sha256); pass its key with --key-file")
        return Digester(key)
    if alg != SHA256:
        checker.report(first.file, first.lineno, "modified", f"unknown digest algorithm {alg!r}")
    elif key is not None:
        checker.report(
            first.file, first.lineno, "bad digest", "the chain is not keyed (sha256) but a key was given"
        )
    return Digester(None)


def _check_chain(
    log_id: str,
    members: list[tuple[int, list[Line]]],
    key: bytes | None,
    checker: Checker,
    digests: set[str],
) -> tuple[ChainReport, list[Item]]:
    digester = _digester(log_id, members, key, checker)
    items: list[Item] = []
    expected_index = 0
    for index, lines in members:
        if index >= 0 and index != expected_index:
            what = "missing record" if index > expected_index else "modified"
            detail = (
                f"file {expected_index} of this log is missing"
                if index > expected_index
                else "file index repeated"
            )
            checker.report(lines[0].file, 1, what, detail)
        expected_index = index + 1
        for line in lines:
            item = Item(line)
            if line.record is None:
                item.flagged = True
                checker.report(
                    line.file, line.lineno, "truncated" if line.partial else "modified", "not a valid record"
                )
            else:
                item.ok = digester.digest(line.body) == line.digest
            items.append(item)
    readable = [it for it in items if it.line.record is not None]
    if readable and not any(it.ok for it in readable):
        # Not one record matches: the key is wrong (or everything was rewritten). One line, not
        # one per record.
        first = readable[0].line
        detail = (
            "no record matches its digest: wrong key?" if key is not None else "no record matches its digest"
        )
        checker.report(first.file, first.lineno, "bad digest", detail)
        files = [lines[0].file for _, lines in members if lines]
        return ChainReport(log_id, digester.alg, files, len(readable), None), []
    ordered = reorder(items, checker)
    walk(ordered, members, digester, key, checker)
    for number, (_, lines) in enumerate(members):
        following = members[number + 1][1] if number + 1 < len(members) else None
        in_file = [it.line for it in ordered if it.line.file == lines[0].file]
        check_file_end(in_file, lines[-1], following, checker)
    for item in ordered:
        if item.ok:
            digests.add(item.line.digest)
    head = ordered[-1].line.digest if ordered and ordered[-1].line.digest else None
    files = [lines[0].file for _, lines in members if lines]
    count = sum(1 for it in items if it.line.record is not None)
    return ChainReport(log_id, digester.alg, files, count, head), ordered
