"""Redaction of audit records at the last moment before they are written: secrets by name and by value.

The kernel already drops credential keyword arguments and header dicts from call bodies, but the
audit log must not rely on that: whatever reaches it (call bodies, event data, context
attributes, error text) is walked once more here, on the writer thread, just before the record is
serialised. A value under a secret *name* (compared case-insensitively, ``-`` read as ``_``, at
any depth) becomes ``"[REDACTED]"``; any string that *looks* like a credential (an API key,
an access key id, a bearer token) has that part replaced, wherever it appears.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MARK = "[REDACTED]"

SECRET_NAMES = frozenset(
    {
        "api_key", "apikey", "x_api_key", "api_token", "access_token", "refresh_token", "id_token",
        "token", "auth", "auth_token", "bearer", "authorization", "proxy_authorization", "cookie",
        "set_cookie", "password", "passwd", "secret", "client_secret", "private_key",
        "aws_secret_access_key", "aws_session_token", "aws_security_token", "session_token",
        "azure_ad_token", "x_goog_api_key", "x_auth_token", "credentials", "secret_key",
    }
)  # fmt: skip
# Names ending like these are secrets too (``openai_api_key``, ``github_token``, ``db_password``).
_SUFFIXES = ("_api_key", "_token", "_secret", "_password", "_private_key", "_secret_key")

_VALUE_PATTERNS = (
    r"sk-(?:ant-|proj-)?[A-Za-z0-9_-]{12,}",  # OpenAI, Anthropic
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"\bAIza[0-9A-Za-z_-]{30,}",  # Google API keys
    r"(?i:\bbearer\s+[A-Za-z0-9._~+/=-]{8,})",  # an Authorization header's value
)
_MAX_DEPTH = 64


class Redactor:
    """Replaces secrets in a JSON-ready record (returns a new structure; the input is not changed)."""

    __slots__ = ("_names", "_pattern", "_verdicts")

    def __init__(self, extra: Iterable[str | re.Pattern[str]] = ()) -> None:
        if isinstance(extra, (str, re.Pattern)):
            extra = [extra]
        names = set(SECRET_NAMES)
        patterns = list(_VALUE_PATTERNS)
        for item in extra:
            if isinstance(item, re.Pattern):
                if not isinstance(item.pattern, str):
                    raise TypeError("redact= patterns must be str patterns, not bytes")
                patterns.append(item.pattern if not item.flags & re.IGNORECASE else f"(?i:{item.pattern})")
            elif isinstance(item, str) and item.strip():
                names.add(_norm(item))
            else:
                raise TypeError(f"redact= takes names (str) and compiled patterns (re.Pattern), got {item!r}")
        self._names = frozenset(names)
        self._pattern = re.compile("|".join(f"(?:{p})" for p in patterns))
        self._verdicts: dict[str, bool] = {}

    def secret_name(self, key: str) -> bool:
        verdict = self._verdicts.get(key)
        if verdict is None:
            name = _norm(key)
            verdict = name in self._names or name.endswith(_SUFFIXES)
            if len(self._verdicts) < 4096:
                self._verdicts[key] = verdict
        return verdict

    def text(self, value: str) -> str:
        return self._pattern.sub(MARK, value) if self._pattern.search(value) else value

    def __call__(self, value: Any, depth: int = 0) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is dict:
            if depth >= _MAX_DEPTH:
                return MARK
            return {
                k: (MARK if v is not None and self.secret_name(k) else self(v, depth + 1))
                for k, v in value.items()
            }
        if kind is list or kind is tuple:
            if depth >= _MAX_DEPTH:
                return MARK
            return [self(v, depth + 1) for v in value]
        return value


def _norm(name: str) -> str:
    return name.strip().lower().replace("-", "_")
