"""Importing the CrewAI adapter without CrewAI fails cleanly; ``import veronica_mw`` never needs it.

Runs in every environment (the core one has no framework): the framework is hidden in a subprocess
by a meta-path finder that raises ModuleNotFoundError, the way a missing install behaves.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings

import pytest

from veronica_mw import ExecutionHalted, MissingFrameworkError

HIDE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "crewai":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
"""

CHECK = """
from veronica_mw import MissingFrameworkError
try:
    import veronica_mw.adapters.crewai
except MissingFrameworkError as exc:
    assert isinstance(exc, ImportError)
    assert (exc.framework, exc.extra) == ("crewai", "crewai")
    print(exc)
else:
    raise SystemExit("import succeeded without crewai")
"""

# Telemetry off (here and in the children) before anything could import crewai.
TELEMETRY_OFF = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_TRACING_ENABLED": "false",
}
os.environ.update(TELEMETRY_OFF)
ENV = {**os.environ, **TELEMETRY_OFF}


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=ENV)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_with_crewai_hidden() -> None:
    out = run(HIDE + CHECK)
    assert 'pip install "veronica-mw[crewai]"' in out


def test_import_in_this_environment() -> None:
    if importlib.util.find_spec("crewai") is None:  # the core environment
        with pytest.raises(MissingFrameworkError, match=r'pip install "veronica-mw\[crewai\]"'):
            import veronica_mw.adapters.crewai  # noqa: F401
    else:
        with warnings.catch_warnings():  # crewai's own ImportWarning (lazy crewai.rag package)
            warnings.simplefilter("ignore", ImportWarning)
            import veronica_mw.adapters.crewai as adapter
        assert issubclass(adapter.CrewExecutionHalted, ExecutionHalted)


def test_veronica_mw_alone_imports_no_crewai() -> None:
    out = run("import sys, veronica_mw, veronica_mw.adapters\nprint('crewai' in sys.modules)")
    assert out.strip() == "False"
