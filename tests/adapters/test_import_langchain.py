"""Importing the LangChain adapter without LangChain fails cleanly; ``import veronica_mw`` never needs it.

Runs in every environment (the core one has no framework): the framework is hidden in a subprocess
by a meta-path finder that raises ModuleNotFoundError, the way a missing install behaves.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from veronica_mw import MissingFrameworkError

HIDE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
"""

CHECK = """
from veronica_mw import MissingFrameworkError
try:
    import veronica_mw.adapters.langchain
except MissingFrameworkError as exc:
    assert isinstance(exc, ImportError)
    assert exc.extra == "langchain"
    print(exc)
else:
    raise SystemExit("import succeeded without langchain-core")
"""


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_with_langchain_core_hidden() -> None:
    out = run(f"HIDDEN = {{'langchain_core', 'langchain', 'langgraph'}}\n{HIDE}\n{CHECK}")
    assert 'pip install "veronica-mw[langchain]"' in out
    assert "langchain-core" in out


def test_import_in_this_environment() -> None:
    if importlib.util.find_spec("langchain_core") is None:
        with pytest.raises(MissingFrameworkError, match=r'pip install "veronica-mw\[langchain\]"'):
            import veronica_mw.adapters.langchain  # noqa: F401
    else:
        import veronica_mw.adapters.langchain as adapter

        assert adapter.VeronicaCallbackHandler.raise_error is True


def test_veronica_mw_alone_imports_no_framework() -> None:
    out = run(
        "import sys, veronica_mw, veronica_mw.adapters\n"
        "print(sorted(m for m in ('langchain_core', 'langchain', 'langgraph') if m in sys.modules))"
    )
    assert out.strip() == "[]"
