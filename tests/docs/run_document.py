"""Runs every ```python block of one Markdown page in order, in one namespace, as a reader would.

``python tests/docs/run_document.py PAGE.md`` (what tests/docs/test_examples.py does, one fresh
interpreter per page so no page sees another's instrumentation or globals). Offline: a fake model
provider (tests/support/fake_provider.py) is started on 127.0.0.1 and the provider SDKs are pointed
at it through their own environment variables (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``, dummy
keys), so a block that builds ``OpenAI()`` or ``Agent("openai:gpt-4o")`` talks to it unchanged. The
block runs in a scratch directory (files it writes go there). ``<!-- skip: next -->`` before a block
skips it (Sybil's skip directive). Prints one JSON line: examples run, skipped, and the model requests
the fake provider received; exits 1 with the failing block's location and traceback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any
from unittest import SkipTest

from sybil import Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.example import NotEvaluated
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parents[2]


def _fake_provider() -> Any:
    """tests/support/fake_provider.py's FakeProvider (tests/ is not a package)."""
    path = ROOT / "tests" / "support" / "fake_provider.py"
    spec = importlib.util.spec_from_file_location("fake_provider", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fake_provider"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.FakeProvider


def run(page: Path) -> dict[str, int]:
    page = page.resolve()
    document = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()]).parse(page)
    document.namespace["__name__"] = "__docs__"
    ran = skipped = 0
    with _fake_provider()() as server, tempfile.TemporaryDirectory() as scratch:
        os.environ.update(
            OPENAI_BASE_URL=server.openai_url,
            OPENAI_API_KEY="sk-docs-test",
            ANTHROPIC_BASE_URL=server.anthropic_url,
            ANTHROPIC_API_KEY="sk-ant-docs-test",
        )
        os.chdir(scratch)
        skip_next = False
        for example in document:
            python = isinstance(example.region.evaluator, PythonEvaluator)
            try:
                example.evaluate()  # a skipped block is handed to Sybil's skipper, which runs nothing
            except (SkipTest, NotEvaluated):
                skipped += 1
                continue
            except BaseException:
                rel = page.relative_to(ROOT)
                print(f"{rel}:{example.line}: this example failed", file=sys.stderr)
                traceback.print_exc()
                raise SystemExit(1) from None
            if not python:
                skip_next = example.parsed == ("next", None)
            elif skip_next:
                skipped, skip_next = skipped + 1, False
            else:
                ran += 1
        requests = server.count()
        os.chdir(ROOT)
    return {"ran": ran, "skipped": skipped, "model_requests": requests}


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]))))
