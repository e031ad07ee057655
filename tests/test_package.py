"""Packaging and public-API hygiene."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import veronica_mw

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = [
    "langchain_core",
    "langchain",
    "langgraph",
    "autogen",
    "ag2",
    "crewai",
    "llama_index",
    "fastapi",
    "starlette",
    "flask",
    "django",
    "redis",
    "uvicorn",
]


def test_all_is_sorted_and_exported() -> None:
    assert veronica_mw.__all__ == sorted(veronica_mw.__all__)
    for name in veronica_mw.__all__:
        assert getattr(veronica_mw, name) is not None, name


def test_core_import_pulls_in_no_framework() -> None:
    code = (
        "import json, sys, veronica_mw, veronica_mw.adapters;"
        f"print(json.dumps([m for m in {FRAMEWORKS!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_wheel_has_no_top_level_adapters_package(tmp_path: Path) -> None:
    build = f"from setuptools import build_meta; build_meta.build_wheel({str(tmp_path)!r})"
    subprocess.run([sys.executable, "-c", build], cwd=ROOT, check=True, capture_output=True)
    (wheel,) = tmp_path.glob("veronica_mw-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not any(n.startswith("adapters/") for n in names)
    assert "veronica_mw/adapters/__init__.py" in names
    assert "veronica_mw/py.typed" in names


def test_demo_cli_json() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "veronica_mw.cli", "demo", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = {row["scenario"]: row for row in json.loads(out.stdout)["scenarios"]}
    assert rows["retry_amplification"]["veronica_ops"] == 6
    assert rows["recursive_tools"]["veronica_ops"] == 5
    # The test extra brings uvicorn and websockets, so the WebSocket scenario really runs here.
    assert (rows["websocket_runaway"]["baseline_ops"], rows["websocket_runaway"]["veronica_ops"]) == (100, 10)
    assert rows["websocket_runaway"]["detail"]["close_code"] == 1008
