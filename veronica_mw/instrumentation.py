"""``veronica_mw.instrument()``: zero-config containment of SDKs and frameworks, one adapter each.

Each entry names an adapter module of this package that exposes ``instrument()`` and
``uninstrument()`` (both idempotent), or ``"module:object"`` for an object that does, and the
top-level module of the SDK or framework it patches. The adapter module is imported only when
asked for, so ``import veronica_mw`` stays framework-free; importing it without its SDK raises
:class:`~veronica_mw.MissingFrameworkError` with the pip line.

Provider SDKs and frameworks are both in the default set: a framework's tool runs are steps only
when its adapter is installed (the provider layer sees model requests, never tool bodies), and
one operation stays one step because the inner layer joins the step of the outer one.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import threading
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from . import _post_import
from .kernel._validate import check_int, check_number
from .kernel.exceptions import MissingFrameworkError


class Instrumentor(NamedTuple):
    module: str  # veronica_mw.adapters.<module>, or "<module path>:<object>"
    sdk: str  # the SDK's top-level import name, probed with find_spec for the default set
    extra: str  # pip install "veronica-mw[<extra>]"
    also: tuple[str, ...] = ()  # other import names of the same SDK (AG2 1.x is ``ag2``, 0.14 ``autogen``)

    def sdks(self) -> tuple[str, ...]:
        return (self.sdk, *self.also)

    def target(self) -> str:
        return self.module if ":" in self.module else f"veronica_mw.adapters.{self.module}"


# Adapters add their line here; the order is the order ``instrument()`` patches them in.
INSTRUMENTORS: dict[str, Instrumentor] = {
    "pydantic-ai": Instrumentor("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    "openai-agents": Instrumentor("openai_agents", "agents", "openai-agents"),
    "openai": Instrumentor("openai", "openai", "openai"),
    "anthropic": Instrumentor("anthropic", "anthropic", "anthropic"),
    "litellm": Instrumentor("litellm", "litellm", "litellm"),
    "google-genai": Instrumentor("google_genai", "google.genai", "google-genai"),
    "mcp": Instrumentor("mcp", "mcp", "mcp"),
    "groq": Instrumentor("groq", "groq", "groq"),
    "mistral": Instrumentor("mistral", "mistralai.client", "mistral"),
    "bedrock": Instrumentor("bedrock", "boto3", "bedrock"),
    "langchain": Instrumentor("veronica_mw._framework_install:langchain", "langchain_core", "langchain"),
    "llamaindex": Instrumentor("veronica_mw._framework_install:llamaindex", "llama_index.core", "llamaindex"),
    "crewai": Instrumentor("veronica_mw._framework_install:crewai", "crewai", "crewai"),
    "ag2": Instrumentor("ag2", "autogen", "ag2", also=("ag2",)),
}


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """How instrumented provider SDK calls are reserved before they are sent (process-wide).

    ``max_output_tokens``: output tokens reserved for a request that sets no limit of its own
    (``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``). ``cost_estimate_hint``:
    a fixed reservation in USD per model request instead of its worst case from genai-prices
    (also what a request for a model genai-prices does not know costs).
    """

    max_output_tokens: int = 4096
    cost_estimate_hint: float | None = None
    fit_output: object = None  # a FitOutputToBudget for every context (instrument(fit_output=...))


settings = ProviderSettings()

logger = logging.getLogger("veronica_mw")
_lock = threading.RLock()  # RLock: a hook runs at once, under it, when its SDK is already imported
_active: dict[str, _Hook] = {}  # requested SDKs, in order; patched once imported


def installed(name: str) -> bool:
    """Whether the SDK behind ``name`` can be imported (without importing it)."""
    for sdk in INSTRUMENTORS[name].sdks():
        try:
            if importlib.util.find_spec(sdk) is not None:
                return True
        except (ImportError, ValueError):  # a parent package missing, or a broken sys.modules entry
            continue
    return False


def instrument(
    *names: str,
    max_output_tokens: int | None = None,
    cost_estimate_hint: float | None = None,
    fit_output: object = None,
) -> tuple[str, ...]:
    """Instrument the named SDKs and frameworks (default: every known one that is installed); return
    the names instrumented by this call or earlier. Idempotent; :func:`uninstrument` undoes everything.

    Names: the provider SDKs ``openai``, ``anthropic``, ``litellm``, ``google-genai``, ``groq``,
    ``mistral``, ``bedrock`` (boto3), the ``mcp`` client, and the frameworks ``pydantic-ai``,
    ``openai-agents``, ``langchain`` (LangGraph too), ``llamaindex``, ``crewai`` and ``ag2`` (0.14
    and 1.x), whose adapters are installed process-wide, bound to the execution context current at each call.

    Without names, an SDK the program has not imported yet is patched right after it is imported,
    so building a middleware never imports an SDK; a name given explicitly is imported and patched
    at once (and its adapter's errors are raised).

    ``max_output_tokens`` and ``cost_estimate_hint``, when given, replace the process-wide
    :class:`ProviderSettings` (see there); omitted, the current ones stay. ``fit_output``: True
    (or a :class:`~veronica_mw.FitOutputToBudget`) fits every model call's output to what is left
    of its context's budget; False turns it off.
    """
    global settings
    changes: dict[str, object] = {}
    if max_output_tokens is not None:
        changes["max_output_tokens"] = check_int("max_output_tokens", max_output_tokens)
    if cost_estimate_hint is not None:
        changes["cost_estimate_hint"] = check_number("cost_estimate_hint", cost_estimate_hint)
    if fit_output is not None:
        from .control.fit_output import FitOutputToBudget

        if fit_output is True:
            fit_output = FitOutputToBudget()
        elif fit_output is not False and not isinstance(fit_output, FitOutputToBudget):
            raise TypeError(f"fit_output must be a bool or a FitOutputToBudget, got {fit_output!r}")
        changes["fit_output"] = fit_output or None
    if changes:
        settings = replace(settings, **changes)  # type: ignore[arg-type]
    for name in names:
        if name not in INSTRUMENTORS:
            known = ", ".join(sorted(INSTRUMENTORS)) or "none"
            raise ValueError(f"unknown SDK {name!r} (known: {known})")
    wanted = names or tuple(name for name in INSTRUMENTORS if installed(name))
    with _lock:
        for name in wanted:
            if name in _active:
                continue
            entry = INSTRUMENTORS[name]
            if not installed(name):
                raise MissingFrameworkError(name, entry.extra, module=entry.target().partition(":")[0])
            hook = _Hook(name, strict=bool(names))
            _active[name] = hook
            if hook.strict:  # asked for by name: imported and patched now, errors raised here
                hook()
            else:  # the default set: now if the program imported the SDK already, else right after
                for sdk in entry.sdks():
                    _post_import.when_imported(sdk, hook)
        return tuple(_active)


class _Hook:
    """Imports the adapter of one SDK and patches it (once). Explicitly named SDKs raise adapter
    errors; the default set logs them (a middleware must not fail over an SDK it may not use)."""

    def __init__(self, name: str, strict: bool) -> None:
        self.name = name
        self.strict = strict
        self.adapter: Any = None  # the module (or object) with instrument() and uninstrument()

    def __call__(self) -> None:
        if self.adapter is not None:  # an SDK with two import names, both imported
            return
        module, _, attr = INSTRUMENTORS[self.name].target().partition(":")
        try:
            adapter: Any = importlib.import_module(module)
            if attr:
                adapter = getattr(adapter, attr)
            adapter.instrument()
        except Exception:
            if self.strict:
                with _lock:
                    _active.pop(self.name, None)
                raise
            logger.exception("veronica_mw: could not instrument %s; its calls are not contained", self.name)
            return
        self.adapter = adapter


def uninstrument() -> None:
    """Restore every SDK patched by :func:`instrument` (and forget those not imported yet)."""
    with _lock:
        while _active:
            _, hook = _active.popitem()
            _post_import.cancel(hook)
            if hook.adapter is not None:
                hook.adapter.uninstrument()


def instrumented() -> tuple[str, ...]:
    return tuple(_active)
