"""Terminal-safe text for ``audit show | calls | verify``: control, bidi and invisible characters shown.

A request path, an event detail or a model's answer can hold an ESC sequence (rewrites the
operator's terminal), a newline (fakes lines of the tree), a right-to-left override or a
zero-width character (hides what is really there). Everything the log supplies is passed through
:func:`safe` before it is printed, on a terminal or into a pipe: C0 and C1 controls, DEL, bidi
controls, zero-width and line/paragraph separators print as ``\\x1b``, ``\\n``, ``\\u202e``...
(and a backslash as ``\\\\``, so an escape cannot be faked). ``--json`` output is plain JSON.
"""

from __future__ import annotations

import re
from typing import Any

_UNSAFE = re.compile(
    "[\\\\\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\\":
        return "\\\\"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str) -> str:
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def clean(value: Any) -> Any:
    """``value`` with every string in it (keys too) made :func:`safe`."""
    if isinstance(value, str):
        return safe(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value
