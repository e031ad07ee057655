"""``veronica-mw replay PATH... --chain ID --model M``: re-run a recorded run's LLM calls on another model.

Each recorded request (the log must have been written with ``record_bodies=True``) is sent with
model M to an OpenAI-compatible ``/chat/completions`` endpoint -- ``--base-url``, default
``$OPENAI_BASE_URL`` or OpenAI's; a local Ollama is ``http://127.0.0.1:11434/v1`` -- inside an
execution context capped at ``--max-cost-usd``. Prints, per call, original vs replay: model,
tokens, cost and whether the text is identical, then the totals.

The log is verified first (``audit verify`` with the ``--key-file``, ``--public-key`` and
``--anchor`` given) and a log that fails is refused, unless ``--no-verify``. Credentials are never
taken from the log: parameters under a secret name, or holding a key-shaped or redacted value, are
not sent; the only key sent is the one in ``--api-key-env``.

Exit status: 0 every call was replayed; 1 the replay is incomplete (a call failed, or the ceiling
stopped it); 2 bad input (no such file or chain, nothing recorded to replay, a log that does not
verify).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..kernel._validate import check_number
from ..observe._audit_read import AuditInputError
from ..observe.audit import AuditLog
from ..observe.audit_runs import load_runs, replayable
from ..observe.audit_verify import verify
from ..observe.replay import ChatClient, ReplayReport, replay_calls
from ._audit_escape import safe
from .audit import find_run, read_key

PROG = "veronica-mw replay"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replay = sub.add_parser(
        "replay", help="re-send a run's recorded LLM calls to another model", description=__doc__
    )
    replay.add_argument("paths", nargs="+", metavar="PATH")
    replay.add_argument(
        "--chain", required=True, metavar="ID", help="the run's chain id (or a unique prefix)"
    )
    replay.add_argument("--model", required=True, metavar="M", help="the model to ask instead")
    replay.add_argument(
        "--base-url",
        metavar="URL",
        help=f"OpenAI-compatible API root (default $OPENAI_BASE_URL or {DEFAULT_BASE_URL})",
    )
    replay.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="VAR",
        help="environment variable holding the API key (unset: none sent)",
    )
    replay.add_argument(
        "--max-cost-usd",
        type=float,
        default=1.0,
        metavar="X",
        help="ceiling for the whole replay (default 1.0)",
    )
    replay.add_argument(
        "--timeout-s", type=float, default=120.0, metavar="S", help="per request (default 120)"
    )
    replay.add_argument(
        "--audit", metavar="PATH", help="also write the replay itself to an audit log at PATH"
    )
    replay.add_argument("--key-file", type=Path, help="the log's HMAC key, to verify it first")
    replay.add_argument("--public-key", type=Path, metavar="PUB", help="check its signed digests too")
    replay.add_argument(
        "--anchor", action="append", default=[], metavar="PATH|URL", help="and its anchored digests"
    )
    replay.add_argument(
        "--no-verify", action="store_true", help="replay a log that does not verify (not recommended)"
    )
    replay.add_argument("--json", action="store_true", help="print a JSON report")
    replay.set_defaults(handler=run)


def _check_log(args: argparse.Namespace) -> None:
    """Refuse a log that does not verify: its requests could be anyone's."""
    if args.no_verify:
        return
    report = verify(args.paths, key=read_key(args.key_file), public_key=args.public_key, anchors=args.anchor)
    if not report.ok:
        first = report.problems[0]
        raise AuditInputError(
            f"the log does not verify ({len(report.problems)} problems; first: {first}); "
            "nothing was sent (--no-verify replays it anyway)"
        )


def run(args: argparse.Namespace) -> int:
    try:
        ceiling = check_number("--max-cost-usd", args.max_cost_usd)
        client = ChatClient(
            args.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            os.environ.get(args.api_key_env) or None,
            timeout_s=check_number("--timeout-s", args.timeout_s) or 120.0,
        )
        _check_log(args)
        run = find_run(load_runs(args.paths), args.chain)
        calls = replayable(run)
        if not calls:
            raise AuditInputError(f"chain {run.chain}: no LLM calls recorded")
        if all(call.request is None for call in calls):
            raise AuditInputError(
                f"chain {run.chain}: no request bodies recorded (AuditLog(record_bodies=True))"
            )
    except (AuditInputError, OSError, ValueError, TypeError) as exc:
        print(f"{PROG}: error: {safe(str(exc))}", file=sys.stderr)
        return 2
    log = AuditLog(args.audit, record_bodies=True) if args.audit else None
    try:
        report = replay_calls(calls, model=args.model, client=client, max_cost_usd=ceiling, audit=log)
    finally:
        if log is not None:
            log.close()
    if args.json:
        json.dump({"chain": run.chain, **report.as_dict()}, sys.stdout, indent=2)
        print()
    else:
        _print_table(report)
    return 0 if report.complete else 1


def _print_table(report: ReplayReport) -> None:
    side = f"{'tokens':>12}{'cost':>12}"
    header = f"{'#':>3}  {'original model':<22}{side}  {'replay model':<22}{side}  same"
    print(header)
    print("-" * len(header))
    for row in report.rows:
        original = f"{_tokens(row.original_tokens):>12}{_usd(row.original_cost_usd):>12}"
        left = f"{row.index:>3}  {row.original_model or '-':<22}{original}  "
        if row.status == "ok":
            same = "-" if row.identical is None else "yes" if row.identical else "no"
            print(f"{left}{row.model:<22}{_tokens(row.tokens):>12}{_usd(row.cost_usd):>12}  {same}")
        else:
            print(f"{left}{row.status}: {row.detail}")
    totals = report.totals()
    original, replayed = totals["original"], totals["replay"]
    print("-" * len(header))
    print(
        f"{'':>3}  {'total':<22}{_tokens((original['tokens_in'], original['tokens_out'])):>12}"
        f"{_usd(original['cost_usd']):>12}  {report.model:<22}"
        f"{_tokens((replayed['tokens_in'], replayed['tokens_out'])):>12}{_usd(replayed['cost_usd']):>12}  "
        f"{totals['identical']}/{totals['replayed']} identical"
    )
    if report.halted:
        print(f"stopped: {report.halted} (--max-cost-usd {report.max_cost_usd:g})")


def _tokens(pair: Any) -> str:
    return f"{pair[0]}/{pair[1]}"


def _usd(value: float) -> str:
    return f"${value:.6f}"
