"""CrewAI adapter tests: real crewai, offline models, telemetry off before crewai is imported."""

from __future__ import annotations

import os
import shutil
import tempfile

# Set before the first ``import crewai`` (telemetry otherwise tries the network and hangs here).
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["OTEL_SDK_DISABLED"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
# Every kickoff writes task outputs (and a user file) under the XDG data dir: keep them out of $HOME.
_DATA_HOME = tempfile.mkdtemp(prefix="veronica-crewai-tests-")
os.environ["XDG_DATA_HOME"] = _DATA_HOME

import warnings  # noqa: E402
from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402

with warnings.catch_warnings():
    # crewai's lazy ``crewai.rag`` package refuses child-module attributes (an ImportWarning, which
    # the suite's filterwarnings=error would turn into an import failure).
    warnings.simplefilter("ignore", ImportWarning)
    import crewai  # noqa: F401

from crewai.hooks import get_after_llm_call_hooks, get_before_tool_call_hooks  # noqa: E402

import veronica_mw  # noqa: E402
from veronica_mw.adapters import _crewai_calls, _crewai_llm  # noqa: E402
from veronica_mw.adapters import crewai as adapter  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def crewai_data_home() -> Iterator[None]:
    yield
    shutil.rmtree(_DATA_HOME, ignore_errors=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def nothing_left_installed() -> Iterator[None]:
    """Each test must leave CrewAI without our hooks and the LLM classes unwrapped."""
    yield
    veronica_mw.uninstrument()  # what a middleware (or instrument()) installed process-wide
    leftover = list(_crewai_calls.installed)
    for hooks in leftover:  # clean up first, so one failure does not cascade
        assert isinstance(hooks, adapter.VeronicaCrewAIHooks)
        hooks._entries = 0
        hooks.uninstall()
    assert leftover == []
    assert adapter._after_llm not in get_after_llm_call_hooks()
    assert adapter._before_tool not in get_before_tool_call_hooks()
    assert _crewai_llm._originals == {}
