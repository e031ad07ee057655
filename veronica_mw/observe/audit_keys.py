"""Ed25519 keys for signed audit logs (``pip install "veronica-mw[audit]"``): the public face of
:mod:`._audit_sign`. ``keygen(out)`` is what ``veronica-mw audit keygen OUT`` runs."""

from __future__ import annotations

from ._audit_sign import fingerprint, keygen, load_private_key, load_public_key

__all__ = ["fingerprint", "keygen", "load_private_key", "load_public_key"]
