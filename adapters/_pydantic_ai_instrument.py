"""``instrument()`` for Pydantic AI: a capability for every run of an agent built without one.

``Agent.iter`` is the one entry every way of running an agent goes through (``run``, ``run_sync``,
``run_stream``, ``run_stream_events`` and wrapper agents all call it), and it takes run-level
``capabilities``. The patch adds one shared capability there, bound to whatever execution
context is current when each call starts (outside any context it does nothing), unless the agent
or the run already carries a ``VeronicaCapability``, so nothing is counted twice. Agents under a
durable-execution engine are left alone: those engines refuse capabilities added per run.
Imported only after the framework gate of :mod:`veronica_mw.adapters.pydantic_ai`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

from pydantic_ai.capabilities import AbstractCapability

_MARK = "__veronica_pydantic_ai__"
_lock = threading.Lock()
_patched: dict[type, tuple[Any, Any]] = {}  # Agent class -> (original iter, our wrapper)


def _contained(agent: Any, run_capabilities: Iterable[Any] | None, capability_cls: type) -> bool:
    """Whether the run needs no added capability: one is there already, or a durable engine is."""
    leaves: list[Any] = []
    for capability in (getattr(agent, "root_capability", None), *(run_capabilities or ())):
        if isinstance(capability, AbstractCapability):
            capability.apply(leaves.append)  # every leaf of a combined or wrapper capability
    return any(
        isinstance(leaf, capability_cls) or getattr(leaf, "_one_per_agent", None) is not None
        for leaf in leaves
    )


def patch(agent_cls: type, capability_cls: Callable[[], Any]) -> None:
    with _lock:
        if agent_cls in _patched:
            return
        original = agent_cls.__dict__["iter"]
        auto = capability_cls()  # no context, no config: binds to the current context per call

        @functools.wraps(original)
        def iter(self: Any, *args: Any, **kwargs: Any) -> Any:
            extra = kwargs.get("capabilities")
            active = _patched.get(agent_cls, (None, None))[1] is iter  # inert once unpatched
            if active and not _contained(self, extra, type(auto)):
                kwargs["capabilities"] = [*(extra or ()), auto]
            return original(self, *args, **kwargs)

        setattr(iter, _MARK, True)
        agent_cls.iter = iter  # type: ignore[attr-defined]
        _patched[agent_cls] = (original, iter)


def unpatch(agent_cls: type) -> None:
    with _lock:
        entry = _patched.pop(agent_cls, None)
        if entry is None:
            return
        original, wrapper = entry
        if agent_cls.__dict__.get("iter") is wrapper:  # else patched again on top: ours stays, inert
            agent_cls.iter = original  # type: ignore[attr-defined]
