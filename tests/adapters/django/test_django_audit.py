"""``settings.VERONICA["audit"]``: every Django request's context is written to the audit log, through
the MIDDLEWARE class and through the wsgi.py wrapper, with the method and path only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import django
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application
from django.http import HttpResponse
from django.test import Client, override_settings
from werkzeug.test import Client as WerkzeugClient

from veronica_mw import AuditLog
from veronica_mw.adapters.django import VeronicaMiddleware, wrap_wsgi_application
from veronica_mw.observe._audit_read import iter_records
from veronica_mw.observe.audit_verify import verify

from .django_project import settings as project_settings
from .django_project import views

LIMITS = {"max_cost_usd": 1.0, "max_steps": 3, "max_retries_total": 0, "timeout_ms": 60_000}
AUDIT: AuditLog | None = None  # settings name it by dotted path: tests.adapters...AUDIT


@pytest.fixture
def audit(tmp_path: Path) -> Iterator[AuditLog]:
    if not settings.configured:
        settings.configure(**project_settings.SETTINGS)
        django.setup()
    views.reset()
    log = AuditLog(tmp_path / "audit.jsonl")
    with override_settings(
        ROOT_URLCONF=project_settings.SETTINGS["ROOT_URLCONF"],
        MIDDLEWARE=project_settings.CONTAINED_MIDDLEWARE,
        VERONICA={**LIMITS, "audit": log},
    ):
        yield log
    log.close()


def started(log: AuditLog) -> list[dict[str, object]]:
    assert log.close()
    return [r for r in iter_records(log.files) if r["type"] == "context_started"]


def test_the_middleware_writes_each_request(audit: AuditLog) -> None:
    client = Client()
    assert client.get("/steps/2?secret=query-value", HTTP_AUTHORIZATION="Bearer h-value").status_code == 200
    assert client.post("/steps/1").status_code == 200
    assert client.get("/steps/9").status_code == 429  # halted: the halt is in the log too
    records = list(iter_records(audit.files)) if audit.close() else []
    assert [r["attributes"] for r in records if r["type"] == "context_started"] == [
        {"method": "GET", "path": "/steps/2"},
        {"method": "POST", "path": "/steps/1"},
        {"method": "GET", "path": "/steps/9"},
    ]
    assert sum(1 for r in records if r["type"] == "call") == 2 + 1 + 3
    assert sum(1 for r in records if r["type"] == "context_ended") == 3
    (halt,) = (r for r in records if r["type"] == "halt")
    assert halt["reason"] == "step_limit"
    raw = b"".join(Path(f).read_bytes() for f in audit.files)
    assert b"query-value" not in raw and b"h-value" not in raw
    assert verify(audit.files).ok


def test_the_wsgi_wrapper_writes_each_request(audit: AuditLog) -> None:
    with override_settings(MIDDLEWARE=[]):
        client = WerkzeugClient(wrap_wsgi_application(get_wsgi_application()))
        assert client.get("/steps/1").status_code == 200
    assert [r["attributes"] for r in started(audit)] == [{"method": "GET", "path": "/steps/1"}]


def test_audit_must_be_an_audit_log(audit: AuditLog) -> None:
    with override_settings(VERONICA={**LIMITS, "audit": object()}), pytest.raises(ImproperlyConfigured):
        VeronicaMiddleware(lambda request: HttpResponse())
    global AUDIT
    AUDIT = audit
    with override_settings(VERONICA={**LIMITS, "audit": f"{__name__}.AUDIT"}):
        VeronicaMiddleware(lambda request: HttpResponse())
