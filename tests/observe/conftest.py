"""Helpers for the audit-log tests: read a log back, run the CLI in-process."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from veronica_mw.cli.main import main
from veronica_mw.observe._audit_read import iter_records

from ..pools.conftest import redis_server, redis_url
from ..support.redis_cluster import _redis_cluster_session, redis_cluster  # noqa: F401  (fixtures)

__all__ = ["Cli", "read_records", "redis_server", "redis_url", "run_cli"]

Cli = Callable[..., tuple[int, str, str]]


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Every record of an audit directory, file or configured path, in file order."""
    return list(iter_records([path]))


def run_cli(*args: str | Path) -> tuple[int, str, str]:
    """``veronica-mw ARGS`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def cli() -> Cli:
    return run_cli
