"""The Pydantic AI adapter without Pydantic AI: a clean ImportError carrying the pip line.

Runs in every env: in the core env pydantic-ai is really absent; where it is installed, a
``sys.meta_path`` finder hides it (a ModuleNotFoundError, as if it were not installed).
``veronica_mw.instrument("pydantic-ai")`` names the same pip line.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

_HIDE = """
import sys
class HidePydanticAI:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pydantic_ai", "pydantic_graph"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, HidePydanticAI())
"""

_IMPORT = """
import sys
import veronica_mw
assert not [m for m in sys.modules if m.startswith("pydantic_ai")], "veronica_mw imported pydantic_ai"
from veronica_mw import MissingFrameworkError
try:
    import veronica_mw.adapters.pydantic_ai
except MissingFrameworkError as exc:
    assert isinstance(exc, ImportError)
    assert (exc.framework, exc.extra) == ("pydantic-ai-slim", "pydantic-ai")
    print("MISSING", exc)
else:
    print("IMPORTED", veronica_mw.adapters.pydantic_ai.VeronicaCapability.__name__)
"""

_INSTRUMENT = """
import veronica_mw
from veronica_mw import MissingFrameworkError
assert "pydantic-ai" not in veronica_mw.instrument()  # the default set skips what is absent
try:
    veronica_mw.instrument("pydantic-ai")
except MissingFrameworkError as exc:
    print("MISSING", exc)
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_hidden_framework_gives_the_install_hint() -> None:
    out = _run(_HIDE + _IMPORT)
    assert out.startswith("MISSING veronica_mw.adapters.pydantic_ai needs pydantic-ai-slim")
    assert 'pip install "veronica-mw[pydantic-ai]"' in out


def test_instrument_names_the_pip_line_when_hidden() -> None:
    out = _run(_HIDE + _INSTRUMENT)
    assert out.startswith("MISSING ") and 'pip install "veronica-mw[pydantic-ai]"' in out


def test_import_matches_what_is_installed() -> None:
    out = _run(_IMPORT)
    if importlib.util.find_spec("pydantic_ai") is None:  # the core env
        assert out.startswith("MISSING ") and 'pip install "veronica-mw[pydantic-ai]"' in out
    else:
        assert out == "IMPORTED VeronicaCapability\n"
