"""With langchain-core but without ``langchain>=1``: the handler works, the agent middleware names the fix."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "langchain" or name.startswith("langchain."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from veronica_mw import ExecutionConfig, ExecutionContext, MissingFrameworkError
import veronica_mw.adapters.langchain as adapter
ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1, max_steps=5, max_retries_total=0))
handler = adapter.VeronicaCallbackHandler(ctx)
GenericFakeChatModel(messages=iter(["hi"])).invoke("x", config={"callbacks": [handler]})
assert ctx.get_snapshot().step_count == 1
try:
    adapter.VeronicaAgentMiddleware
except MissingFrameworkError as exc:
    assert isinstance(exc, ImportError)
    print(exc)
else:
    raise SystemExit("VeronicaAgentMiddleware available without langchain")
assert "langchain" not in sys.modules
"""


def test_agent_middleware_without_langchain() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 'pip install "veronica-mw[langchain]"' in done.stdout
    assert "langchain>=1" in done.stdout
