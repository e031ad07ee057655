"""AuditLog: a tamper-evident JSON Lines record of every context, call, event and halt.

``AuditLog`` is a kernel observer: give it to one context (``ExecutionContext(..., audit=log)``), to
a middleware (``VeronicaASGIMiddleware(app, config=..., audit=log)``: every request's context), or to
every context (``add_observer(log)``). The request thread only captures the event's values and
queues them (see :mod:`._audit_writer`); formatting, hashing and I/O happen on the writer thread.
The line format and the hash chain are described in :mod:`._audit_chain`, the files in
:mod:`._audit_files`.

Records, in order, one per line (all with ``seq``, ``prev``, ``t`` -- Unix time -- and ``digest``):
``log`` (opens each file), ``context_started`` (chain id, parent chain, name, limits, config digest,
``attributes`` such as the request's method and path), ``call_admitted`` and ``call`` (the settled
call: kind, name, model, tokens, cost, status, duration; with ``record_bodies`` also the request
and the response text), ``event`` (soft limit, unpriced call, check, approval...), ``halt`` (reason,
detail, usage then), ``context_ended`` (final usage), ``refused`` (a request a tenant budget pool
turned away before it had a context), ``dropped`` (records that could not be written, with why),
``head``, ``digest`` (signed, with ``signing_key``) and ``recovery`` (what a new chain found of
chains that ended badly). Every record is redacted (:mod:`._redact`) as it is serialised.
"""

from __future__ import annotations

import atexit
import os
import re
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..kernel._io import jsonable
from ..kernel.config import ExecutionConfig
from ..kernel.execution import ExecutionContext
from ..kernel.graph import CallNode
from ..kernel.observer import Observer
from ..kernel.snapshot import ExecutionEvent
from . import _audit_records as records
from ._audit_anchor import make_anchor
from ._audit_chain import Digester, canonical, plain_digest
from ._audit_files import ChainFiles
from ._audit_sign import Signer
from ._audit_writer import Writer
from ._redact import Redactor

__all__ = ["AuditLog"]

_MIN_BYTES = 4096


