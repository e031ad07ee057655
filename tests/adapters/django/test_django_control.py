"""``settings.VERONICA["checks"]`` and ``["policies"]``: a halting check answers 502, a rejected
approval 403, through the MIDDLEWARE class and the wsgi.py wrapper; bad entries fail at startup."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application
from django.http import HttpResponse
from django.test import Client, override_settings
from werkzeug.test import Client as WerkzeugClient

from veronica_mw import MaxLength
from veronica_mw.adapters.django import VeronicaMiddleware, wrap_wsgi_application

from .django_project import control as project_control
from .django_project import settings as project_settings
from .django_project import views

LIMITS = {"max_cost_usd": 1.0, "max_steps": 3, "max_retries_total": 0, "timeout_ms": 60_000}
SHORT = f"{project_control.__name__}.SHORT"
NOBODY = f"{project_control.__name__}.NOBODY_APPROVES"


@pytest.fixture(autouse=True)
def project() -> Iterator[None]:
    if not settings.configured:
        settings.configure(**project_settings.SETTINGS)
        django.setup()
    views.reset()
    yield


def contained(**veronica: Any) -> Any:
    return override_settings(
        ROOT_URLCONF=project_settings.SETTINGS["ROOT_URLCONF"],
        MIDDLEWARE=project_settings.CONTAINED_MIDDLEWARE,
        VERONICA={**LIMITS, **veronica},
    )


def test_a_halting_check_answers_502_through_the_middleware() -> None:
    with contained(checks=[(SHORT, "halt")]):
        response = Client().get("/steps/1")
    assert response.status_code == 502
    body = json.loads(response.content)
    assert (body["reason"], body["check"]) == ("verification_failed", "max_length")
    assert body["check_message"] == "3 characters, more than 2"
    with contained(checks=[(MaxLength(10), "halt")]):  # an object works as well as a dotted path
        assert Client().get("/steps/1").status_code == 200


def test_a_rejected_approval_answers_403_and_nothing_ran() -> None:
    with contained(policies=[NOBODY]):
        response = Client().get("/send")
    assert response.status_code == 403
    assert json.loads(response.content)["reason"] == "policy_denied"
    assert views.STATE["sent"] == 0


def test_the_wsgi_wrapper_takes_the_same_settings() -> None:
    with contained(checks=[(SHORT, "halt")], policies=[NOBODY]):
        client = WerkzeugClient(wrap_wsgi_application(get_wsgi_application()))
        assert client.get("/steps/1").status_code == 502
        assert client.get("/send").status_code == 403


@pytest.mark.parametrize(
    "veronica",
    [
        {"checks": "not-a-list"},
        {"checks": [(SHORT, "explode")]},
        {"policies": ["builtins.object"]},
        {"policies": "nope"},
    ],
)
def test_bad_entries_are_improperly_configured(veronica: dict[str, Any]) -> None:
    with contained(**veronica), pytest.raises(ImproperlyConfigured):
        VeronicaMiddleware(lambda request: HttpResponse())
