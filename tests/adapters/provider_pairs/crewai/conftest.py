"""CrewAI settings before crewai is first imported (telemetry off, task output kept out of $HOME)."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator

import pytest

os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["OTEL_SDK_DISABLED"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
_DATA_HOME = tempfile.mkdtemp(prefix="veronica-crewai-pair-")
os.environ["XDG_DATA_HOME"] = _DATA_HOME

with warnings.catch_warnings():
    warnings.simplefilter("ignore", ImportWarning)  # crewai's lazy crewai.rag package
    import crewai  # noqa: F401


@pytest.fixture(scope="session", autouse=True)
def crewai_data_home() -> Iterator[None]:
    yield
    shutil.rmtree(_DATA_HOME, ignore_errors=True)
