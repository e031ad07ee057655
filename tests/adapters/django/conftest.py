"""The live uvicorn server fixture of the web tests, shared with this adapter's tests."""

from __future__ import annotations

from ...web.conftest import live_server

__all__ = ["live_server"]
