"""Minimal settings for the veronica-mw Django example (no database, no apps)."""

from __future__ import annotations

DEBUG = False
SECRET_KEY = "example-only-not-secret"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, object] = {}
ROOT_URLCONF = "demo.urls"
USE_TZ = True

MIDDLEWARE = [
    # First, so it wraps every other middleware and the view. Leave it out if wsgi.py wraps the
    # whole application instead (USE_WSGI_WRAPPER below); with both, the outer one wins.
    "veronica_mw.adapters.django.VeronicaMiddleware",
]

# Per-request limits. Alternatively {"config": "demo.limits.limits_for", ...} for per-request choice.
VERONICA = {
    "max_cost_usd": 0.05,
    "max_steps": 5,
    "max_retries_total": 1,
    "timeout_ms": 15_000,
    "exclude_paths": ["/health"],
    "usage_headers": True,
}