class AuditLog(Observer):
    """Write an integrity-chained audit log of every context that has it as an observer.

    ``path``: where the log goes; each process writes ``<stem>.<host>.<pid>.jsonl`` beside it (the
    directory must exist; if it cannot be written the error is logged and requests carry on).
    ``key``: HMAC-SHA256 key for the digests (else plain SHA-256). ``record_bodies``: also keep each
    LLM call's request (messages, model, parameters; never keys or auth headers) and response text.
    ``max_bytes``: rotate to a new file beyond this size. ``head_every``: a head record every that
    many records (and on close, on rotation, after ``head_interval_s`` of quiet). ``queue_size``:
    records waiting for the writer beyond which new ones are dropped (and counted). ``retry_s``:
    how soon writing is tried again after an error (missing or read-only directory, full disk).
    ``signing_key``: an Ed25519 private key (a ``cryptography`` key object, PEM bytes or a PEM
    file's path; ``pip install "veronica-mw[audit]"``): each chain then writes signed ``digest``
    records at its start, every ``digest_interval_s``, at rotation and on close. ``anchor``: where
    every signed digest is also sent -- a path (append-only file, best on another volume), a
    ``redis://`` URL (a list per log) or a callable taking the entry dict. ``redact``: more names
    (str, matched case-insensitively) or value patterns (``re.Pattern``) to redact, on top of
    the built-in ones.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        key: bytes | None = None,
        record_bodies: bool = False,
        max_bytes: int = 64 * 2**20,
        head_every: int = 1000,
        queue_size: int = 10_000,
        head_interval_s: float = 5.0,
        retry_s: float = 5.0,
        signing_key: Any = None,
        digest_interval_s: float = 60.0,
        anchor: Any = None,
        redact: Iterable[str | re.Pattern[str]] = (),
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        for name, value, low in (
            ("max_bytes", max_bytes, _MIN_BYTES),
            ("head_every", head_every, 1),
            ("queue_size", queue_size, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        for name, seconds in (
            ("head_interval_s", head_interval_s),
            ("retry_s", retry_s),
            ("digest_interval_s", digest_interval_s),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
                raise ValueError(f"{name} must be a number > 0, got {seconds!r}")
        self.path = Path(os.fspath(path))
        self.record_bodies = bool(record_bodies)
        self._digester = Digester(key)
        self._redactor = Redactor(redact)
        if anchor is not None and signing_key is None:
            raise ValueError("anchor= needs signing_key=: only signed digests are anchored")
        signer = Signer(signing_key) if signing_key is not None else None
        self._chain_options: dict[str, Any] = {
            "max_bytes": max_bytes,
            "head_every": head_every,
            "bodies": self.record_bodies,
            "signer": signer,
            "anchor": make_anchor(anchor, self.path.stem if self.path.suffix else self.path.name),
            "digest_interval_s": float(digest_interval_s),
        }
        self._configs: dict[ExecutionConfig, tuple[dict[str, Any], str]] = {}
        self._writer = Writer(
            self._open_chain,
            self._format,
            queue_size=queue_size,
            head_interval_s=float(head_interval_s),
            retry_s=float(retry_s),
            digest_interval_s=float(digest_interval_s) if signer is not None else float(head_interval_s),
        )
        _live.add(self)

    def __repr__(self) -> str:
        signed = " signed" if self._chain_options["signer"] is not None else ""
        bodies = " bodies" if self.record_bodies else ""
        return f"<AuditLog {str(self.path)!r} {self._digester.alg}{signed}{bodies}>"

    # -- observer: capture on the calling thread, format on the writer's -------------------------

    def context_started(self, ctx: ExecutionContext) -> None:
        attributes = ctx.attributes
        self._writer.submit(
            (
                records.context_started,
                time.time(),
                ctx.chain_id,
                _parent_chain(ctx),
                ctx._name or None,
                self._config(ctx.config),
                dict(attributes) if attributes else None,
            )
        )

    def call_started(self, ctx: ExecutionContext, node: CallNode) -> None:
        self._writer.submit(
            (
                records.call_admitted,
                time.time(),
                ctx.chain_id,
                node.node_id,
                node.parent_id,
                node.kind,
                node.name,
                node.model,
                node.reserved_usd,
            )
        )

    def call_ended(self, ctx: ExecutionContext, node: CallNode, error: BaseException | None) -> None:
        self._writer.submit(
            (
                records.call,
                time.time(),
                ctx.chain_id,
                node.node_id,
                node.parent_id,
                node.kind,
                node.name,
                node.model,
                node.tokens_in,
                node.tokens_out,
                node.cost_usd,
                node.status,
                node.duration_ms,
                type(error).__name__ if error is not None else None,
                node.io,
            )
        )

    def event(self, ctx: ExecutionContext, event: ExecutionEvent) -> None:
        self._writer.submit((records.event, time.time(), ctx.chain_id, event.kind, event.detail, event.data))

    def halted(self, ctx: ExecutionContext, reason: str, detail: str) -> None:
        self._writer.submit(
            (
                records.halt,
                time.time(),
                ctx.chain_id,
                reason,
                detail,
                _usage(ctx),
                self._config(ctx.config)[0],
            )
        )

    def context_ended(self, ctx: ExecutionContext) -> None:
        self._writer.submit((records.context_ended, time.time(), ctx.chain_id, _usage(ctx), ctx.abort_reason))

    def refused(self, reason: str, detail: str, status: int) -> None:
        self._writer.submit((records.refused, time.time(), reason, detail, status))

    # -- control and state -----------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every record queued so far has been written; False if that took too long."""
        return self._writer.flush(timeout)

    def close(self, timeout: float = 10.0) -> bool:
        """Write what is queued and a final head record, then stop (idempotent). Called at exit."""
        return self._writer.close(timeout)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def files(self) -> list[str]:
        """The files this process has written, oldest first."""
        return list(self._writer.files)

    @property
    def head(self) -> str | None:
        """The digest of the last record this process's chain wrote (keep it somewhere safe and
        pass it to ``audit verify --expect-head`` later: it stays valid whatever other chains write)."""
        chain = self._writer.chain
        return chain.prev if chain is not None and chain.seq else None

    @property
    def dropped(self) -> int:
        """Records that never made it into the log (queue full, write errors, after close)."""
        return self._writer.dropped_total

    def stats(self) -> dict[str, Any]:
        """Counters for metrics: written, dropped (by reason), pending, files."""
        writer = self._writer
        return {
            "written": writer.written,
            "dropped": writer.dropped_total,
            "dropped_by_reason": dict(writer.dropped),
            "pending": writer.pending,
            "files": self.files,
        }

    # -- internals -------------------------------------------------------------------------------

    def _open_chain(self, after_error: str | None, previous: Path | None) -> ChainFiles:
        return ChainFiles(
            self.path, self._digester, after_error=after_error, previous=previous, **self._chain_options
        )

    def _format(self, item: tuple[Any, ...]) -> dict[str, Any]:
        """On the writer thread: the record, with every secret replaced just before it is sealed."""
        redacted: dict[str, Any] = self._redactor(records.format_item(item))
        return redacted

    def _config(self, config: ExecutionConfig) -> tuple[dict[str, Any], str]:
        cached = self._configs.get(config)
        if cached is None:
            limits = config.as_dict()
            cached = (limits, plain_digest(canonical(jsonable(limits))))
            if len(self._configs) > 1024:  # per-tenant configs: keep the cache bounded
                self._configs.clear()
            self._configs[config] = cached
        return cached

    def _after_fork(self) -> None:
        self._writer._reset()


def _parent_chain(ctx: ExecutionContext) -> str | None:
    """The chain id of the context this one is nested in (None for a root)."""
    lineage = ctx._lineage  # (ctx, parent, ..., root) once nested; empty for a root
    return lineage[1].chain_id if len(lineage) > 1 else None


def _usage(ctx: ExecutionContext) -> dict[str, Any]:
    s = ctx.get_snapshot()
    return {
        "steps": s.step_count,
        "cost_usd": s.cost_usd_accumulated,
        "reserved_usd": s.cost_usd_reserved,
        "retries": s.retries_used,
        "in_flight": s.in_flight,
        "elapsed_ms": round(s.elapsed_ms, 3),
    }


# Close every log at interpreter exit (writes the final head), and give a forked child its own
# chain and files instead of the parent's queue.
_live: weakref.WeakSet[AuditLog] = weakref.WeakSet()


def _close_all() -> None:
    for log in list(_live):
        log.close(timeout=5.0)


def _forked() -> None:
    for log in list(_live):
        log._after_fork()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
