"""Importing the AG2 adapter without AG2 raises MissingFrameworkError with the pip line.

Runs in the core env (no frameworks) and anywhere else: each check runs in a fresh interpreter,
and the "hidden" variant blocks both AG2 generations with a ``sys.meta_path`` finder.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

PIP_LINE = 'pip install "veronica-mw[ag2]"'

_PROBE = textwrap.dedent(
    """
    import importlib, importlib.abc, json, sys

    HIDE = {hide!r}

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in HIDE:
                raise ModuleNotFoundError(f"No module named {{fullname!r}}", name=fullname)
            return None

    sys.meta_path.insert(0, Hide())
    from veronica_mw import MissingFrameworkError

    outcome = {{}}
    for module in {modules!r}:
        try:
            importlib.import_module(module)
            outcome[module] = "imported"
        except MissingFrameworkError as exc:
            outcome[module] = ["missing", str(exc), isinstance(exc, ImportError)]
    outcome["frameworks_loaded"] = sorted(m for m in ("autogen", "ag2") if m in sys.modules)
    print(json.dumps(outcome))
    """
)


def probe(modules: list[str], hide: list[str]) -> dict[str, Any]:
    code = _PROBE.format(modules=modules, hide=hide)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def installed_generations() -> list[str]:
    code = (
        "import importlib.util as u, json\n"
        "print(json.dumps([m for m in ('autogen', 'ag2') if u.find_spec(m)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    found: list[str] = json.loads(done.stdout)
    return found


def test_import_without_ag2_in_this_environment() -> None:
    outcome = probe(["veronica_mw.adapters.ag2"], hide=[])
    if installed_generations():  # a framework env: the import must simply work
        assert outcome["veronica_mw.adapters.ag2"] == "imported"
        return
    kind, message, is_import_error = outcome["veronica_mw.adapters.ag2"]
    assert kind == "missing" and is_import_error is True
    assert PIP_LINE in message and "ag2" in message


def test_import_with_both_generations_hidden() -> None:
    modules = ["veronica_mw.adapters.ag2", "veronica_mw.adapters._ag2_legacy", "veronica_mw.adapters._ag2_v1"]
    outcome = probe(modules, hide=["autogen", "ag2"])
    for module in modules:
        kind, message, is_import_error = outcome[module]
        assert kind == "missing" and is_import_error is True, module
        assert PIP_LINE in message, module
    assert "autogen" in outcome["veronica_mw.adapters._ag2_legacy"][1]
    assert outcome["frameworks_loaded"] == []


def test_importing_veronica_mw_never_imports_ag2() -> None:
    outcome = probe(["veronica_mw"], hide=[])
    assert outcome == {"veronica_mw": "imported", "frameworks_loaded": []}
