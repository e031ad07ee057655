"""AG2 adapters, for both generations that share the ``ag2`` name on PyPI.

* ``ag2`` 0.14 (``import autogen``): :class:`VeronicaCapability`, an ``AgentCapability`` added to
  each ``ConversableAgent`` with ``.add_to_agent(agent)``.
* ``ag2`` 1.x (``import ag2``): :class:`VeronicaMiddleware`, a middleware factory passed to
  ``Agent(..., middleware=[...])``.

:func:`instrument` (``veronica_mw.instrument("ag2")``, in the default set and under
``veronica-mw run``) contains every agent of whichever generation is installed, bound to the
execution context current at each call (see :mod:`._ag2_instrument`).

Importing this module works with either generation installed and offers what that generation
supports; asking for the other class raises :class:`~veronica_mw.MissingFrameworkError` saying
which ``ag2`` version it needs. Without any AG2 the import itself raises it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import MissingFrameworkError

# The gated framework import. 0.14 is tried first: of the two generations only it ships the
# ``autogen`` package. An unrelated old ``autogen`` without the 0.14 hooks is refused by
# ``VeronicaCapability.add_to_agent`` with a TypeError.
try:
    import autogen as _framework  # type: ignore[import-not-found, unused-ignore]

    GENERATION = "0.14"
except ImportError:
    try:
        import ag2 as _framework  # type: ignore[import-not-found, no-redef, unused-ignore]

        GENERATION = "1.x"
    except ImportError as _exc:
        raise MissingFrameworkError("ag2", "ag2", _exc) from None

if TYPE_CHECKING:
    from ._ag2_legacy import VeronicaCapability
    from ._ag2_v1 import VeronicaMiddleware

__all__ = [
    "FRAMEWORK_VERSION",
    "GENERATION",
    "VeronicaCapability",
    "VeronicaMiddleware",
    "instrument",
    "instrumented",
    "uninstrument",
]

FRAMEWORK_VERSION: str = str(getattr(_framework, "__version__", "unknown"))
"""The installed AG2 version (``GENERATION`` says which API family it is)."""

_NEEDS = {
    "VeronicaCapability": ("0.14", "ag2>=0.14,<0.15 (import autogen)", "VeronicaMiddleware"),
    "VeronicaMiddleware": ("1.x", "ag2>=1.0 (import ag2)", "VeronicaCapability"),
}


def instrument() -> None:
    """Contain every agent of the installed generation inside execution contexts (idempotent)."""
    from . import _ag2_instrument

    _ag2_instrument.instrument(GENERATION)


def uninstrument() -> None:
    """Undo :func:`instrument` (idempotent)."""
    from . import _ag2_instrument

    _ag2_instrument.uninstrument()


def instrumented() -> bool:
    from . import _ag2_instrument

    return _ag2_instrument.instrumented()


def __getattr__(name: str) -> Any:
    # Resolved lazily so that this module imports with either generation installed.
    need = _NEEDS.get(name)
    if need is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    generation, requirement, other = need
    if GENERATION != generation:
        cause = ImportError(
            f"{name} is the AG2 {generation} adapter but the installed ag2 {FRAMEWORK_VERSION} is the "
            f"{GENERATION} generation; use {other} with it, or install {requirement}"
        )
        raise MissingFrameworkError(requirement, "ag2", cause)
    if name == "VeronicaCapability":
        from ._ag2_legacy import VeronicaCapability

        return VeronicaCapability
    from ._ag2_v1 import VeronicaMiddleware

    return VeronicaMiddleware


def __dir__() -> list[str]:
    return sorted([*globals(), *_NEEDS])
