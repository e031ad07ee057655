"""No secret reaches the disk: by name at any depth and case, by value anywhere, whatever the kernel
hands the audit log; files are 0600; ``redact=`` adds names and patterns."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext, WrapOptions

from ._secrets import BY_NAME, BY_VALUE, HEADERS, assert_absent, every_secret, nested, shaped_text
from .conftest import read_records

CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)


def test_no_secret_of_any_kind_is_written(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    text = shaped_text()
    ran = []

    def model(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "answer with " + text

    attributes = {"method": "GET", "path": "/ask", "Authorization": HEADERS["Authorization"], "note": text}
    by_name: dict[str, Any] = dict(BY_NAME)  # every credential keyword argument at once
    with ExecutionContext(CONFIG, audit=log, attributes=attributes) as ctx:
        ctx.call_llm(
            model,
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": text}],
            extra_body={"headers_like": {k.lower(): v for k, v in HEADERS.items()}, **nested()},
            metadata=nested(),
            **by_name,
        )
        ctx.add_event(
            "custom", text, **nested(), **{k.replace("_", "-").title(): v for k, v in BY_NAME.items()}
        )
        ctx.call_tool(lambda: text, options=WrapOptions(operation_name="tool"))
    assert log.close()
    assert (
        len(ran) == 1 and ran[0]["aws_secret_access_key"] == BY_NAME["aws_secret_access_key"]
    )  # really sent
    assert_absent(tmp_path)
    (call,) = (r for r in read_records(tmp_path) if r["type"] == "call" and r["kind"] == "llm")
    assert "[REDACTED]" in call["request"]["messages"][0]["content"]
    assert call["request"]["messages"][0]["content"].startswith("notes: openai=")  # the rest is kept
    assert all(os.stat(f).st_mode & 0o777 == 0o600 for f in log.files)


def test_redact_adds_names_and_patterns(tmp_path: Path) -> None:
    log = AuditLog(
        tmp_path / "audit.jsonl", record_bodies=True, redact=["Tenant-Pin", re.compile(r"EMP-\d{6}")]
    )
    with ExecutionContext(CONFIG, audit=log) as ctx:
        ctx.call_llm(
            lambda **kw: "ok",
            model="m",
            messages=[{"role": "user", "content": "id EMP-123456"}],
            tenant_pin="9911",
        )
    log.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"EMP-123456" not in raw and b"9911" not in raw and b"[REDACTED]" in raw
    with pytest.raises(TypeError):
        AuditLog(tmp_path / "x.jsonl", redact=[42])  # type: ignore[list-item]


def test_the_values_are_shaped_like_the_real_thing() -> None:
    # A guard on the test data itself: each value is what its pattern is about.
    assert BY_VALUE["aws_id"].startswith("AKIA") and len(BY_VALUE["aws_id"]) == 20
    assert len(set(every_secret())) == len(every_secret())
