"""``veronica-mw audit verify`` finds each kind of tampering at the line where it happened."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from veronica_mw.observe._audit_chain import Digester, seal, unseal

from .conftest import Cli, run_cli

KEY = b"correct horse battery staple"


def write_log(directory: Path, *, key: bytes | None = KEY, head_every: int = 1000) -> Path:
    """A log of three runs (calls, an error, a halt) in one chain file; returns the file."""
    log = AuditLog(directory / "audit.jsonl", key=key, head_every=head_every, record_bodies=True)
    for n in range(3):
        config = ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=1)
        with ExecutionContext(config, audit=log, attributes={"method": "GET", "path": f"/run/{n}"}) as ctx:
            ctx.call_llm(
                lambda **kw: "answer", model="gpt-4o-mini", messages=[{"role": "user", "content": "q"}]
            )
            ctx.call_tool(lambda: 42, options=WrapOptions(operation_name="lookup"))
            if n == 2:
                with pytest.raises(ExecutionHalted):
                    for _ in range(5):
                        ctx.call_tool(lambda: 0)
    assert log.close()
    (file,) = log.files
    return Path(file)


def lines_of(file: Path) -> list[bytes]:
    return file.read_bytes().splitlines(keepends=True)


def save(file: Path, lines: list[bytes]) -> None:
    file.write_bytes(b"".join(lines))


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "key"
    path.write_bytes(KEY + b"\n")
    return path


@pytest.fixture
def logfile(tmp_path: Path) -> Path:
    (tmp_path / "logs").mkdir()
    return write_log(tmp_path / "logs")


def head_of(cli: Cli, file: Path, key_file: Path) -> str:
    code, out, _ = cli("audit", "verify", file, "--key-file", key_file)
    assert code == 0, out
    match = re.fullmatch(r"ok: (\d+) records, 1 chains, head ([0-9a-f]{64})\n", out)
    assert match, out
    return match.group(2)


def test_an_intact_log_verifies(cli: Cli, logfile: Path, key_file: Path) -> None:
    code, out, err = cli("audit", "verify", logfile.parent, "--key-file", key_file)
    assert (code, err) == (0, "")
    assert out.startswith(f"ok: {len(lines_of(logfile))} records, 1 chains, head ")
    head = head_of(cli, logfile, key_file)
    assert cli("audit", "verify", logfile, "--key-file", key_file, "--expect-head", head)[0] == 0
    code, out, _ = cli("audit", "verify", logfile, "--key-file", key_file, "--json")
    report = json.loads(out)
    assert (code, report["ok"], report["head"], report["problems"]) == (0, True, head, [])


def find(lines: list[bytes], record_type: str, nth: int = 0) -> int:
    """The index of the nth line holding a record of ``record_type``."""
    hits = [i for i, line in enumerate(lines) if json.loads(line)["type"] == record_type]
    return hits[nth]


def test_a_changed_byte_is_modified(cli: Cli, logfile: Path, key_file: Path) -> None:
    lines = lines_of(logfile)
    i = find(lines, "call", 1)
    assert b'"tokens_in":0' in lines[i]
    lines[i] = lines[i].replace(b'"tokens_in":0', b'"tokens_in":9')
    save(logfile, lines)
    code, out, err = cli("audit", "verify", logfile, "--key-file", key_file)
    assert code == 1 and "Traceback" not in out + err
    assert out.splitlines() == [f"{logfile}:{i + 1}: modified (content does not match its digest)"]


def test_a_deleted_line_is_a_missing_record(cli: Cli, logfile: Path, key_file: Path) -> None:
    lines = lines_of(logfile)
    i = find(lines, "call_admitted", 2)
    del lines[i]
    save(logfile, lines)
    code, out, _ = cli("audit", "verify", logfile, "--key-file", key_file)
    assert code == 1
    assert out.splitlines() == [
        f"{logfile}:{i + 1}: missing record (1 record(s) before this line (seq {i}..{i}))"
    ]


def test_swapped_lines_are_reordered(cli: Cli, logfile: Path, key_file: Path) -> None:
    lines = lines_of(logfile)
    i = find(lines, "context_started", 1)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    save(logfile, lines)
    code, out, _ = cli("audit", "verify", logfile, "--key-file", key_file)
    assert code == 1
    assert out.splitlines() == [f"{logfile}:{i + 1}: reordered (seq {i + 1} belongs after line {i + 2})"]


def test_a_dropped_tail_is_truncated(cli: Cli, tmp_path: Path, key_file: Path) -> None:
    logfile = write_log(tmp_path, head_every=5)  # intermediate heads: a cut there still ends in a head
    head = head_of(cli, logfile, key_file)
    lines = lines_of(logfile)
    cut = find(lines, "head", 2) + 1
    save(logfile, lines[:cut])
    assert cli("audit", "verify", logfile, "--key-file", key_file)[0] == 0  # looks complete on its own...
    code, out, _ = cli("audit", "verify", logfile, "--key-file", key_file, "--expect-head", head)
    assert code == 1  # ... but the head the auditor kept is gone
    assert out.splitlines() == [
        f"{logfile}:{cut + 1}: truncated (expected head {head[:16]}... is not in the log)"
    ]
    save(logfile, lines[: cut - 1])  # cut anywhere else: the missing closing head says it
    code, out, _ = cli("audit", "verify", logfile, "--key-file", key_file)
    assert code == 1 and out.startswith(f"{logfile}:{cut}: truncated (no head record after the last line")


def test_a_torn_last_line_is_truncated(cli: Cli, logfile: Path, key_file: Path) -> None:
    lines = lines_of(logfile)
    save(logfile, [*lines[:-1], lines[-1][:30]])  # a write cut short: no newline
    code, out, _ = cli("audit", "verify", logfile, "--key-file", key_file)
    assert code == 1 and out.splitlines() == [f"{logfile}:{len(lines)}: truncated (not a valid record)"]


def test_a_digest_recomputed_without_the_key_is_a_bad_digest(cli: Cli, logfile: Path, key_file: Path) -> None:
    lines = lines_of(logfile)
    i = find(lines, "call", 0)
    parsed = unseal(lines[i].rstrip(b"\n"))
    assert parsed is not None
    record = parsed[0]
    record["cost_usd"] = 0.0001
    lines[i], _ = seal(record, Digester(None))  # SHA-256: all a forger without the key can do
    save(logfile, lines)
    code, out, _ = cli("audit", "verify", logfile, "--key-file", key_file)
    assert code == 1
    assert out.splitlines() == [f"{logfile}:{i + 1}: bad digest (content does not match its digest)"]


def test_without_a_key_a_rehashed_line_breaks_the_next_link(cli: Cli, tmp_path: Path) -> None:
    logfile = write_log(tmp_path, key=None)
    lines = lines_of(logfile)
    i = find(lines, "call", 1)
    parsed = unseal(lines[i].rstrip(b"\n"))
    assert parsed is not None
    parsed[0]["status"] = "error"
    lines[i], _ = seal(parsed[0], Digester(None))
    save(logfile, lines)
    code, out, _ = cli("audit", "verify", logfile)
    assert code == 1
    assert out.splitlines() == [
        f"{logfile}:{i + 1}: modified (re-hashed: the next record does not link to it)"
    ]


def test_bad_input_exits_2_without_a_traceback(
    cli: Cli, logfile: Path, key_file: Path, tmp_path: Path
) -> None:
    cases = [
        ("audit", "verify", tmp_path / "nope"),
        ("audit", "verify", logfile),  # keyed, no --key-file
        ("audit", "verify", logfile, "--key-file", tmp_path / "missing-key"),
        ("audit", "verify", logfile, "--key-file", key_file, "--expect-head", "xyz"),
        ("audit", "verify"),
    ]
    for args in cases:
        code, out, err = cli(*args)
        assert code == 2, (args, out, err)
        assert "Traceback" not in out + err and err.strip(), args
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\x00\xffnot json\n{}\n[1, 2]\n")
    code, out, err = cli("audit", "verify", garbage)
    assert code == 1 and "Traceback" not in out + err
    assert out.splitlines()[0] == f"{garbage}:1: modified (not a valid record)"
    lines = lines_of(logfile)
    save(logfile, lines[1:])  # the opening line removed: the rest is intact, its start is missing
    code, out, _ = cli("audit", "verify", logfile, "--key-file", key_file)
    assert code == 1
    assert out.splitlines()[0] == f"{logfile}:1: missing record (the file's opening log record is missing)"


ALNUM = string.ascii_lowercase + string.digits


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes]:
    """One log written once; each example tampers with a fresh copy of it."""
    logfile = write_log(tmp_path_factory.mktemp("template"))
    return logfile.name, logfile.read_bytes()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    line_pick=st.integers(0, 10**6), char_pick=st.integers(0, 10**6), new_pick=st.integers(0, len(ALNUM) - 2)
)
def test_any_changed_character_is_found_on_its_line(
    line_pick: int,
    char_pick: int,
    new_pick: int,
    template: tuple[str, bytes],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    directory = tmp_path_factory.mktemp("prop")
    logfile = directory / template[0]
    key_file = directory / "key"
    key_file.write_bytes(KEY)
    lines = template[1].splitlines(keepends=True)
    i = line_pick % len(lines)
    line = lines[i]
    positions = [p for p, c in enumerate(line.decode()) if c in ALNUM]
    p = positions[char_pick % len(positions)]
    old = chr(line[p])
    new = [c for c in ALNUM if c != old][new_pick]
    lines[i] = line[:p] + new.encode() + line[p + 1 :]
    save(logfile, lines)
    code, out, _ = run_cli("audit", "verify", logfile, "--key-file", key_file)
    assert code == 1
    reported = out.splitlines()
    assert reported and reported[0].startswith(f"{logfile}:{i + 1}: "), (i, p, old, new, reported)
    # A rewritten digest shows as such when the next record still links to the old one; the last
    # record has no next, so there it can only be told apart from a changed content by its line.
    in_digest = p >= line.rindex(b'"digest":"') + len(b'"digest":"')  # the digest's value, not its key
    expected = ("bad digest",) if in_digest and i < len(lines) - 1 else ("modified", "bad digest")
    assert reported[0].split(": ")[1].split(" (")[0] in expected
