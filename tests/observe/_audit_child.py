"""A process that writes a signed audit log, for the accident tests: ``python _audit_child.py DIR
SIGNING ANCHOR MODE`` -- ``loop`` writes until it is killed (prints ``ready`` once the first record
is on disk), ``unclosed`` writes 5 calls and exits without closing its log (as a crash would),
``close`` writes 5 calls and closes it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext, WrapOptions

KEY = b"the-hmac-key"


def main(directory: str, signing: str, anchor: str, mode: str) -> None:
    log = AuditLog(
        Path(directory) / "audit.jsonl", key=KEY, signing_key=signing, anchor=anchor, record_bodies=True
    )
    config = ExecutionConfig(max_cost_usd=1e9, max_steps=10**9, max_retries_total=0)
    body = "x" * 2000  # long lines: a kill lands mid-write more often than not
    with ExecutionContext(config, audit=log) as ctx:
        for i in range(10**9 if mode == "loop" else 5):
            ctx.call_llm(lambda **kw: body, messages=[{"role": "user", "content": f"{i} {body}"}],
                         options=WrapOptions(operation_name="chat", model="gpt-4o-mini"))  # fmt: skip
            if i == 0:
                log.flush()
                print("ready", flush=True)
    if mode == "close":
        log.close()
        return
    log.flush()
    os._exit(0)  # no atexit: the log is left unclosed


if __name__ == "__main__":
    main(*sys.argv[1:5])
