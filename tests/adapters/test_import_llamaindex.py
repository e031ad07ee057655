"""The LlamaIndex adapter without LlamaIndex: a clean ImportError carrying the pip line.

Runs in every env: in the core env LlamaIndex is really absent; where it is installed, a
``sys.meta_path`` finder hides it (a ModuleNotFoundError, as if it were not installed).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

_HIDE = """
import sys
class HideLlamaIndex:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("llama_index", "llama_index_instrumentation"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, HideLlamaIndex())
"""

_IMPORT = """
import sys
import veronica_mw
assert not [m for m in sys.modules if m.startswith("llama_index")], "veronica_mw imported llama_index"
from veronica_mw import MissingFrameworkError
try:
    import veronica_mw.adapters.llamaindex
except MissingFrameworkError as exc:
    assert isinstance(exc, ImportError)
    assert (exc.framework, exc.extra) == ("llama-index-core", "llamaindex")
    print("MISSING", exc)
else:
    print("IMPORTED", veronica_mw.adapters.llamaindex.VeronicaLlamaIndexHandler.__name__)
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_hidden_framework_gives_the_install_hint() -> None:
    out = _run(_HIDE + _IMPORT)
    assert out.startswith("MISSING ")
    assert 'pip install "veronica-mw[llamaindex]"' in out


def _installed() -> bool:
    try:
        return importlib.util.find_spec("llama_index.core") is not None
    except ModuleNotFoundError:  # no llama_index package at all
        return False


def test_import_matches_what_is_installed() -> None:
    out = _run(_IMPORT)
    if not _installed():  # the core env
        assert out.startswith("MISSING ") and 'pip install "veronica-mw[llamaindex]"' in out
    else:
        assert out == "IMPORTED VeronicaLlamaIndexHandler\n"
