"""Notice the moment an application configures OpenTelemetry, so nothing is paid before it does.

With ``opentelemetry-api`` installed and no SDK configured, every span and metric veronica-mw could
make would go nowhere; registering an observer anyway would take every context off the kernel's
fast path (a node per call, five notifications). So no observer is registered until a global
tracer or meter provider is set: the API's own setters (``set_tracer_provider`` and
``set_meter_provider``, which the SDK's auto-configuration uses too) are wrapped once, when the
application imports ``opentelemetry.trace`` / ``opentelemetry.metrics``, and tell us after each
set. Nothing is asked per call or per context.

The setters wrapped are the API's private ``_set_tracer_provider`` / ``_set_meter_provider``,
through which every public route goes (the ``OTEL_PYTHON_*_PROVIDER`` variables included). An API
without them (none to date) gets :func:`watch` returning False, and the caller falls back to an
observer that looks the providers up itself (``on_set(True)``).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import _post_import

logger = logging.getLogger("veronica_mw")

# (module imported by the application, module holding the setter, setter, provider variable)
_SETTERS = (
    ("opentelemetry.trace", "opentelemetry.trace", "_set_tracer_provider", "OTEL_PYTHON_TRACER_PROVIDER"),
    (
        "opentelemetry.metrics",
        "opentelemetry.metrics._internal",
        "_set_meter_provider",
        "OTEL_PYTHON_METER_PROVIDER",
    ),
)
_MARK = "__veronica_mw_watched__"
_on_set: Callable[[bool], None] | None = None


def env_providers() -> bool:
    """True when a provider is named by environment variable (the API loads it on first lookup)."""
    return any(variable in os.environ for *_, variable in _SETTERS)


def configured() -> bool:
    """Whether a global tracer or meter provider is set (in the API modules already imported).

    Imports nothing, and reads the providers only through the public getters, which return the
    API's placeholder until an SDK is set.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None:
        proxy = getattr(trace, "ProxyTracerProvider", None)
        if proxy is not None and type(trace.get_tracer_provider()) is not proxy:
            return True
    metrics = sys.modules.get("opentelemetry.metrics._internal")
    if metrics is not None:
        placeholder = getattr(metrics, "_PROXY_METER_PROVIDER", None)
        if placeholder is not None and metrics.get_meter_provider() is not placeholder:
            return True
    return False


def watch(on_set: Callable[[bool], None]) -> None:
    """Call ``on_set(False)`` after every global provider set from now on, and once as each API
    module is imported (now, for those already imported); ``on_set(True)`` instead if that module
    has no setter to wrap. Idempotent: the last ``on_set`` given wins."""
    global _on_set
    _on_set = on_set
    for imported, holder, setter, _ in _SETTERS:
        _post_import.when_imported(imported, functools.partial(_wrap, holder, setter))


def _notify(unwatchable: bool = False) -> None:
    on_set = _on_set
    if on_set is not None:
        try:
            on_set(unwatchable)
        except Exception:  # never break the application's set_tracer_provider
            logger.exception("veronica_mw: enabling OpenTelemetry after a provider was set failed")


def _wrap(holder: str, name: str) -> None:
    module: ModuleType = importlib.import_module(holder)  # loaded already: its package was
    original = getattr(module, name, None)
    if not callable(original):
        logger.info("veronica_mw: %s.%s not found; OpenTelemetry looks providers up itself", holder, name)
        _notify(unwatchable=True)
        return
    if not getattr(original, _MARK, False):

        @functools.wraps(original)
        def set_provider(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:
                _notify()

        setattr(set_provider, _MARK, True)
        setattr(module, name, set_provider)
    _notify()  # set before we got here (an SDK configured before veronica-mw was imported)
