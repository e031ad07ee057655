"""The import graph of veronica_mw/ has no circle (type-only and function-level imports count)."""

from __future__ import annotations

import ast
from pathlib import Path

import veronica_mw

ROOT = Path(veronica_mw.__file__).parent


def _module_name(path: Path, root: Path = ROOT, name: str = "veronica_mw") -> str:
    parts = [name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(path: Path, name: str, modules: set[str]) -> set[str]:
    """Every package module ``path`` imports, anywhere in it (under TYPE_CHECKING, in functions)."""
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


def import_graph(root: Path = ROOT, package: str = "veronica_mw") -> dict[str, set[str]]:
    """Module -> the package modules it imports, for every module under ``root``."""
    names = {path: _module_name(path, root, package) for path in sorted(root.rglob("*.py"))}
    modules = set(names.values())
    return {name: _targets(path, name, modules) for path, name in names.items()}


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


def test_the_finder_sees_circles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_type_only_function_level_and_relative_imports_are_edges(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n"
    )
    (package / "b.py").write_text("def f():\n    from . import c\n")
    (package / "c.py").write_text("from pkg.a import A\n")
    graph = import_graph(package, "pkg")
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    kernel = import_graph()
    assert "veronica_mw.kernel.config" in kernel["veronica_mw.kernel.execution"]


def test_the_package_import_graph_has_no_circle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or ())
