"""The ``veronica-mw`` command line (``python -m veronica_mw.cli`` works too)."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
