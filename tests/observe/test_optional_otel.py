"""Without opentelemetry-api, `import veronica_mw` imports no OpenTelemetry module, registers no
observer and works as ever; asking for OpenTelemetry explicitly fails with the pip hint. Runs in
every env: opentelemetry is hidden by an import hook in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HIDE = """
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""

RUN = """
import json, sys
import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.kernel.observer import global_observers
from veronica_mw.observe import otel

with ExecutionContext(ExecutionConfig(max_cost_usd=1, max_steps=2, max_retries_total=0)) as ctx:
    ctx.call_llm(lambda: {"usage": {"input_tokens": 3, "output_tokens": 1}, "model": "gpt-4o"})
    ctx.call_tool(len, "x")
    try:
        ctx.call_tool(len, "y")
    except ExecutionHalted as halt:
        reason = halt.reason
try:
    otel.enable()
    error = None
except ImportError as exc:
    error = [type(exc).__name__, str(exc)]
print(json.dumps({
    "modules": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"),
    "observers": [type(o).__name__ for o in global_observers()],
    "reason": reason,
    "error": error,
}))
"""


def run(code: str, **env: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_import_without_opentelemetry_imports_and_registers_nothing() -> None:
    result = run(HIDE + RUN)
    assert result["modules"] == [] and result["observers"] == []
    assert result["reason"] == "step_limit"
    assert result["error"] == [
        "MissingFrameworkError",
        "veronica_mw.observe.otel needs opentelemetry-api: No module named 'opentelemetry'. "
        'Install it with: pip install "veronica-mw[otel]"',
    ]


def test_a_none_entry_in_sys_modules_also_reads_as_not_installed() -> None:
    result = run('import sys; sys.modules["opentelemetry"] = None\n' + RUN)
    assert result["observers"] == [] and result["reason"] == "step_limit"
