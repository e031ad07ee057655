"""Every ```python block of README.md and docs/ runs, offline, against the real frameworks.

One fresh interpreter per page (tests/docs/run_document.py): the page's blocks run in order in one
namespace, with the fake provider server standing in for the model APIs. A page passes when every
block ran except those marked ``<!-- skip: next -->``, and the number of blocks that ran is the
number the page has (so a parser that silently found nothing would fail here).
"""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP = "<!-- skip: next -->"
_BLOCK = re.compile(r"^```python\s*$", re.MULTILINE)


def _has_examples(page: Path) -> bool:
    return bool(_BLOCK.search(page.read_text(encoding="utf-8")))


ALL_PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# Pages whose framework cannot share the docs env (CrewAI pins openai<3, which newer Pydantic AI
# outgrew): the named tox env runs them, selecting them with VERONICA_DOCS_PAGES.
ELSEWHERE = {"docs/integrations/crewai.md": "crewai"}
_selected = os.environ.get("VERONICA_DOCS_PAGES")
PAGES = (
    [ROOT / name for name in _selected.split(",")]
    if _selected
    else [page for page in ALL_PAGES if str(page.relative_to(ROOT)) not in ELSEWHERE and _has_examples(page)]
)


def _ids(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_every_example_of_the_page_runs(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    blocks, skips = len(_BLOCK.findall(text)), text.count(SKIP)
    assert blocks, f"{page} has no Python example"
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


def test_pages_left_to_another_env_are_run_there() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    for page, env in ELSEWHERE.items():
        section = tox[f"testenv:{env}"]
        assert f"VERONICA_DOCS_PAGES = {page}" in section["set_env"]
        assert "tests/docs/test_examples.py" in section["commands"]
        assert (ROOT / page).is_file()


def test_skipped_examples_are_few() -> None:
    texts = [page.read_text(encoding="utf-8") for page in ALL_PAGES]
    blocks = sum(len(_BLOCK.findall(text)) for text in texts)
    skips = sum(text.count(SKIP) for text in texts)
    assert blocks >= 40
    assert skips * 10 <= blocks, f"{skips} of {blocks} examples are skipped"
