"""The ``veronica-mw`` console script: one subcommand module each (``demo``, ``run``, ``audit``,
``replay``).

Exit status: 0 on success, 2 for bad arguments (argparse); each subcommand documents its own
(``run``: the program's status, or 3 when it was halted).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import audit, demo, replay, run

_SUBCOMMANDS = (demo, run, audit, replay)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="veronica-mw", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in _SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code
