"""``veronica-mw run [limits] [--json] [--] script.py [args...]`` (or ``-m module [args...]``).

Runs a Python program inside one execution context, with every installed provider SDK and
framework adapter instrumented, and reports what it spent on stderr when it ends: a one-line
summary (reason, steps, cost), or with ``--json`` the snapshot as one JSON line. Omitted limits
are unlimited, so ``veronica-mw run script.py`` measures what a script spends. Before each model
request its worst case is reserved: ``--max-output-tokens N`` is the output assumed for a request
that sets no limit (default 4096); ``--fit-output`` sends a request that would not fit what is
left of ``--max-cost-usd`` with its output limit lowered to what it affords (FitOutputToBudget).

Exit status: the program's own; 3 when the context halted (a limit was reached, whether or not
the program caught the ``ExecutionHalted``); 2 for bad arguments or a program that cannot be found;
130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import traceback
from typing import Any

from ..instrumentation import instrument
from ..kernel.config import ExecutionConfig
from ..kernel.exceptions import ExecutionHalted
from ..kernel.execution import ExecutionContext
from ..kernel.pricing import UNLIMITED_USD
from ._run_scope import inherit_context_in_threads, instrument_everything

HALTED = 3
_UNLIMITED_COST = UNLIMITED_USD  # ExecutionConfig needs finite numbers; these are never reached
_UNLIMITED_COUNT = sys.maxsize


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        help="run a Python program inside one execution context and report what it spent",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--max-cost-usd", type=float, metavar="X", help="halt before spending more than X USD")
    run.add_argument("--max-steps", type=int, metavar="N", help="halt before the (N+1)th model or tool call")
    run.add_argument(
        "--max-retries", type=int, metavar="N", help="retries allowed in total (SDK retries too)"
    )
    run.add_argument("--timeout-ms", type=float, metavar="T", help="halt calls made after T milliseconds")
    run.add_argument(
        "--max-output-tokens",
        type=int,
        metavar="N",
        help="output tokens assumed (and reserved) for a model request that sets no limit (default 4096)",
    )
    run.add_argument(
        "--fit-output",
        action="store_true",
        help="send a model call that would not fit the remaining budget with fewer output tokens",
    )
    run.add_argument("--json", action="store_true", help="report the snapshot as JSON on stderr")
    run.add_argument(
        "-m", dest="module", nargs=argparse.REMAINDER, metavar="module", help="run a module, like python -m"
    )
    run.add_argument(
        "program", nargs=argparse.REMAINDER, metavar="script.py [args...]", help=argparse.SUPPRESS
    )
    run.set_defaults(handler=main, parser=run)


def _config(args: argparse.Namespace) -> ExecutionConfig:
    return ExecutionConfig(
        max_cost_usd=_UNLIMITED_COST if args.max_cost_usd is None else args.max_cost_usd,
        max_steps=_UNLIMITED_COUNT if args.max_steps is None else args.max_steps,
        max_retries_total=_UNLIMITED_COUNT if args.max_retries is None else args.max_retries,
        timeout_ms=args.timeout_ms or 0,
    )


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_cost_usd": args.max_cost_usd,
        "max_steps": args.max_steps,
        "max_retries_total": args.max_retries,
        "timeout_ms": args.timeout_ms,
        "max_output_tokens": args.max_output_tokens,
        "fit_output": args.fit_output,
    }


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1, as python does
    return 1


def _execute(args: argparse.Namespace) -> int:
    """Run the program in the current thread; return its exit status."""
    try:
        if args.module is not None:
            sys.argv = [args.module[0], *args.module[1:]]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(args.module[0], run_name="__main__", alter_sys=True)
        else:
            script = args.program[0]
            sys.argv = list(args.program)
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc)
    except ExecutionHalted:
        return HALTED
    except KeyboardInterrupt:
        return 130
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _report(ctx: ExecutionContext, args: argparse.Namespace, status: int) -> None:
    snap = ctx.get_snapshot()
    if args.json:
        report = {
            "reason": snap.abort_reason,
            "detail": snap.abort_detail,
            "steps": snap.step_count,
            "cost_usd": round(snap.cost_usd_accumulated, 9),
            "retries": snap.retries_used,
            "elapsed_ms": round(snap.elapsed_ms, 3),
            "chain_id": snap.chain_id,
            "limits": _limits(args),
            "events": [{"kind": e.kind, "detail": e.detail} for e in snap.events],
            "exit_status": status,
        }
        print(json.dumps(report), file=sys.stderr)
        return
    outcome = f"halted: {snap.abort_reason} ({snap.abort_detail})" if snap.aborted else "completed"
    print(
        f"veronica-mw: {outcome}; steps {snap.step_count}, cost ${snap.cost_usd_accumulated:.6f}, "
        f"retries {snap.retries_used}, {snap.elapsed_ms / 1000.0:.2f}s",
        file=sys.stderr,
    )


def main(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    # ``veronica-mw run [limits] -- script.py args``: the conventional separator before the program.
    if args.program and args.program[0] == "--":
        args.program = args.program[1:]
    if args.module is not None and not args.module:
        parser.error("-m needs a module name")
    if args.module is None and not args.program:
        parser.error("give a script to run (or -m module)")
    if args.module is None and not os.path.isfile(args.program[0]):
        parser.error(f"can't open file {args.program[0]!r}")
    try:
        config = _config(args)
        if args.max_output_tokens is not None or args.fit_output:
            instrument(max_output_tokens=args.max_output_tokens, fit_output=True if args.fit_output else None)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    instrument_everything()
    undo = inherit_context_in_threads()
    ctx = ExecutionContext(config)
    try:
        with ctx:
            status = _execute(args)
    finally:
        undo()
    if ctx.aborted:
        status = HALTED
    _report(ctx, args, status)
    return status
