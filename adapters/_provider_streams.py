"""Settle a provider stream when it ends, is closed, is garbage-collected or its context ends.

The SDK's stream object is returned unchanged — same class, same ``with``/``.response``/helpers.
Only its private item iterator (``_iterator``, which both ``__iter__`` and ``__next__`` of the
Stainless SDKs' ``Stream`` read, and LiteLLM's wrappers iterate) is replaced by a transparent one
that feeds each item to a :class:`Meter` on its way to the caller. The step is settled:

- at exhaustion, with the usage the stream reported (or, when it reported none, an estimate from
  the text it carried: the request was read to its end);
- on ``close()``/``__exit__``, an error mid-stream, garbage collection (``weakref.finalize``) or
  the end of its execution context (LiteLLM's stream wrappers may never be collected): with the
  final usage if it had already arrived, else the reservation is kept as spent — never $0.

A stream class whose iterator cannot be replaced (LiteLLM's) is patched to report to
:func:`watched` instead. Raw-response wrappers (``.with_raw_response`` of a stream,
``.with_streaming_response``) are held by :mod:`._provider_raw` until ``parse()`` hands over the
stream or the parsed response. No SDK is imported.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

from .. import ExecutionContext, HaltReason, Observer, add_observer, remove_observer
from ._provider_calls import Outcome, ProviderCall


class Meter:
    """What one stream reported so far; SDK adapters subclass it and implement :meth:`feed`."""

    __slots__ = ("tokens", "model", "chars", "final", "text")

    def __init__(self) -> None:
        self.tokens: Any = None  # TokenUsage once reported
        self.model: str | None = None
        self.chars = 0  # characters of generated text seen (for an estimate when no usage comes)
        self.final = False  # the usage reported is the final one
        self.text: list[str] | None = None  # the text itself, only when call bodies are kept

    def feed(self, item: Any) -> None:
        raise NotImplementedError

    def seen(self, text: Any) -> None:
        """Generated text arrived (a delta): count it, and keep it if bodies are kept."""
        if isinstance(text, str):
            self.chars += len(text)
            if self.text is not None:
                self.text.append(text)

    def counted(self, text: Any) -> None:
        """Generated output that is not answer text (a tool call's arguments or name) arrived:
        counted for the estimate when no usage comes, not kept as the response text."""
        if isinstance(text, str):
            self.chars += len(text)

    def outcome(self) -> Outcome:
        return self.tokens, self.model, self.chars


_lock = threading.Lock()
_open: dict[ExecutionContext, set[Pending]] = {}


class _Reaper(Observer):
    def context_ended(self, ctx: ExecutionContext) -> None:
        with _lock:
            pending = list(_open.get(ctx, ()))
        for item in pending:
            item.stop()


# Registered only while some stream is open, so contexts pay for no observer the rest of the time.
_reaper = _Reaper()


class Pending:
    """A step whose response is still being read; settled once by :meth:`end` or :meth:`stop`."""

    __slots__ = ("call", "finalizer", "done", "__weakref__")

    def __init__(self, call: ProviderCall, owner: Any) -> None:
        self.call = call
        self.done = False
        with _lock:
            if not _open:
                add_observer(_reaper)
            _open.setdefault(call.ctx, set()).add(self)
        self.finalizer: weakref.finalize[Any, Any] = weakref.finalize(owner, self.stop)

    def _take(self) -> bool:
        with _lock:
            if self.done:
                return False
            self.done = True
            held = _open.get(self.call.ctx)
            if held is not None:
                held.discard(self)
                if not held:
                    del _open[self.call.ctx]
                    if not _open:
                        remove_observer(_reaper)
        self.finalizer.detach()
        return True

    def end(self) -> None:
        """Read to the end."""

    def stop(self) -> None:
        """Closed, abandoned or failed before the end."""


class StreamPending(Pending):
    __slots__ = ("meter", "busy", "items", "cut")

    def __init__(self, call: ProviderCall, owner: Any, meter: Meter) -> None:
        super().__init__(call, owner)
        self.meter = meter
        self.busy = 0  # inside the stream's own next(): a close() from there is its end, not ours
        self.items = 0
        self.cut = False  # the output reached what was reserved: the stream ends at the next read

    def feed(self, item: Any) -> None:
        self.items += 1
        meter = self.meter
        meter.feed(item)
        # Output counted as it streams (4 characters a token, tool-call arguments included): past
        # the output tokens reserved for it, the stream is cut, so a provider that ignores
        # max_tokens cannot run past the reservation. This item still reaches the caller.
        reserved = self.call.plan.output_tokens
        if not meter.final and reserved > 0 and -(-meter.chars // 4) > reserved:
            self.cut = True

    def halt(self) -> BaseException:
        """The stream reached its reservation: settle it (the reservation is kept as spent), halt
        the context with ``budget_exceeded`` and return the ExecutionHalted to raise."""
        call = self.call
        self.stop()
        ctx = call.ctx
        reserved = call.plan.output_tokens
        detail = f"{call.plan.operation}: the stream reached the {reserved} output tokens reserved for it"
        abort = getattr(ctx, "_abort", None)  # the kernel's halt; a public one would replace this
        if callable(abort):
            abort(HaltReason.BUDGET_EXCEEDED, detail)
        else:  # pragma: no cover - a kernel without it: the context still halts
            ctx.cancel(detail)
        ctx.add_event("stream_cut", detail, node_id=call.node.node_id, output_tokens=call.plan.output_tokens)
        return ctx.halted_error()

    def error(self, exc: BaseException) -> None:
        """The stream raised: a request that failed before anything came back is a failed call
        (nothing generated, nothing billed); one that failed half-way keeps its reservation."""
        if self.items == 0 and isinstance(exc, Exception) and not isinstance(exc, StopIteration):
            if self._take():
                self.call.failed(exc)
        else:
            self.stop()

    def end(self) -> None:
        if self._take():
            self._text()
            self.call.finish(self.meter.outcome())

    def stop(self) -> None:
        if self._take():
            self._text()
            if self.meter.final:
                self.call.finish(self.meter.outcome(), complete=False)
            else:
                self.call.abandon()

    def _text(self) -> None:
        text = self.meter.text
        if text is not None:
            self.call.record_response(text="".join(text))


class Observed:
    """The replacement ``_iterator`` of a sync stream (or, from :func:`metered`, the stream itself)."""

    __slots__ = ("inner", "pending", "__weakref__")

    def __init__(self, inner: Iterator[Any], pending: StreamPending) -> None:
        self.inner = inner
        self.pending = pending

    def __iter__(self) -> Observed:
        return self

    def __next__(self) -> Any:
        if self.pending.cut:
            close = getattr(self.inner, "close", None)
            if close is not None:
                close()
            raise self.pending.halt()
        try:
            item = next(self.inner)
        except StopIteration:
            self.pending.end()
            raise
        except BaseException as exc:
            self.pending.error(exc)
            raise
        self.pending.feed(item)
        return item

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()
        self.pending.stop()


class AsyncObserved:
    """The replacement ``_iterator`` of an async stream (or, from :func:`metered`, the stream itself)."""

    __slots__ = ("inner", "pending", "__weakref__")

    def __init__(self, inner: AsyncIterator[Any], pending: StreamPending) -> None:
        self.inner = inner
        self.pending = pending

    def __aiter__(self) -> AsyncObserved:
        return self

    async def __anext__(self) -> Any:
        if self.pending.cut:
            aclose = getattr(self.inner, "aclose", None)
            if aclose is not None:
                await aclose()
            raise self.pending.halt()
        try:
            item = await self.inner.__anext__()
        except StopAsyncIteration:
            self.pending.end()
            raise
        except BaseException as exc:
            self.pending.error(exc)
            raise
        self.pending.feed(item)
        return item

    async def aclose(self) -> None:
        aclose = getattr(self.inner, "aclose", None)
        if aclose is not None:
            await aclose()
        self.pending.stop()


def observe(call: ProviderCall, stream: Any, meter: Meter, attr: str = "_iterator") -> None:
    """Meter ``stream`` (an SDK stream object, left as it is) and settle ``call`` when it ends."""
    inner = getattr(stream, attr, None)
    if inner is None:  # API drift: cannot watch it, so it may cost its full reservation
        call.abandon()
        return
    if call.node.wants_io:
        meter.text = []
    pending = StreamPending(call, stream, meter)
    wrapper = AsyncObserved(inner, pending) if hasattr(inner, "__anext__") else Observed(inner, pending)
    setattr(stream, attr, wrapper)


_watched: weakref.WeakKeyDictionary[Any, StreamPending] = weakref.WeakKeyDictionary()


def watch(call: ProviderCall, stream: Any, meter: Meter) -> None:
    """Meter a stream whose class is patched to report its items (:func:`watched`), rather than
    one whose item iterator can be replaced (LiteLLM's ``CustomStreamWrapper``)."""
    pending = StreamPending(call, stream, meter)
    with _lock:
        _watched[stream] = pending


def watched(stream: Any) -> StreamPending | None:
    """The pending step of a stream given to :func:`watch` (cheap for every other stream)."""
    if not _watched:
        return None
    pending = _watched.get(stream)
    return pending if pending is not None and not pending.done else None


def metered(call: ProviderCall, inner: Any, meter: Meter) -> Observed | AsyncObserved:
    """A plain iterator (or async iterator) over ``inner`` that meters it and settles ``call``, for
    SDKs whose streams are bare generators (Google GenAI): the iterator is what the SDK iterates."""
    if hasattr(inner, "__anext__"):
        wrapper: Observed | AsyncObserved = AsyncObserved(inner, None)  # type: ignore[arg-type]
    else:
        wrapper = Observed(inner, None)  # type: ignore[arg-type]
    wrapper.pending = StreamPending(call, wrapper, meter)
    return wrapper


def pending_of(stream: Any) -> StreamPending | None:
    """The pending step of an observed stream, or of a helper stream wrapping one (``_raw_stream``)."""
    for holder in (stream, getattr(stream, "_raw_stream", None)):
        inner = getattr(holder, "_iterator", None) if holder is not None else None
        if isinstance(inner, (Observed, AsyncObserved)):
            return inner.pending
    return None


def closed(stream: Any) -> None:
    """An SDK stream (or helper stream) was closed: settle it unless it already ended."""
    pending = pending_of(stream)
    if pending is not None:
        pending.stop()
