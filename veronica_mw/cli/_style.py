"""Terminal styling for the CLI: ANSI colour and tree glyphs only when the stream is a terminal.

``NO_COLOR`` (any value) turns colour off; ``FORCE_COLOR`` turns it on for a pipe.
"""

from __future__ import annotations

import os
from typing import TextIO

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34", "cyan": "36"}


class Style:
    def __init__(self, stream: TextIO) -> None:
        isatty = getattr(stream, "isatty", None)
        terminal = bool(isatty()) if callable(isatty) else False
        self.terminal = terminal
        self.colour = (terminal or bool(os.environ.get("FORCE_COLOR"))) and "NO_COLOR" not in os.environ

    def __call__(self, text: str, *names: str) -> str:
        if not self.colour or not names:
            return text
        codes = ";".join(_CODES[n] for n in names)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def status(self, status: str) -> str:
        colour = {"ok": "green", "error": "red", "halted": "red", "interrupted": "yellow"}.get(
            status, "yellow"
        )
        return self(status, colour)
