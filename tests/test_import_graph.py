"""The import graph of veronica_mw/ has no circle (type-only and function-level imports count)."""

from __future__ import annotations

import ast
from pathlib import Path

import veronica_mw

ROOT = Path(veronica_mw.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["veronica_mw", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(path: Path, modules: set[str]) -> set[str]:
    """Every package module ``path`` imports, anywhere in it (under TYPE_CHECKING, in functions)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            bases = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            bases = [base]
            names = [alias.name for alias in node.names]
        else:
            continue
        for base in bases:
            # ``from . import x`` / ``from .pkg import mod`` import a module when one has that name.
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            found.update(submodules)
            if len(submodules) < len(names) or not names:
                while base and base not in modules:
                    base = base.rpartition(".")[0]
                if base:
                    found.add(base)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = sorted(ROOT.rglob("*.py"))
    modules = {_module_name(path) for path in files}
    return {_module_name(path): _targets(path, modules) for path in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_the_finder_sees_a_circle_through_a_type_only_import(tmp_path: Path) -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .execution import X\n"
    path = ROOT / "kernel" / "graph.py"
    parsed = ast.parse(source)
    assert any(isinstance(n, ast.ImportFrom) and n.level == 1 for n in ast.walk(parsed))
    (tmp_path / "probe.py").write_text(source)
    assert _module_name(path) == "veronica_mw.kernel.graph"


def test_the_relative_imports_resolve_to_package_modules() -> None:
    graph = import_graph()
    assert "veronica_mw.kernel.config" in graph["veronica_mw.kernel.execution"]
    assert "veronica_mw.kernel.execution" in graph["veronica_mw.kernel"] or graph["veronica_mw.kernel"] == set()
    assert "veronica_mw.kernel" in graph["veronica_mw"] or any(
        target.startswith("veronica_mw.kernel.") for target in graph["veronica_mw"]
    )


def test_the_package_import_graph_has_no_circle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or ())
