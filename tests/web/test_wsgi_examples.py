"""The runnable Flask and Django examples do what their docstrings promise."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from werkzeug.test import Client

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_flask_example() -> Any:
    spec = importlib.util.spec_from_file_location("veronica_flask_example", EXAMPLES / "flask_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


def test_flask_example_contains_requests() -> None:
    client = Client(load_flask_example())
    ok = client.get("/agent?turns=3")
    assert ok.status_code == 200 and ok.headers["x-veronica-steps"] == "3/5"
    refused = client.get("/agent?turns=9")
    assert refused.status_code == 429 and json.loads(refused.data)["reason"] == "step_limit"
    pro = client.get("/agent?turns=9", headers={"X-Plan": "pro"})
    assert pro.status_code == 200 and pro.headers["x-veronica-steps"] == "9/50"
    assert len(client.get("/stream?turns=9").data.splitlines()) == 5
    health = client.get("/health")
    assert health.status_code == 200 and "x-veronica-steps" not in health.headers


# Django settings are per process, so the Django example runs in its own interpreter.
DJANGO_SCRIPT = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
os.environ["DJANGO_SETTINGS_MODULE"] = "demo.settings"
from werkzeug.test import Client
from demo.wsgi import application
from django.test import Client as DjangoClient
wrapped = Client(application)
plain = DjangoClient()
out = {
    "wsgi_ok": wrapped.get("/agent?turns=2").status_code,
    "wsgi_refused": json.loads(wrapped.get("/agent?turns=9").data)["reason"],
    "wsgi_stream_lines": len(wrapped.get("/stream?turns=9").data.splitlines()),
    "mw_refused": plain.get("/agent?turns=9").status_code,
    "mw_steps": plain.get("/agent?turns=1")["x-veronica-steps"],
}
print(json.dumps(out))
"""


def test_django_example_project_checks_and_contains_requests() -> None:
    project = EXAMPLES / "django_project"
    check = subprocess.run(
        [sys.executable, str(project / "manage.py"), "check"], capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 0, check.stderr
    run = subprocess.run(
        [sys.executable, "-c", DJANGO_SCRIPT, str(project)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {
        "wsgi_ok": 200,
        "wsgi_refused": "step_limit",
        "wsgi_stream_lines": 5,
        "mw_refused": 429,
        "mw_steps": "1/5",
    }


HIDE_DJANGO = """
import importlib.abc, json, sys

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "django" or name.startswith("django."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hide())
import veronica_mw.web.wsgi
loaded = sorted(m for m in ("django", "flask", "werkzeug") if m in sys.modules)
try:
    import veronica_mw.adapters.django
except ImportError as exc:
    print(json.dumps({"loaded": loaded, "error": type(exc).__name__, "message": str(exc)}))
"""


def test_wsgi_needs_no_framework_and_django_module_explains_a_missing_django() -> None:
    run = subprocess.run([sys.executable, "-c", HIDE_DJANGO], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["loaded"] == []
    assert result["error"] == "MissingFrameworkError"
    assert 'pip install "veronica-mw[django]"' in result["message"]
