"""``veronica_mw.instrument()``: unknown names, SDKs that are not installed, idempotence, the frameworks
in the default set and SDKs with two import names."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

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


def test_the_default_set_names_every_supported_framework() -> None:
    frameworks = {"pydantic-ai", "openai-agents", "langchain", "llamaindex", "crewai", "ag2"}
    assert frameworks <= set(_registry.INSTRUMENTORS)
    assert _registry.INSTRUMENTORS["ag2"].sdks() == ("autogen", "ag2")  # AG2 0.14 and 1.x


class _Recorder:
    """An adapter object in the ``"module:object"`` form, counting its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def instrument(self) -> None:
        self.calls.append("instrument")

    def uninstrument(self) -> None:
        self.calls.append("uninstrument")


RECORDER = _Recorder()


def test_a_framework_with_two_import_names_is_installed_once_when_either_is_imported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("veronica_fw_new", "veronica_fw_old"):
        (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = _registry.Instrumentor(f"{__name__}:RECORDER", "veronica_fw_old", "fw", also=("veronica_fw_new",))
    monkeypatch.setitem(_registry.INSTRUMENTORS, "fw", entry)
    RECORDER.calls.clear()
    try:
        assert "fw" in veronica_mw.instrument()
        assert RECORDER.calls == []  # nothing is imported or installed before the program imports it
        importlib.import_module("veronica_fw_new")
        assert RECORDER.calls == ["instrument"]
        importlib.import_module("veronica_fw_old")
        assert RECORDER.calls == ["instrument"]  # once, though both names were imported
    finally:
        veronica_mw.uninstrument()
        for name in ("veronica_fw_new", "veronica_fw_old"):
            sys.modules.pop(name, None)
    assert RECORDER.calls == ["instrument", "uninstrument"]
