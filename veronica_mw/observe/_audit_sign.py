"""Ed25519 keys for signed audit digests: load, sign, check, and make a key pair (``audit keygen``).

``cryptography`` is imported on first use (``pip install "veronica-mw[audit]"``), so an unsigned log
needs nothing beyond the standard library. The writer holds the private key; anyone holding the
public key alone can check every digest, and cannot make one.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

from ._audit_chain import canonical

_HINT = 'signed audit logs need the "cryptography" package: pip install "veronica-mw[audit]"'


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:  # pragma: no cover - the test envs install it
        raise ImportError(_HINT) from exc
    return serialization, ed25519


def _read(source: Any, what: str) -> bytes:
    if isinstance(source, (bytes, bytearray)) and bytes(source).lstrip().startswith(b"-----BEGIN"):
        return bytes(source)
    if isinstance(source, (str, os.PathLike, bytes)):
        try:
            return Path(os.fsdecode(source)).read_bytes()
        except OSError as exc:
            raise ValueError(f"{what} {os.fsdecode(source)!r}: {exc.strerror or exc}") from exc
    raise TypeError(
        f"{what} must be an Ed25519 key, PEM bytes or a path to a PEM file, got {type(source).__name__}"
    )


def load_private_key(source: Any) -> Any:
    """An Ed25519 private key from a key object, PEM bytes or a PEM file's path."""
    serialization, ed25519 = _crypto()
    if isinstance(source, ed25519.Ed25519PrivateKey):
        return source
    try:
        key = serialization.load_pem_private_key(_read(source, "signing_key"), password=None)
    except ValueError as exc:
        raise ValueError(f"signing_key is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError(f"signing_key must be an Ed25519 key, got {type(key).__name__}")
    return key


def load_public_key(source: Any) -> Any:
    """An Ed25519 public key from a key object, PEM bytes or a PEM file's path."""
    serialization, ed25519 = _crypto()
    if isinstance(source, ed25519.Ed25519PublicKey):
        return source
    try:
        key = serialization.load_pem_public_key(_read(source, "public key"))
    except ValueError as exc:
        raise ValueError(f"not a PEM public key: {exc}") from exc
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise ValueError(f"the public key must be an Ed25519 key, got {type(key).__name__}")
    return key


def fingerprint(public_key: Any) -> str:
    """SHA-256 of the raw public key, hex: names the key in every digest it signed."""
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


class Signer:
    __slots__ = ("_key", "key_id")

    def __init__(self, source: Any) -> None:
        self._key = load_private_key(source)
        self.key_id = fingerprint(self._key.public_key())

    def sign(self, statement: dict[str, Any]) -> str:
        return base64.b64encode(self._key.sign(canonical(statement))).decode("ascii")


class Checker:
    __slots__ = ("_key", "key_id")

    def __init__(self, source: Any) -> None:
        self._key = load_public_key(source)
        self.key_id = fingerprint(self._key)

    def valid(self, statement: Any, signature: Any) -> bool:
        if not isinstance(statement, dict) or not isinstance(signature, str):
            return False
        try:
            self._key.verify(base64.b64decode(signature, validate=True), canonical(statement))
        except Exception:  # InvalidSignature, bad base64, a statement that is not JSON-ready
            return False
        return True


def keygen(out: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write a new key pair: ``OUT`` (private, PEM, mode 0600) and ``OUT.pub`` (public, PEM)."""
    serialization, ed25519 = _crypto()
    private = Path(out)
    public = private.with_name(private.name + ".pub")
    for path in (private, public):
        if path.exists():
            raise FileExistsError(f"{path} already exists (not overwritten)")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(pem)
    fd = os.open(public, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as file:
        file.write(pub)
    return private, public
