from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest

import veronica_mw


def close_run_sync_loop() -> None:
    """Close the event loop ``Agent.run_sync`` left set on this thread (pydantic-ai keeps it open
    for the next call), so it is not garbage-collected unclosed later."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = asyncio.get_event_loop()
    except RuntimeError:
        return
    if not loop.is_running():
        loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture(autouse=True)
def _clean_up() -> Iterator[None]:
    yield
    veronica_mw.uninstrument()  # a test that instruments never leaks the patch into the next one
    close_run_sync_loop()
