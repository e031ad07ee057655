"""``veronica_mw.instrument()``: unknown names, SDKs that are not installed, idempotence."""

from __future__ import annotations

import pytest

import veronica_mw
from veronica_mw import MissingFrameworkError
from veronica_mw import instrumentation as _registry


def test_unknown_names_are_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown SDK 'nope'"):
        veronica_mw.instrument("nope")


def test_an_sdk_that_is_not_installed_names_the_pip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = _registry.Instrumentor("absent", "veronica_no_such_sdk", "absent-extra")
    monkeypatch.setitem(_registry.INSTRUMENTORS, "absent", entry)
    assert not _registry.installed("absent")
    assert "absent" not in veronica_mw.instrument()  # the default set skips it
    with pytest.raises(MissingFrameworkError, match=r'pip install "veronica-mw\[absent-extra\]"'):
        veronica_mw.instrument("absent")
    assert "absent" not in _registry.instrumented()


def test_uninstrument_is_idempotent() -> None:
    veronica_mw.uninstrument()
    veronica_mw.uninstrument()
    assert _registry.instrumented() == ()
