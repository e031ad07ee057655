"""One secret of every kind the audit log must never write: by name (keyword arguments, headers,
nested dicts) and by value (API-key-shaped strings anywhere, under any name)."""

from __future__ import annotations

from typing import Any

# name -> a value only that argument carries (so finding it on disk names what leaked).
BY_NAME = {
    "api_key": "name-secret-api-key-01",
    "aws_secret_access_key": "name-secret-aws-secret-02",
    "aws_session_token": "name-secret-aws-session-03",
    "azure_ad_token": "name-secret-azure-ad-04",
    "token": "name-secret-token-05",
    "private_key": "name-secret-private-key-06",
    "password": "name-secret-password-07",
    "secret": "name-secret-secret-08",
    "client_secret": "name-secret-client-secret-09",
    "access_token": "name-secret-access-token-10",
    "refresh_token": "name-secret-refresh-token-11",
}
HEADERS = {
    "Authorization": "name-secret-authorization-12",
    "Proxy-Authorization": "name-secret-proxy-auth-13",
    "Cookie": "name-secret-cookie-14",
    "Set-Cookie": "name-secret-set-cookie-15",
    "X-Goog-Api-Key": "name-secret-goog-key-16",
}
# Shaped like real credentials, under names nobody would call secret.
BY_VALUE = {
    "openai": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t",
    "anthropic": "sk-ant-api03-Zy9xWv8uTs7rQp6o",
    "aws_id": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijkl",
    "slack": "xoxb-1234567890-abcdefghijkl",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
    "google": "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW",
}
BEARER_TOKEN = "eyJhbGciOiJIUzI1NiJ9.payload.sig"


def every_secret() -> list[str]:
    return [*BY_NAME.values(), *HEADERS.values(), *BY_VALUE.values(), BEARER_TOKEN]


def nested() -> dict[str, Any]:
    """The name secrets once more, deep in an innocently named structure, mixed case."""
    return {
        "metadata": {"Layer": [{k.upper(): v} for k, v in BY_NAME.items()], "HEADERS_COPY": dict(HEADERS)}
    }


def shaped_text() -> str:
    return "notes: " + " | ".join(f"{k}={v}" for k, v in BY_VALUE.items())


def assert_absent(directory: Any) -> None:
    from pathlib import Path

    raw = b"".join(p.read_bytes() for p in Path(directory).rglob("*") if p.is_file())
    leaked = [s for s in every_secret() if s.encode() in raw]
    assert not leaked, leaked
