"""Secrets of an ``ApprovalQueue``: token strength, the namespace, and the MAC of a stored decision.

A decision is authenticated with an HMAC-SHA256 keyed from the queue's secret, over the namespace,
the request id, the decision, the reason, the SHA-256 of the original arguments and of the edited
ones, the approver and the time: a waiter that cannot verify it treats it as a rejection, so a
decision written into the store without the secret approves nothing, and a decision for other
arguments than the waiter's own does not apply to its call.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import string
from collections import Counter
from typing import Any

MIN_BITS = 128
_NAME = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
_NAMESPACE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_CLASSES = (
    frozenset(string.digits),
    frozenset(string.hexdigits.lower()),
    frozenset(string.hexdigits),
    frozenset(string.ascii_lowercase),
    frozenset(string.ascii_letters + string.digits + "-_"),  # mixed case: a base64url token
    frozenset(string.ascii_letters + string.digits + "+/="),
    frozenset(string.printable.strip()),
)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


def args_sha256(arguments: Any) -> str:
    """SHA-256 (hex) of arguments as canonical JSON (sorted keys): what a decision is bound to."""
    return hashlib.sha256(canonical_json(arguments).encode("utf-8", "surrogatepass")).hexdigest()


def token_bits(token: str) -> float:
    """What a token can carry at most: its length times the bits per character of the smallest
    usual alphabet holding all its characters (hex, base64url, printable ASCII, ...)."""
    chars = set(token)
    alphabet = next((len(c) for c in _CLASSES if chars <= c), 95 if token.isascii() else 1 << 16)
    return len(token) * math.log2(alphabet)


def _variety_bits(token: str) -> float:
    """Length times the entropy of its own character frequencies: low for "aaaa...ab"."""
    counts = Counter(token)
    return -sum(n * math.log2(n / len(token)) for n in counts.values())


def _periodic(token: str) -> bool:
    return any(
        token == (token[:p] * (len(token) // p + 1))[: len(token)] for p in range(1, len(token) // 2 + 1)
    )


def check_token(token: Any, who: str = "token") -> str:
    """``token`` if it carries at least 128 bits, else a ValueError that says how to make one."""
    hint = f"{who} must be a random str of at least {MIN_BITS} bits, e.g. secrets.token_urlsafe(16) or longer"
    if not isinstance(token, str):
        raise TypeError(f"{hint}; got {type(token).__name__}")
    weak = len(set(token)) < 8 or _periodic(token) or _variety_bits(token) < MIN_BITS / 2
    if weak or token_bits(token) < MIN_BITS:
        what = "repeated or low-variety" if weak else f"too short (at most {token_bits(token):.0f} bits)"
        raise ValueError(f"{hint}; this one is {what}")
    return token


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"an approver name is 1-64 letters, digits or _.@+- characters, got {name!r}")
    return name


def check_namespace(namespace: Any) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise ValueError(f"namespace must be 1-64 letters, digits or _.:- characters, got {namespace!r}")
    return namespace


def derive(secret: str, purpose: str) -> bytes:
    """A key for one purpose (sessions, CSRF, decisions, the namespace) from the queue's secret."""
    return hmac.new(secret.encode("utf-8"), f"veronica-mw approvals {purpose} v2".encode(), "sha256").digest()


def default_namespace(secret: str) -> str:
    return "q" + derive(secret, "namespace").hex()[:24]


_SIGNED = ("decision", "message", "args_sha256", "edited_args_sha256", "approver", "decided_at")


def _mac_input(namespace: str, request_id: str, decision: dict[str, Any]) -> bytes:
    return canonical_json([namespace, request_id, *[decision.get(k) for k in _SIGNED]]).encode()


def sign_decision(key: bytes, namespace: str, request_id: str, decision: dict[str, Any]) -> dict[str, Any]:
    mac = hmac.new(key, _mac_input(namespace, request_id, decision), hashlib.sha256).hexdigest()
    return {**decision, "mac": mac}


def verify_decision(
    key: bytes, namespace: str, request_id: str, decision: dict[str, Any], arguments: Any
) -> str | None:
    """None if ``decision`` is authentic and bound to ``arguments`` (and its edit to the new
    ones); otherwise what is wrong with it."""
    mac = decision.get("mac")
    if not isinstance(mac, str):
        return "it carries no MAC"
    expected = hmac.new(key, _mac_input(namespace, request_id, decision), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac.encode(), expected.encode()):
        return "its MAC does not match"
    if decision.get("args_sha256") != args_sha256(arguments):
        return "it was made for other arguments"
    if decision.get("decision") == "edit" and decision.get("edited_args_sha256") != args_sha256(
        decision.get("arguments")
    ):
        return "its edited arguments were changed"
    return None
