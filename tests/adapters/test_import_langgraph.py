"""Importing the LangGraph adapter without LangGraph fails cleanly with the pip line.

Runs in every environment: LangGraph is hidden in a subprocess by a meta-path finder.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from veronica_mw import MissingFrameworkError

CODE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "langgraph":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
from veronica_mw import MissingFrameworkError
try:
    import veronica_mw.adapters.langgraph
except MissingFrameworkError as exc:
    assert isinstance(exc, ImportError) and exc.extra == "langgraph"
    print(exc)
else:
    raise SystemExit("import succeeded without langgraph")
"""


def test_import_with_langgraph_hidden() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 'pip install "veronica-mw[langgraph]"' in done.stdout


def test_import_in_this_environment() -> None:
    if importlib.util.find_spec("langgraph") is None:
        with pytest.raises(MissingFrameworkError, match=r'pip install "veronica-mw\[langgraph\]"'):
            import veronica_mw.adapters.langgraph  # noqa: F401
    else:
        from veronica_mw.adapters.langgraph import veronica_node

        assert callable(veronica_node)
