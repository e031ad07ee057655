"""Audit-log verification speed. Prints JSON: ``python benchmarks/bench_audit_verify.py [--records N]``.

A log of N records (default 200,000) is written by a real ``AuditLog`` (HMAC-SHA256 chain, signed
Ed25519 digests, the default 64 MiB rotation), then verified four ways, each timed once (seconds):

- ``hmac_s``: ``verify(key=...)`` -- every digest and link;
- ``signed_s``: ``verify(key=..., public_key=...)`` -- plus every signature and the SHA-256 of
  every file the last digest covers;
- ``signed_reordered_s``: the same after 1% of the lines of each file were moved elsewhere in it
  (the worst case of the old verifier, quadratic in the moved lines); it must report problems;
- ``per_record_us``: ``signed_s`` divided by N.

``write_s`` is how long writing the log took (not the subject here). Linear time shows as
``signed_reordered_s`` staying close to ``signed_s``, and the figures growing with N, not N squared.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext, WrapOptions
from veronica_mw.observe._audit_sign import keygen
from veronica_mw.observe.audit_verify import verify

KEY = b"benchmark-key"


def write(directory: Path, records: int, signing: Path) -> float:
    log = AuditLog(directory / "audit.jsonl", key=KEY, signing_key=signing, queue_size=1_000_000)
    config = ExecutionConfig(max_cost_usd=1e12, max_steps=10**9, max_retries_total=0)
    options = WrapOptions(operation_name="chat", model="gpt-4o-mini")
    started = time.perf_counter()
    calls_per_context = 50  # 2 records a call, 2 a context
    contexts = max(1, records // (2 * calls_per_context + 2))
    for _ in range(contexts):
        with ExecutionContext(config, audit=log) as ctx:
            for _ in range(calls_per_context):
                ctx.call_llm(lambda: "an answer", options=options)
    assert log.close(timeout=600), "the writer did not finish"
    assert log.dropped == 0, log.stats()
    return time.perf_counter() - started


def shuffle(directory: Path, fraction: float) -> None:
    rng = random.Random(7)
    for path in directory.glob("audit.*.jsonl"):
        lines = path.read_bytes().splitlines(keepends=True)
        for _ in range(int(len(lines) * fraction)):
            line = lines.pop(rng.randrange(1, len(lines) - 1))
            lines.insert(rng.randrange(1, len(lines) - 1), line)
        path.write_bytes(b"".join(lines))


def timed(fn: object) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()  # type: ignore[operator]
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        private, public = keygen(root / "signing")
        logs = root / "logs"
        logs.mkdir()
        write_s = write(logs, args.records, private)
        hmac_s, report = timed(lambda: verify([logs], key=KEY))
        assert report.ok, report.problems[:5]  # type: ignore[attr-defined]
        signed_s, report = timed(lambda: verify([logs], key=KEY, public_key=public))
        assert report.ok, report.problems[:5]  # type: ignore[attr-defined]
        records = report.records  # type: ignore[attr-defined]
        shuffle(logs, 0.01)
        reordered_s, report = timed(lambda: verify([logs], key=KEY, public_key=public))
        assert not report.ok  # type: ignore[attr-defined]
    print(
        json.dumps(
            {
                "benchmark": "audit_verify",
                "python": platform.python_version(),
                "records": records,
                "write_s": round(write_s, 2),
                "hmac_s": round(hmac_s, 2),
                "signed_s": round(signed_s, 2),
                "signed_reordered_s": round(reordered_s, 2),
                "per_record_us": round(signed_s / records * 1e6, 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
