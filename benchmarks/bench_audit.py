"""Audit-log benchmarks. Prints JSON: ``python benchmarks/bench_audit.py [--quick]``.

- ``per_call_us``: one ``ctx.call_llm(create, model=..., messages=[...], temperature=...)`` round
  trip (an OpenAI-shaped reply with usage, priced), without an audit log, with one (no bodies), and
  with ``record_bodies=True``. ``request_path`` is the time the calling thread spends (the writer
  thread runs meanwhile and competes for the GIL); ``end_to_end`` adds waiting for the writer to
  have written everything (flush), divided over the calls: the whole CPU cost of auditing a call.
  ``*_overhead_us`` subtract the run without an audit log. ``dropped`` should be 0 (queue sized for
  the run); a non-zero count means the writer fell behind and records were counted as dropped.
- ``request_thread_only_us``: the same call with the writer's queue swapped for a small sink: only
  what the calling thread itself does (capture and queue; with bodies, the JSON-ready copy of the
  request), without a writer thread competing for the GIL.
- ``per_request_us``: a request-sized context (enter, one call, exit: 4 records), off vs on.
- ``writer_records_per_s``: records the writer thread formats, hashes and writes per second, for
  SHA-256 and HMAC-SHA256 chains, small records and LLM-call records with bodies.
- ``stalled_writer``: per-call time on the request path while the writer is blocked in a write (a
  disk that stopped answering) and the queue is full, against a free-running writer: the drop path
  must not be slower than the normal one.

Figures are microseconds (or records/s), the best of several repeats; run on an idle machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext, WrapOptions
from veronica_mw.observe._audit_files import ChainFiles

BIG = ExecutionConfig(max_cost_usd=1e12, max_steps=10**12, max_retries_total=10**6)
MESSAGES = [
    {"role": "system", "content": "You are a careful assistant. Answer in one short paragraph."},
    {"role": "user", "content": "Summarise the main risks of letting an agent call tools without limits."},
]
REPLY = {
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Unbounded cost, loops, and " * 8}}],
    "usage": {"prompt_tokens": 42, "completion_tokens": 64},
}
OPTIONS = WrapOptions(operation_name="chat", model="gpt-4o-mini")


def create(**kwargs: Any) -> dict[str, Any]:
    return REPLY


def best(samples: list[float]) -> float:
    """The fastest repeat: on a shared machine the others measure the neighbours."""
    return round(min(samples), 3)


def per_call(log: AuditLog | None, n: int, repeats: int) -> dict[str, float]:
    ctx = ExecutionContext(BIG, audit=log, divergence_threshold=0)
    call = ctx.call_llm
    call(create, model="gpt-4o-mini", messages=MESSAGES, temperature=0.2, options=OPTIONS)  # warm pricing
    path, total = [], []
    for _ in range(repeats):
        gc.collect()
        if log is not None:
            log.flush(60)
        start = time.perf_counter()
        for _ in range(n):
            call(create, model="gpt-4o-mini", messages=MESSAGES, temperature=0.2, options=OPTIONS)
        mid = time.perf_counter()
        if log is not None:
            log.flush(60)
        end = time.perf_counter()
        path.append((mid - start) / n * 1e6)
        total.append((end - start) / n * 1e6)
    return {"request_path": best(path), "end_to_end": best(total)}


def per_request(log: AuditLog | None, n: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        gc.collect()
        if log is not None:
            log.flush(60)
        start = time.perf_counter()
        for _ in range(n):
            with ExecutionContext(BIG, audit=log) as ctx:
                ctx.call_llm(create, model="gpt-4o-mini", messages=MESSAGES, options=OPTIONS)
        if log is not None:
            log.flush(60)
        samples.append((time.perf_counter() - start) / n * 1e6)
    return best(samples)


def writer_rate(directory: Path, name: str, n: int, repeats: int, **options: Any) -> float:
    """Records/s through the writer alone: ``n`` settled-call records queued at once (what the
    observer queues for each call), timed until the writer has written them all."""
    rates = []
    for r in range(repeats):
        log = AuditLog(directory / f"{name}-{r}.jsonl", queue_size=n + 10, max_bytes=2**30, **options)
        ctx = ExecutionContext(BIG, audit=log, divergence_threshold=0)
        node = ctx.begin_call("llm", OPTIONS)
        node.record_io(request={"model": "gpt-4o-mini", "messages": MESSAGES}, response_text="x" * 200)
        node.commit(REPLY)
        assert log.flush(60)
        writer = log._writer
        captured: list[Any] = []
        writer.submit = captured.append  # type: ignore[method-assign,assignment]  # capture, do not queue
        log.call_ended(ctx, node, None)
        del writer.submit
        items = captured * n
        start = time.perf_counter()
        writer._queue.extend(items)
        writer._wake.set()
        assert log.flush(600)
        rates.append(n / (time.perf_counter() - start))
        log.close()
    return round(max(rates))


def capture_only(directory: Path, n: int, repeats: int, bodies: bool) -> float:
    """Per-call time with the writer's queue swapped for a sink that keeps the last few items: what
    the calling thread itself does (capture and queue; with bodies, the copy of the request), with
    no writer thread competing for the GIL and no queue growing (a parked writer's growing queue
    would make the garbage collector's work the figure)."""
    log = AuditLog(directory / f"capture-{bodies}.jsonl", record_bodies=bodies)
    sink: deque[Any] = deque(maxlen=512)
    log._writer.submit = sink.append  # type: ignore[method-assign,assignment]
    return per_call_path(log, n, repeats)


def per_call_path(log: AuditLog, n: int, repeats: int) -> float:
    ctx = ExecutionContext(BIG, audit=log, divergence_threshold=0)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            ctx.call_llm(create, model="gpt-4o-mini", messages=MESSAGES, temperature=0.2, options=OPTIONS)
        samples.append((time.perf_counter() - start) / n * 1e6)
    return best(samples)


def stalled(directory: Path, n: int, repeats: int) -> dict[str, float]:
    release = threading.Event()
    original = ChainFiles.write

    def blocked(self: ChainFiles, records: list[dict[str, Any]]) -> None:
        release.wait(600)
        original(self, records)

    free_log = AuditLog(directory / "free.jsonl", queue_size=10 * n + 100)
    free = per_call(free_log, n, repeats)["request_path"]
    free_log.close()
    ChainFiles.write = blocked  # type: ignore[method-assign]
    try:
        log = AuditLog(directory / "stalled.jsonl", queue_size=64)
        ctx = ExecutionContext(BIG, audit=log, divergence_threshold=0)
        for _ in range(200):  # fill the queue behind the blocked write
            ctx.call_llm(create, model="gpt-4o-mini", messages=MESSAGES, options=OPTIONS)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(n):
                ctx.call_llm(create, model="gpt-4o-mini", messages=MESSAGES, options=OPTIONS)
            samples.append((time.perf_counter() - start) / n * 1e6)
        dropped = log.dropped
    finally:
        release.set()
        ChainFiles.write = original  # type: ignore[method-assign]
    log.close()
    return {"free_writer_us": free, "stalled_writer_us": best(samples), "dropped": dropped}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    args = parser.parse_args()
    n, repeats, records = (2_000, 3, 20_000) if args.quick else (20_000, 7, 200_000)
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        directory = Path(tmp)
        results: dict[str, Any] = {}
        baseline = per_call(None, n, repeats)
        plain_log = AuditLog(directory / "plain.jsonl", queue_size=10 * n * repeats + 100)
        plain = per_call(plain_log, n, repeats)
        plain_log.close()
        size = 10 * n * repeats + 100  # room for every record of the run: nothing dropped
        bodies_log = AuditLog(directory / "bodies.jsonl", record_bodies=True, queue_size=size)
        bodies = per_call(bodies_log, n, repeats)
        bodies_log.close()
        results["per_call_us"] = {
            "no_audit": baseline,
            "audit": plain,
            "audit_bodies": bodies,
            "audit_overhead_us": {k: round(plain[k] - baseline[k], 3) for k in baseline},
            "audit_bodies_overhead_us": {k: round(bodies[k] - baseline[k], 3) for k in baseline},
            "dropped": plain_log.dropped + bodies_log.dropped,
        }
        only = {
            "audit": capture_only(directory, n, repeats, False),
            "audit_bodies": capture_only(directory, n, repeats, True),
        }
        results["request_thread_only_us"] = {
            **only,
            "audit_overhead_us": round(only["audit"] - baseline["request_path"], 3),
            "audit_bodies_overhead_us": round(only["audit_bodies"] - baseline["request_path"], 3),
        }
        request_log = AuditLog(directory / "requests.jsonl", queue_size=10 * n * repeats + 100)
        off, on = per_request(None, n, repeats), per_request(request_log, n, repeats)
        request_log.close()
        results["per_request_us"] = {"no_audit": off, "audit": on, "overhead_us": round(on - off, 3)}
        results["writer_records_per_s"] = {
            "sha256_call_records": writer_rate(directory, "sha", records, repeats),
            "hmac_call_records": writer_rate(directory, "hmac", records, repeats, key=b"k" * 32),
            "sha256_call_records_with_bodies": writer_rate(
                directory, "bodies", records, repeats, record_bodies=True
            ),
        }
        results["stalled_writer"] = stalled(directory, n, repeats)
    results["python"] = sys.version.split()[0]
    results["machine"] = platform.machine()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
