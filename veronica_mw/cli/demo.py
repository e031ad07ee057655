"""``veronica-mw demo [--json]``: the paper's Section 6 runaway scenarios, baseline vs contained."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

from . import _demo_kernel


def _kernel_scenario(name: str, fn: Callable[[bool], dict[str, Any]], mechanism: str) -> dict[str, Any]:
    baseline, contained = fn(False), fn(True)
    return _row(name, baseline["underlying_calls"], contained["underlying_calls"], mechanism, contained)


def _row(name: str, baseline: int, contained: int, mechanism: str, detail: dict[str, Any]) -> dict[str, Any]:
    reduction = round(100.0 * (baseline - contained) / baseline, 1) if baseline else 0.0
    return {
        "scenario": name,
        "baseline_ops": baseline,
        "veronica_ops": contained,
        "reduction_pct": reduction,
        "mechanism": mechanism,
        "detail": detail,
    }


def _websocket() -> dict[str, Any]:
    result: dict[str, Any] = importlib.import_module(
        "veronica_mw.cli._demo_websocket"
    ).run_websocket_runaway()
    return _row(
        "websocket_runaway",
        result["baseline_ops"],
        result["contained_ops"],
        "max_steps, close code 1008",
        result,
    )


def _multi_agent() -> dict[str, Any]:
    # Imported by name: the AG2 scenario needs the optional ag2 extra, never a static dependency.
    result: dict[str, Any] = importlib.import_module(
        "veronica_mw.adapters._ag2_demo"
    ).run_multi_agent_scenario()
    return _row(
        "multi_agent_loop",
        result["baseline_llm_calls"],
        result["contained_llm_calls"],
        f"max_steps via AG2 {result.get('adapter', 'adapter')}",
        result,
    )


def run_demo() -> list[dict[str, Any]]:
    rows = [
        _kernel_scenario(
            "retry_amplification", _demo_kernel.retry_amplification, "max_retries_total, RetryContainer"
        ),
        _kernel_scenario("recursive_tools", _demo_kernel.recursive_tools, "max_steps, call_tool"),
    ]
    for name, extra, runner in (
        ("websocket_runaway", "fastapi", _websocket),
        ("multi_agent_loop", "ag2", _multi_agent),
    ):
        try:
            rows.append(runner())
        except ImportError as exc:
            rows.append({"scenario": name, "unavailable": f'pip install "veronica-mw[{extra}]" ({exc})'})
    return rows


@contextlib.contextmanager
def _quiet_library_logs() -> Iterator[list[logging.LogRecord]]:
    """Keep what the scenarios log (the 1008 close of the contained WebSocket session, say) out of
    the table: with no handler configured, Python's last-resort handler would print it to stderr,
    in the middle of the output. The records are collected instead."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("veronica_mw")
    handler, propagate = Collect(logging.DEBUG), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _print_tree(rows: list[dict[str, Any]]) -> None:
    """The multi-agent scenario's contexts as a tree (box-drawing characters on a terminal)."""
    for row in rows:
        tree = row.get("detail", {}).get("tree")
        if not tree:
            continue
        if not sys.stdout.isatty():
            tree = tree.translate(str.maketrans("├└─│", "|`-|"))
        print()
        print(f"{row['scenario']}: contexts")
        print(tree)


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = f"{'scenario':<22}{'baseline':>10}{'veronica':>10}{'reduction':>11}  mechanism"
    print(header)
    print("-" * len(header))
    for row in rows:
        if "unavailable" in row:
            print(f"{row['scenario']:<22}  unavailable: {row['unavailable']}")
            continue
        print(
            f"{row['scenario']:<22}{row['baseline_ops']:>10}{row['veronica_ops']:>10}"
            f"{row['reduction_pct']:>10.1f}%  {row['mechanism']}"
        )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="run the paper's runaway scenarios, baseline vs contained")
    demo.add_argument("--json", action="store_true", help="print JSON instead of a table")
    demo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    with _quiet_library_logs():
        rows = run_demo()
    if args.json:
        json.dump({"scenarios": rows}, sys.stdout, indent=2)
        print()
    else:
        _print_table(rows)
        _print_tree(rows)
    return 0
