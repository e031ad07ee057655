"""``veronica-mw audit verify | show | calls | keygen``: check, read, list the calls of an audit log; keys.

PATH may be audit files, directories (every ``*.jsonl`` in them) or the ``path`` given to
``AuditLog`` (its per-process files beside it). ``keygen OUT`` writes an Ed25519 key pair for
``AuditLog(signing_key=OUT)``: OUT (private, mode 0600) and OUT.pub (for ``verify --public-key``).

Exit status: 0 success (``verify``: nothing is missing or altered; ends explained by accidents are
printed as ``recovered:`` / ``not covered:`` lines); 1 ``verify`` found problems, one line each,
``<file>:<line>: <what>``; 2 bad input (no such file, unknown chain id, a keyed log without
``--key-file``, a malformed ``--expect-head``). Everything printed from the log is terminal-safe.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..observe._audit_read import AuditInputError
from ..observe._audit_sign import keygen
from ..observe.audit_runs import Run, load_runs, replayable
from ..observe.audit_verify import VerifyReport, verify
from ._audit_escape import clean, safe
from ._audit_tree import render_runs

PROG = "veronica-mw audit"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser(
        "audit", help="verify, show or list the calls of an audit log", description=__doc__
    )
    actions = audit.add_subparsers(dest="action", required=True)

    check = actions.add_parser("verify", help="check every digest, link and file; exit 1 on any problem")
    check.add_argument("paths", nargs="+", metavar="PATH")
    check.add_argument(
        "--key-file", type=Path, help="file holding the HMAC key (a trailing newline is ignored)"
    )
    check.add_argument(
        "--expect-head", action="append", default=[], metavar="HEX",
        help="a head digest seen earlier: it must still be in the log (detects a dropped tail); repeatable",
    )  # fmt: skip
    check.add_argument(
        "--public-key", type=Path, metavar="PUB",
        help="Ed25519 public key (PEM, from 'audit keygen'): every chain's signed digests must hold",
    )  # fmt: skip
    check.add_argument(
        "--anchor", action="append", default=[], metavar="PATH|URL",
        help="anchor file or redis:// URL: every digest anchored there must be in the log; repeatable",
    )  # fmt: skip
    check.add_argument(
        "--max-problems", type=int, default=100, metavar="N", help="per file (0: all; default 100)"
    )
    check.add_argument("--json", action="store_true", help="print a JSON report")
    check.set_defaults(handler=_guarded(run_verify))

    keys = actions.add_parser("keygen", help="write an Ed25519 key pair: OUT (private, 0600) and OUT.pub")
    keys.add_argument("out", type=Path, metavar="OUT")
    keys.set_defaults(handler=_guarded(run_keygen))

    show = actions.add_parser(
        "show", help="the runs as a tree: contexts > calls, with cost, status and halts"
    )
    show.add_argument("paths", nargs="+", metavar="PATH")
    show.add_argument(
        "--chain", metavar="ID", help="only this context (chain id, or a unique prefix) and its children"
    )
    show.add_argument("--json", action="store_true", help="print the runs as JSON")
    show.set_defaults(handler=_guarded(run_show))

    calls = actions.add_parser("calls", help="the recorded LLM calls of one run, replay-ready")
    calls.add_argument("paths", nargs="+", metavar="PATH")
    calls.add_argument(
        "--chain", required=True, metavar="ID", help="the context's chain id (or a unique prefix)"
    )
    calls.add_argument(
        "--json", action="store_true", help="print JSON (messages, model, parameters, response text...)"
    )
    calls.set_defaults(handler=_guarded(run_calls))


def _guarded(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = handler(args)
            return code
        except (AuditInputError, OSError, ImportError) as exc:
            print(f"{PROG}: error: {safe(str(exc))}", file=sys.stderr)
            return 2

    return run


def read_key(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        key = path.read_bytes()
    except OSError as exc:
        raise AuditInputError(f"--key-file {path}: {exc.strerror or exc}") from exc
    key = key[:-2] if key.endswith(b"\r\n") else key[:-1] if key.endswith(b"\n") else key
    if not key:
        raise AuditInputError(f"--key-file {path}: the file is empty")
    return key


# -- verify --------------------------------------------------------------------------------------


def run_verify(args: argparse.Namespace) -> int:
    report = verify(
        args.paths,
        key=read_key(args.key_file),
        expect_heads=args.expect_head,
        public_key=args.public_key,
        anchors=args.anchor,
    )
    if args.json:
        json.dump(_verify_json(report), sys.stdout, indent=2)
        print()
        return 0 if report.ok else 1
    if report.ok:
        if len(report.chains) == 1:
            print(f"ok: {report.records} records, 1 chains, head {report.head}")
        else:
            print(f"ok: {report.records} records, {len(report.chains)} chains")
    shown: dict[str, int] = {}
    hidden: dict[str, int] = {}
    for problem in report.problems:
        count = shown.get(problem.file, 0)
        if args.max_problems and count >= args.max_problems:
            hidden[problem.file] = hidden.get(problem.file, 0) + 1
            continue
        shown[problem.file] = count + 1
        print(safe(str(problem)))
    for file, count in hidden.items():
        print(f"{safe(file)}: ... and {count} more problems (--max-problems 0 lists all)")
    if report.ok and len(report.chains) > 1:
        for chain in report.chains:  # each chain's own head: a stable --expect-head for later
            print(f"chain {safe(chain.log)}: {chain.records} records, head {chain.head}")
    for note in report.notes:
        print(safe(note))
    _print_coverage(report)
    if not report.ok:
        print(f"{len(report.problems)} problems in {report.records} records", file=sys.stderr)
        return 1
    return 0


def _print_coverage(report: VerifyReport) -> None:
    signed = report.signed
    if signed is None:
        return
    until = signed["until"]
    when = datetime.fromtimestamp(until, timezone.utc).isoformat(timespec="seconds") if until else "-"
    print(
        f"intact up to {when} for {signed['chains']} chains; records after that (at most "
        f"digest_interval_s) are not covered by a signature ({signed['uncovered']} records)"
    )
    if report.anchored:
        print(f"anchored: {report.anchored} digests, every one found in the log")


def _verify_json(report: VerifyReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "records": report.records,
        "head": report.head,
        "chains": [
            {"log": c.log, "alg": c.alg, "files": c.files, "records": c.records, "head": c.head}
            for c in report.chains
        ],
        "problems": [
            {"file": p.file, "line": p.line, "what": p.what, "detail": p.detail} for p in report.problems
        ],
        "notes": report.notes,
        "signed": report.signed,
        "anchored": report.anchored,
    }


def run_keygen(args: argparse.Namespace) -> int:
    private, public = keygen(args.out)
    print(
        f"private key: {safe(str(private))} (mode 0600: keep it with the writer only, never beside the log)"
    )
    print(f"public key:  {safe(str(public))} (give it to whoever verifies: audit verify --public-key)")
    return 0


# -- show / calls --------------------------------------------------------------------------------


def find_run(runs: dict[str, Run], chain: str) -> Run:
    """The run with this chain id, or the only one it is a prefix of."""
    run = runs.get(chain)
    if run is not None:
        return run
    matches = [r for key, r in runs.items() if key.startswith(chain)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise AuditInputError(f"--chain {chain!r} matches {len(matches)} contexts; give more of the id")
    raise AuditInputError(f"--chain {safe(chain)!r}: no such context in the log ({len(runs)} contexts)")


def run_show(args: argparse.Namespace) -> int:
    refusals: list[dict[str, Any]] = []
    runs = load_runs(args.paths, refusals, None if args.json else clean)
    selected = [find_run(runs, args.chain)] if args.chain else None
    if args.json:
        json.dump(render_runs(runs, selected, as_json=True), sys.stdout, indent=2)
        print()
        return 0
    for line in render_runs(runs, selected, stream=sys.stdout):
        print(line)
    if refusals and selected is None:
        counts: dict[str, int] = {}
        for record in refusals:
            key = f"{record.get('reason')} (HTTP {record.get('status')})"
            counts[key] = counts.get(key, 0) + 1
        print("refused before a context: " + ", ".join(f"{n} {key}" for key, n in counts.items()))
    return 0


def run_calls(args: argparse.Namespace) -> int:
    runs = load_runs(args.paths, None, None if args.json else clean)
    run = find_run(runs, args.chain)
    calls = replayable(run)
    if args.json:
        json.dump({"chain": run.chain, "calls": [c.as_dict() for c in calls]}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{run.label} [chain {run.chain}]: {len(calls)} LLM calls")
    for number, call in enumerate(calls, start=1):
        tokens = f"{call.tokens_in}->{call.tokens_out} tokens"
        print(
            f"#{number} call {call.call} [chain {call.chain}] {call.model or '-'} {tokens} "
            f"${call.cost_usd:.6f} {call.duration_ms:.1f} ms {call.status}"
        )
        request = call.request
        if request is None:
            print("   request: not recorded (record_bodies=False)")
            continue
        messages = request.get("messages") or []
        params = request.get("parameters") or {}
        print(f"   messages: {len(messages)}; parameters: {json.dumps(params, sort_keys=True)}")
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else message
            print(f"   {(message.get('role') if isinstance(message, dict) else '?')}: {_short(content)}")
        if request.get("prompt") is not None:
            print(f"   prompt: {_short(request['prompt'])}")
        print(f"   response: {_short(call.response_text)}")
    return 0


def _short(value: Any, width: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value)  # records were made safe on load
    return text if len(text) <= width else text[: width - 3] + "..."
