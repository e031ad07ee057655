"""The audit log's writer thread: a bounded queue in front of :class:`ChainFiles`.

The request path only appends a tuple to a deque (and sets an event when the writer sleeps); the
writer thread formats, seals and writes. When the queue is full the record is *dropped and
counted*, never waited for, and the count goes into the chain as a ``dropped`` record as soon as
the writer catches up. A failing disk (missing or read-only directory, disk full) is logged and the
records are counted as dropped the same way; every ``retry_s`` the writer tries again, starting a
new chain that names the error that ended the previous one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._audit_files import ChainFiles

logger = logging.getLogger("veronica_mw.audit")

_BATCH = 512  # records formatted and written per wake-up before looking at the clock again
_LOG_EVERY_S = 60.0  # repeated write errors and drops are logged at most this often


class Writer:
    """Owns the queue, the thread and (on that thread) the process's :class:`ChainFiles`."""

    def __init__(
        self,
        open_chain: Callable[[str | None, Path | None], ChainFiles],
        format_item: Callable[[Any], dict[str, Any]],
        *,
        queue_size: int,
        head_interval_s: float,
        retry_s: float = 5.0,
        digest_interval_s: float = 60.0,
    ) -> None:
        self._open_chain = open_chain
        self._format = format_item
        self._max = queue_size
        self._head_interval = head_interval_s
        self._retry_s = retry_s
        self._sleep = min(head_interval_s, digest_interval_s)
        self._reset()

    def _reset(self) -> None:
        """Fresh state: at construction, and in a forked child (the parent's queue is not ours)."""
        self._queue: deque[Any] = deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.closed = False
        self.chain: ChainFiles | None = None
        self._broken_until = 0.0
        self._last_error: str | None = None
        self._previous: Path | None = None  # the last file of the chain a write error ended
        self._last_logged = 0.0
        self.written = 0
        self.dropped: dict[str, int] = {}  # reason -> records lost for it
        self._reported: dict[str, int] = {}  # ... of which a dropped record in the chain says so
        self.files: list[str] = []

    # -- request path ------------------------------------------------------------------------------

    def submit(self, item: Any) -> None:
        """Queue ``item`` for writing, or count it as dropped; never blocks, never raises."""
        queue = self._queue
        if len(queue) >= self._max or self.closed:
            self._drop("closed" if self.closed else "queue_full")
            return
        queue.append(item)
        if self._thread is None:
            self._start()
        if not self._wake.is_set():
            self._wake.set()

    def _drop(self, reason: str, count: int = 1) -> None:
        with self._lock:
            self.dropped[reason] = self.dropped.get(reason, 0) + count
            first = sum(self.dropped.values()) == count
        if first or time.monotonic() - self._last_logged > _LOG_EVERY_S:
            self._last_logged = time.monotonic()
            logger.warning(
                "veronica_mw: audit records dropped (%s); %d so far: %s",
                reason,
                self.dropped_total,
                self.dropped,
            )

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    @property
    def pending(self) -> int:
        return len(self._queue)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self.closed:
                thread = threading.Thread(target=self._run, name="veronica-audit-writer", daemon=True)
                thread.start()
                self._thread = thread

    # -- control -----------------------------------------------------------------------------------

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued so far is written (to the OS); False on timeout."""
        if self._thread is None:
            return True
        done = threading.Event()
        self._queue.append(done)  # past the size limit on purpose: a flush is never dropped
        self._wake.set()
        return done.wait(timeout)

    def close(self, timeout: float) -> bool:
        """Write what is queued and the final head, then stop the thread; False on timeout."""
        with self._lock:
            if self.closed:
                return True
            self.closed = True
            self._stopping = True
            thread = self._thread
        if thread is None:
            return True
        self._wake.set()
        thread.join(timeout)
        if thread.is_alive():
            logger.warning(
                "veronica_mw: audit writer did not finish within %.1fs; %d records still queued",
                timeout,
                len(self._queue),
            )
            return False
        return True

    # -- writer thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.clear()
            batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
            try:
                if batch:
                    self._handle(batch)
                    continue
                if self._stopping:
                    break
                self._idle()
            except Exception:  # the writer must survive anything; what it held is counted lost
                logger.exception("veronica_mw: audit writer failed")
            self._wake.wait(self._sleep)
        self._finish()

    def _handle(self, batch: list[Any]) -> None:
        records: list[dict[str, Any]] = []
        for item in batch:
            if isinstance(item, threading.Event):  # a flush marker: write what came before it
                self._write(records)
                records = []
                item.set()
                continue
            try:
                records.append(self._format(item))
            except Exception:
                logger.exception("veronica_mw: audit record could not be formatted")
                self._drop("format_failed")
        self._write(records)

    def _write(self, records: list[dict[str, Any]]) -> None:
        drops = self._unreported()
        if not records and drops is None:
            return
        if drops is not None:
            records.insert(0, drops[0])
        chain = self.chain
        if chain is None:
            if time.monotonic() < self._broken_until:
                self._lost(records, drops)
                return
            chain = self._open_chain(self._last_error, self._previous)
        try:
            chain.write(records)
        except OSError as exc:
            self._failed(chain, exc)
            self._lost(records, drops)
            return
        self.chain = chain
        if chain.files and (not self.files or self.files[-1] != str(chain.files[-1])):
            self.files.extend(str(p) for p in chain.files if str(p) not in self.files)
        if self._last_error is not None:
            logger.warning("veronica_mw: audit log writing again (%s)", chain.files[-1])
            self._last_error = None
        self.written += len(records)
        if drops is not None:
            self._reported = drops[1]

    def _unreported(self) -> tuple[dict[str, Any], dict[str, int]] | None:
        with self._lock:
            now = dict(self.dropped)
        delta = {k: v - self._reported.get(k, 0) for k, v in now.items() if v > self._reported.get(k, 0)}
        if not delta:
            return None
        record = {
            "type": "dropped",
            "t": round(time.time(), 6),
            "count": sum(delta.values()),
            "reasons": delta,
            "total": sum(now.values()),
        }
        return record, now

    def _lost(
        self, records: list[dict[str, Any]], drops: tuple[dict[str, Any], dict[str, int]] | None
    ) -> None:
        count = len(records) - (1 if drops is not None else 0)  # the dropped record itself is re-made
        if count:
            self._drop("write_failed", count)

    def _failed(self, chain: ChainFiles, exc: OSError) -> None:
        chain.abandon()
        if chain.files:
            self._previous = chain.files[-1]
        self.chain = None
        self._broken_until = time.monotonic() + self._retry_s
        message = f"{type(exc).__name__}: {exc}"
        if message != self._last_error:
            logger.error("veronica_mw: audit log cannot be written (%s); requests continue", message)
        self._last_error = message

    def _idle(self) -> None:
        chain = self.chain
        if self._unreported() is not None:
            self._write([])
        elif chain is not None and (
            chain.undigested or (chain.unheaded and time.monotonic() - chain.last_head >= self._head_interval)
        ):
            try:
                if chain.unheaded and time.monotonic() - chain.last_head >= self._head_interval:
                    chain.head("idle")
                chain.write([])  # writes the digest when one is due
            except OSError as exc:
                self._failed(chain, exc)

    def _finish(self) -> None:
        try:
            batch = list(self._queue)  # anything that slipped in while close() was called
            self._queue.clear()
            self._handle(batch)
            chain = self.chain
            if chain is not None:
                chain.close()
        except Exception:
            logger.exception("veronica_mw: audit log could not be closed cleanly")
        late = sum(1 for item in self._queue if not isinstance(item, threading.Event))
        if late:
            self._drop("closed", late)
        for item in self._queue:
            if isinstance(item, threading.Event):
                item.set()
