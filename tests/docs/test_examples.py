"""Every ```python block of README.md and docs/ runs, offline, against the real frameworks.

One fresh interpreter per page (tests/docs/run_document.py): the page's blocks run in order in one
namespace, with the fake provider server standing in for the model APIs. A page passes when every
block ran except those marked ``<!-- skip: next -->``, and the number of blocks that ran is the
number the page has (so a parser that silently found nothing would fail here).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SKIP = "<!-- skip: next -->"
_BLOCK = re.compile(r"^```python\s*$", re.MULTILINE)


def _ids(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_every_example_of_the_page_runs(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    blocks, skips = len(_BLOCK.findall(text)), text.count(SKIP)
    if not blocks:
        pytest.skip("no Python examples on this page")
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "docs" / "run_document.py"), str(page)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
        cwd=ROOT,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert counts["skipped"] == skips
    assert counts["ran"] == blocks - skips


def test_skipped_examples_are_few() -> None:
    texts = [page.read_text(encoding="utf-8") for page in PAGES]
    blocks = sum(len(_BLOCK.findall(text)) for text in texts)
    skips = sum(text.count(SKIP) for text in texts)
    assert blocks >= 40
    assert skips * 10 <= blocks, f"{skips} of {blocks} examples are skipped"
