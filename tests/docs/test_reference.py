"""The reference pages cannot fall behind the code.

docs/configuration.md must have a table row for every parameter of the objects people configure
(read from the real signatures), docs/cli.md must document every subcommand and its generated
reference must hold every option of the real argparse parsers, and the API page every public name.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import veronica_mw
from veronica_mw.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "tools" / "docs_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sections(page: Path) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def _parameters(target: Any, *, skip: tuple[str, ...] = ()) -> list[str]:
    if dataclasses.is_dataclass(target):
        return [field.name for field in dataclasses.fields(target)]
    names = list(inspect.signature(target).parameters)
    return [name for name in names if name not in ("self", *skip)]


def _django_options() -> list[str]:
    pytest.importorskip("django")
    adapter = importlib.import_module("veronica_mw.adapters.django")
    return list(adapter._OPTIONS)


CONFIGURED = {
    "ExecutionConfig": lambda: _parameters(veronica_mw.ExecutionConfig),
    "WrapOptions": lambda: _parameters(veronica_mw.WrapOptions),
    "ExecutionContext": lambda: _parameters(veronica_mw.ExecutionContext),
    "Middleware options": lambda: sorted(
        {
            *_parameters(veronica_mw.VeronicaASGIMiddleware, skip=("app",)),
            *_parameters(veronica_mw.VeronicaWSGIMiddleware, skip=("app",)),
            *_django_options(),
        }
    ),
    "BudgetPool": lambda: _parameters(veronica_mw.BudgetPool),
    "AuditLog": lambda: _parameters(veronica_mw.AuditLog),
    "ApprovalQueue": lambda: _parameters(veronica_mw.ApprovalQueue),
}


@pytest.mark.parametrize("section", sorted(CONFIGURED))
def test_the_configuration_page_has_a_row_for_every_parameter(section: str) -> None:
    body = _sections(DOCS / "configuration.md")[section]
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", body, flags=re.MULTILINE))
    missing = [name for name in CONFIGURED[section]() if name not in rows]
    assert not missing, f"docs/configuration.md, section {section!r}: document {missing}"


def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("veronica-mw",)
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = []
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subs:
        for name, child in action.choices.items():
            found += _leaves(child, (*path, name))
    return found or [(path, parser)]


def test_the_cli_reference_lists_every_subcommand_and_option() -> None:
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    hooks = _hooks()
    assert hooks.CLI_MARKER in page
    reference = hooks.cli_reference()
    pattern = r"^### `([^`]+)`\n(.*?)(?=^### |\Z)"
    sections = dict(re.findall(pattern, reference, flags=re.MULTILINE | re.DOTALL))
    leaves = _leaves(build_parser())
    assert len(leaves) >= 6  # demo, run, audit verify/show/calls, replay
    for path, parser in leaves:
        body = sections[" ".join(path)]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for name in action.option_strings or [str(action.metavar or action.dest)]:
                assert f"`{name}`" in body, f"{' '.join(path)}: {name} missing from the CLI reference"
    for command in {path[1] for path, _ in leaves}:
        heading = rf"^## .*`veronica-mw {command}`"
        assert re.search(heading, page, flags=re.MULTILINE), f"cli.md: no section for {command}"


def test_the_api_page_documents_every_public_name() -> None:
    hooks = _hooks()
    assert hooks.API_MARKER in (DOCS / "api.md").read_text(encoding="utf-8")
    blocks = set(re.findall(r"^::: veronica_mw\.(\w+)$", hooks.api_reference(), flags=re.MULTILINE))
    assert blocks == set(veronica_mw.__all__)
