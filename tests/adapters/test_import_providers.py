"""Each provider SDK adapter imported without its SDK fails with the pip line; ``import veronica_mw``
(and building a middleware) never imports an SDK. Runs in every environment: the SDK is hidden in a
subprocess by a meta-path finder, the way a missing install behaves."""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == {sdk!r} or name.startswith({sdk!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Hide())
from veronica_mw import MissingFrameworkError
try:
    import veronica_mw.adapters.{module}
except MissingFrameworkError as exc:
    assert isinstance(exc, ImportError) and exc.extra == {extra!r}, exc
    print(exc)
else:
    raise SystemExit("imported without its SDK")
"""

ADAPTERS = [
    ("openai", "openai", "openai"),
    ("anthropic", "anthropic", "anthropic"),
    ("litellm", "litellm", "litellm"),
    ("google_genai", "google", "google-genai"),
    ("mcp", "mcp", "mcp"),
    ("groq", "groq", "groq"),
    ("mistral", "mistralai", "mistral"),
    ("bedrock", "boto3", "bedrock"),
]


@pytest.mark.parametrize(("module", "sdk", "extra"), ADAPTERS)
def test_adapter_without_its_sdk(module: str, sdk: str, extra: str) -> None:
    code = HIDE.format(module=module, sdk=sdk, extra=extra)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f'pip install "veronica-mw[{extra}]"' in done.stdout


def test_building_a_middleware_imports_no_sdk() -> None:
    code = (
        "import sys\n"
        "from veronica_mw import ExecutionConfig, VeronicaASGIMiddleware, VeronicaWSGIMiddleware\n"
        "VeronicaASGIMiddleware(lambda s, r, w: None, config=ExecutionConfig(1, 1, 0))\n"
        "VeronicaWSGIMiddleware(lambda e, s: [], config=ExecutionConfig(1, 1, 0))\n"
        "print([m for m in ('openai', 'anthropic', 'litellm', 'google.genai', 'mcp') if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
