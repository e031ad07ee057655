"""Signed audit logs for the tampering and accident tests, and an attacker's tools: one who holds the
HMAC key (so can re-chain anything consistently) but not the signing key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext, WrapOptions
from veronica_mw.observe._audit_chain import Digester, seal, unseal

KEY = b"the-hmac-key"
CONFIG = ExecutionConfig(max_cost_usd=10.0, max_steps=1000, max_retries_total=0)


def write_chain(
    directory: Path, signing_key: Path, anchor: Path | str, calls: int = 30, **options: Any
) -> AuditLog:
    """One chain (one AuditLog) of ``calls`` model calls, rotated every ~4 KiB, heads every 5 records."""
    options = {"max_bytes": 4096, "head_every": 5, **options}
    log = AuditLog(directory / "audit.jsonl", key=KEY, signing_key=signing_key, anchor=anchor, **options)
    with ExecutionContext(CONFIG, audit=log) as ctx:
        for i in range(calls):
            ctx.call_llm(
                lambda i=i: f"answer {i}", options=WrapOptions(operation_name="chat", model="gpt-4o-mini")
            )
    assert log.close()
    return log


def rechain(files: list[Path], mutate: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    """Rewrite a whole chain as its writer would have, with the HMAC key: ``mutate`` gets every
    record of the chain in order (the ``file`` key says where each goes) and returns the new list."""
    records: list[dict[str, Any]] = []
    for number, path in enumerate(files):
        for line in path.read_bytes().splitlines():
            parsed = unseal(line)
            assert parsed is not None
            record = parsed[0]
            record["_file"] = number
            records.append(record)
    digester = Digester(KEY)
    out: list[bytearray] = [bytearray() for _ in files]
    prev = "0" * 64
    for seq, record in enumerate(mutate(records)):
        number = record.pop("_file")
        record["seq"], record["prev"] = seq, prev
        if record["type"] == "head":
            record["records"] = seq
        line, prev = seal(record, digester)
        out[number] += line
    for path, data in zip(files, out, strict=True):
        path.write_bytes(bytes(data))
