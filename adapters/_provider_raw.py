"""Settle a raw-response wrapper of a Stainless SDK once its body is known.

``.with_raw_response`` of a stream and ``.with_streaming_response`` hand the caller a wrapper whose
body has not been read. It is held here (a :class:`~._provider_streams.Pending`, settled once)
until ``parse()`` returns: a stream, then metered like any other, or the parsed response, settled
with its usage. A wrapper closed, collected or outlived by its context before that is settled
with its JSON body if it was read into memory, else its reservation is kept as spent. No SDK is
imported.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from typing import Any

from ._provider_calls import Outcome, ProviderCall
from ._provider_streams import Meter, Pending, _lock, observe

__all__ = ["RawPending", "parsed", "pending", "settle_raw"]

_raw: weakref.WeakKeyDictionary[Any, RawPending] = weakref.WeakKeyDictionary()


def pending() -> bool:
    """Whether any raw wrapper is waiting for ``parse()`` (cheap: checked on every parse)."""
    return bool(_raw)


class RawPending(Pending):
    """A raw-response wrapper whose body was not parsed yet (``with_raw_response`` of a stream,
    ``with_streaming_response``)."""

    __slots__ = ("http", "stream", "meter_for", "outcome_of")

    def __init__(
        self,
        call: ProviderCall,
        wrapper: Any,
        stream: bool,
        meter_for: Callable[[], Meter],
        outcome_of: Callable[[Any], Outcome],
    ) -> None:
        super().__init__(call, wrapper)
        self.http = getattr(wrapper, "http_response", None)  # kept: the body may be read later
        self.stream = stream
        self.meter_for = meter_for
        self.outcome_of = outcome_of
        with _lock:
            _raw[wrapper] = self

    def parsed(self, result: Any) -> None:
        """``parse()`` returned ``result``: a stream to watch, or the response to settle with."""
        if not self._take():
            return
        if hasattr(result, "_iterator") and hasattr(result, "response"):
            observe(self.call, result, self.meter_for())
        else:
            self.call.finish(self.outcome_of(result), result)

    def stop(self) -> None:
        if not self._take():
            return
        body = None if self.stream else _read_json(self.http)
        if body is not None:
            self.call.record_response(body)
            self.call.finish(self.outcome_of(body))
        else:
            self.call.abandon()


def _read_json(http: Any) -> Any:
    """The JSON body of an httpx response if it has been read, else None (never reads it)."""
    if http is None or not getattr(http, "is_stream_consumed", False):
        return None
    try:
        return json.loads(http.content)
    except Exception:  # not read into memory (iterated), or not JSON
        return None


def settle_raw(
    call: ProviderCall,
    wrapper: Any,
    stream: bool,
    meter_for: Callable[[], Meter],
    outcome_of: Callable[[Any], Outcome],
) -> None:
    """Settle a raw-response wrapper now if its JSON body is in memory, else when it is parsed."""
    body = None if stream else _read_json(getattr(wrapper, "http_response", None))
    if body is not None:
        call.record_response(body)
        call.finish(outcome_of(body))
    else:
        RawPending(call, wrapper, stream, meter_for, outcome_of)


def parsed(wrapper: Any, result: Any) -> None:
    """Called by the SDK patch after ``wrapper.parse()`` returned ``result``."""
    with _lock:
        pending = _raw.pop(wrapper, None)
    if pending is not None:
        pending.parsed(result)
