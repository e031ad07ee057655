"""OpenTelemetry for every contained call: spans, halt events and metrics, through the OTel API only.

On by default when ``opentelemetry-api`` is installed (``pip install "veronica-mw[otel]"``): the
application configures the SDK and its exporters, as with any OTel-instrumented library, and
veronica-mw's spans appear under the request's server span. Without ``opentelemetry-api`` nothing
is imported. ``VERONICA_MW_OTEL=0`` turns it off.

Until an SDK is configured everything would be a no-op, so nothing is registered and no call pays
for OpenTelemetry: ``import veronica_mw`` imports no OpenTelemetry module, and only watches for the
application setting a global tracer or meter provider (see :mod:`._otel_watch`), before or after
importing veronica-mw. Then a small stand-in observer is registered, and the real one (with the
``opentelemetry`` imports) is built on the first context or call. What is emitted is described in
:mod:`veronica_mw.observe._otel_spans`.

:func:`enable` installs it explicitly — with your own providers, say, or after ``VERONICA_MW_OTEL=0``
— and :func:`disable` removes it. There is one OpenTelemetry observer per process: enabling again
replaces it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from ..kernel.exceptions import MissingFrameworkError
from ..kernel.observer import Observer, add_observer, remove_observer
from . import _otel_watch  # imports no opentelemetry either
from ._otel_content import ContentCapture  # reads the environment only: imports no opentelemetry

if TYPE_CHECKING:
    from ..kernel.execution import ExecutionContext
    from ..kernel.graph import CallNode
    from ..kernel.snapshot import ExecutionEvent

__all__ = ["ENV", "active_observer", "disable", "enable"]

logger = logging.getLogger("veronica_mw")

ENV = "VERONICA_MW_OTEL"
_OFF = frozenset({"0", "false", "off", "no"})
_ON = frozenset({"", "1", "true", "on", "yes"})

_lock = threading.Lock()
_active: Observer | None = None  # the registered OpenTelemetry observer (or its stand-in)
_auto = False  # auto_enable() armed: register the stand-in once a global provider is set


def enable(
    *, tracer_provider: Any = None, meter_provider: Any = None, capture_message_content: bool | None = None
) -> Observer:
    """Install the OpenTelemetry observer for every context of this process; return it.

    ``tracer_provider`` / ``meter_provider``: explicit providers (default: the global ones, from
    the moment an SDK is configured; checked at most twice a second until then).
    ``capture_message_content``: record message contents on model-call spans (default: what
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says; off).
    Raises :class:`~veronica_mw.MissingFrameworkError` when ``opentelemetry-api`` is not installed.
    """
    if tracer_provider is not None and not callable(getattr(tracer_provider, "get_tracer", None)):
        raise TypeError(f"tracer_provider must be an OpenTelemetry TracerProvider, got {tracer_provider!r}")
    if meter_provider is not None and not callable(getattr(meter_provider, "get_meter", None)):
        raise TypeError(f"meter_provider must be an OpenTelemetry MeterProvider, got {meter_provider!r}")
    observer = _build(tracer_provider, meter_provider, capture_message_content)
    _install(observer)
    return observer


def disable() -> None:
    """Remove the OpenTelemetry observer (and stop waiting for an SDK to be configured). Do it while
    no contained call runs: the span of a call running across it is never ended (nor, for a
    ``call_*`` form, taken off that thread's context)."""
    global _auto
    _auto = False
    _install(None)


def active_observer() -> Observer | None:
    """The OpenTelemetry observer currently installed (the stand-in until first use), or None."""
    return _active


def _build(tracer_provider: Any, meter_provider: Any, capture: bool | None) -> Observer:
    try:
        from ._otel_spans import OTelObserver
    except ImportError as exc:
        raise MissingFrameworkError(
            "opentelemetry-api", "otel", exc, module="veronica_mw.observe.otel"
        ) from exc
    content = ContentCapture.from_env() if capture is None else ContentCapture(bool(capture))
    return OTelObserver(tracer_provider, meter_provider, content)


def _install(observer: Observer | None) -> None:
    global _active
    with _lock:
        if _active is not None:
            remove_observer(_active)
        if observer is not None:
            add_observer(observer)
        _active = observer


class _StandIn(Observer):
    """Registered by ``import veronica_mw``; builds the real observer on the first notification.

    It then takes its own place in the global list and hands every notification it still gets (a
    thread that read the list before the swap) to whatever observer is installed now.
    """

    def __init__(self) -> None:
        self.record_bodies = ContentCapture.from_env().enabled  # the real one will ask the same

    def _target(self) -> Observer | None:
        global _active
        if _active is not self:
            return _active
        with _lock:
            if _active is self:
                try:
                    observer: Observer | None = _build(None, None, None)
                except ImportError as exc:  # a partial install: stay off, say why once
                    logger.info("veronica_mw: OpenTelemetry not enabled: %s", exc)
                    observer = None
                # Out, in, then published: a thread that sees the new observer here also finds it
                # in the global list for the rest of its call.
                remove_observer(self)
                if observer is not None:
                    add_observer(observer)
                _active = observer
            return _active

    def context_started(self, ctx: ExecutionContext) -> None:
        target = self._target()
        if target is not None:
            target.context_started(ctx)

    def call_started(self, ctx: ExecutionContext, node: CallNode) -> None:
        target = self._target()
        if target is not None:
            target.call_started(ctx, node)

    def call_ended(self, ctx: ExecutionContext, node: CallNode, error: BaseException | None) -> None:
        target = self._target()
        if target is not None:
            target.call_ended(ctx, node, error)

    def event(self, ctx: ExecutionContext, event: ExecutionEvent) -> None:
        target = self._target()
        if target is not None:
            target.event(ctx, event)

    def halted(self, ctx: ExecutionContext, reason: str, detail: str) -> None:
        target = self._target()
        if target is not None:
            target.halted(ctx, reason, detail)

    def refused(self, reason: str, detail: str, status: int) -> None:
        target = self._target()
        if target is not None:
            target.refused(reason, detail, status)

    def context_ended(self, ctx: ExecutionContext) -> None:
        target = self._target()
        if target is not None:
            target.context_ended(ctx)


def env_enabled() -> bool:
    """What ``VERONICA_MW_OTEL`` says (on unless ``0``/``false``/``off``/``no``)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in _OFF:
        return False
    if value not in _ON:
        logger.warning(
            "veronica_mw: %s=%r not understood (0 turns OpenTelemetry off); leaving it on", ENV, value
        )
    return True


def auto_enable() -> None:
    """Called by ``import veronica_mw``: wait for an SDK to be configured, if OpenTelemetry can be used.

    Only looks for the ``opentelemetry`` package (``find_spec`` of a top-level name imports
    nothing), so a process without it imports nothing and pays nothing. The stand-in is
    registered at once if a global provider is set already or named by environment variable,
    else when the application sets one.
    """
    global _auto
    if _active is not None or not env_enabled():
        return
    try:
        if importlib.util.find_spec("opentelemetry") is None:
            return
    except (ImportError, ValueError):  # hidden by an import hook, or a None entry in sys.modules
        return
    _auto = True
    if _otel_watch.env_providers():  # loaded by the API's first lookup, which the observer makes
        _provider_set(True)
    else:
        _otel_watch.watch(_provider_set)


def _provider_set(unwatchable: bool) -> None:
    """A global provider may have been set (or cannot be watched): register the stand-in, or tell
    the installed observer to look its global providers up again now."""
    global _active
    with _lock:
        active = _active
        if active is None:
            if _auto and (unwatchable or _otel_watch.configured()):
                stand_in = _StandIn()
                add_observer(stand_in)
                _active = stand_in
            return
    refresh = getattr(active, "refresh", None)
    if refresh is not None:
        refresh()
