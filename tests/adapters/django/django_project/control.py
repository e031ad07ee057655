"""Checks and policies for the settings-based tests, loaded by dotted path."""

from __future__ import annotations

from veronica_mw import MaxLength, RequireApproval

SHORT = MaxLength(2)  # the project's views answer "tok": three characters
NOBODY_APPROVES = RequireApproval("send_*", lambda request: False)
