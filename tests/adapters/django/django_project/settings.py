"""Settings of the test project. The tests apply them with ``settings.configure`` (once per process)
and adjust ``VERONICA``/``MIDDLEWARE`` per test with ``override_settings``."""

from __future__ import annotations

from typing import Any

SETTINGS: dict[str, Any] = {
    "DEBUG": False,
    "SECRET_KEY": "veronica-mw-tests-only",
    "ALLOWED_HOSTS": ["testserver", "127.0.0.1", "localhost"],
    "INSTALLED_APPS": [],
    "DATABASES": {},
    "USE_TZ": True,
    "ROOT_URLCONF": __name__.rsplit(".", 1)[0] + ".urls",
    "MIDDLEWARE": [],
    "VERONICA": {"max_cost_usd": 1.0, "max_steps": 3, "max_retries_total": 0},
}

CONTAINED_MIDDLEWARE = [
    "veronica_mw.adapters.django.VeronicaMiddleware",
    __name__.rsplit(".", 1)[0] + ".middleware.HaltingMiddleware",
]
