"""The Agents SDK adapter without the SDK (or with the wrong ``agents``): a clean ImportError
carrying the pip line, and ``veronica_mw.instrument()`` leaves it out of its default set.

Runs in every env: in the core env the SDK is really absent; where it is installed, a
``sys.meta_path`` finder hides it (a ModuleNotFoundError, as if it were not installed). An old
release and an unrelated top-level ``agents`` package are real packages written to a temp dir.
``import veronica_mw`` alone never imports the SDK.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

_HIDE = """
import sys
class HideAgents:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "agents":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, HideAgents())
"""

_IMPORT = """
import sys
import veronica_mw
assert "agents" not in sys.modules, "veronica_mw imported the Agents SDK"
from veronica_mw import MissingFrameworkError
try:
    import veronica_mw.adapters.openai_agents
except MissingFrameworkError as exc:
    assert isinstance(exc, ImportError)
    assert exc.extra == "openai-agents", exc.extra
    print("MISSING", exc.framework, exc)
else:
    print("IMPORTED", veronica_mw.adapters.openai_agents.VeronicaRunHooks.__name__)
"""

_INSTRUMENT = """
import veronica_mw
from veronica_mw import MissingFrameworkError
assert "openai-agents" not in veronica_mw.instrument()
try:
    veronica_mw.instrument("openai-agents")
except MissingFrameworkError as exc:
    print("MISSING", exc)
"""

HINT = 'pip install "veronica-mw[openai-agents]"'


def _run(code: str, path: Path | None = None) -> str:
    env = dict(os.environ, OPENAI_AGENTS_DISABLE_TRACING="1")
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_hidden_sdk_gives_the_install_hint() -> None:
    out = _run(_HIDE + _IMPORT)
    assert out.startswith("MISSING openai-agents ")
    assert "veronica_mw.adapters.openai_agents needs openai-agents" in out and HINT in out


def test_hidden_sdk_is_left_out_of_instrument() -> None:
    out = _run(_HIDE + _INSTRUMENT)
    assert out.startswith("MISSING ") and HINT in out


def test_an_old_release_names_the_minimum_version(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text("")
    (tmp_path / "agents" / "version.py").write_text('__version__ = "0.23.4"\n')
    out = _run(_IMPORT, tmp_path)
    assert out.startswith("MISSING openai-agents>=0.24 ") and "found openai-agents 0.23.4" in out
    assert HINT in out


def test_another_package_named_agents_is_not_the_sdk(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text("")
    out = _run(_IMPORT, tmp_path)
    assert out.startswith("MISSING openai-agents ") and HINT in out
    code = (  # imported first: instrument() may otherwise wait for the import to patch it
        "import agents, veronica_mw\n"
        "try:\n"
        "    veronica_mw.instrument('openai-agents')\n"
        "except veronica_mw.MissingFrameworkError as exc:\n"
        "    print('MISSING', exc)\n"
    )
    assert _run(code, tmp_path).startswith("MISSING ")


def _installed() -> bool:
    try:
        return importlib.util.find_spec("agents.version") is not None
    except ModuleNotFoundError:  # no agents package at all
        return False


def test_import_matches_what_is_installed() -> None:
    out = _run(_IMPORT)
    if not _installed():  # the core env
        assert out.startswith("MISSING openai-agents ") and HINT in out
    else:
        assert out == "IMPORTED VeronicaRunHooks\n"
