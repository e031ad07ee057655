"""Packaging and public-API hygiene."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import veronica_mw

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "veronica_mw"
LAYERS = ("kernel", "web", "pools", "observe", "control", "cli")
FRAMEWORKS = [
    "langchain_core",
    "langchain",
    "langgraph",
    "autogen",
    "ag2",
    "crewai",
    "llama_index",
    "agents",
    "fastapi",
    "starlette",
    "flask",
    "django",
    "redis",
    "uvicorn",
    "openai",
    "anthropic",
    "litellm",
    "google.genai",
    "mcp",
    "fastmcp",
    "opentelemetry",
]
# Built on the OpenTelemetry API, imported only once OpenTelemetry is in use (observe/otel.py).
NEEDS_OTEL = {"veronica_mw.observe._otel_spans", "veronica_mw.observe._otel_metrics"}


def test_all_is_sorted_and_exported() -> None:
    assert veronica_mw.__all__ == sorted(veronica_mw.__all__)
    for name in veronica_mw.__all__:
        assert getattr(veronica_mw, name) is not None, name


def _core_modules() -> list[str]:
    """Every module under veronica_mw/ (the framework-free part), as dotted names."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__" or ".".join(parts) in NEEDS_OTEL:
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_core_import_pulls_in_no_framework() -> None:
    modules = _core_modules()
    assert {f"veronica_mw.{layer}" for layer in LAYERS} <= set(modules)
    code = (
        "import importlib, json, sys, veronica_mw.adapters\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {FRAMEWORKS!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_kernel_imports_no_other_layer() -> None:
    for path in sorted((PACKAGE / "kernel").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                # inside veronica_mw/kernel/, one dot is the kernel itself; two would reach another layer
                assert node.level == 1, f"{path.name}:{node.lineno} imports outside the kernel"
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] == "veronica_mw" for n in names), f"{path.name}:{node.lineno}"


def test_graph_and_context_import_on_their_own() -> None:
    for module in ("veronica_mw.kernel.graph", "veronica_mw.kernel.context"):
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)


def test_wheel_has_no_top_level_adapters_package(tmp_path: Path) -> None:
    build = f"from setuptools import build_meta; build_meta.build_wheel({str(tmp_path)!r})"
    subprocess.run([sys.executable, "-c", build], cwd=ROOT, check=True, capture_output=True)
    (wheel,) = tmp_path.glob("veronica_mw-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not any(n.startswith("adapters/") for n in names)
    assert "veronica_mw/adapters/__init__.py" in names
    for layer in LAYERS:
        assert f"veronica_mw/{layer}/__init__.py" in names, layer
    assert "veronica_mw/adapters/django.py" in names and "veronica_mw/adapters/fastapi.py" in names
    assert "veronica_mw/py.typed" in names


def test_demo_cli_table_has_no_log_lines_in_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "veronica_mw.cli", "demo"], capture_output=True, text=True, check=True
    )
    lines = out.stdout.splitlines()
    assert lines[0].startswith("scenario") and "websocket_runaway" in out.stdout
    # The contained WebSocket session's 1008 close is logged; none of it may land in the table.
    assert "veronica_mw:" not in out.stdout and "veronica_mw:" not in out.stderr
    assert out.stderr == ""


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
