"""``instrument()`` for AG2 (``veronica_mw.instrument("ag2")``, in the default set): every agent contained.

AG2 has no process-wide hook registry, so one place per generation is wrapped, with an undo:

* 0.14 (``import autogen``): ``ConversableAgent.generate_reply`` and ``a_generate_reply``. An
  agent replying inside an execution context gets one shared :class:`VeronicaCapability` with no
  context of its own (it binds the one current when each reply starts; outside any context the
  agent runs uncontained), unless it has one already; given a capability explicitly afterwards,
  it swaps the shared one for it.
* 1.x (``import ag2``): ``Agent._drive_scope``, where a turn's middleware chain is built. A turn
  started inside an execution context gets a :class:`VeronicaMiddleware` innermost, unless the
  agent or the call already has one.

So a tool run is a step admitted before it runs, under ``veronica-mw run`` and ``instrument()``
alike, and a model call the adapter counts is the step its provider SDK request joins.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .. import get_current_execution_context

_lock = threading.Lock()
_undo: list[Callable[[], None]] = []


def _legacy() -> Callable[[], None]:
    from autogen import ConversableAgent  # type: ignore[import-not-found, unused-ignore]

    from ._ag2_legacy import VeronicaCapability
    from ._ag2_legacy_llm import MARK as _MARK

    shared = VeronicaCapability()
    shared.automatic = True
    given: weakref.WeakSet[Any] = weakref.WeakSet()
    guard = threading.Lock()

    def adopt(agent: Any) -> None:
        # At the agent's first reply inside a context, not in __init__: subclasses (GroupChatManager)
        # register their own reply functions after ConversableAgent.__init__ returns.
        if get_current_execution_context() is None or vars(agent).get(_MARK) is not None:
            return
        with guard:
            if vars(agent).get(_MARK) is None:
                shared.add_to_agent(agent)
                given.add(agent)

    originals = {
        name: ConversableAgent.__dict__[name] for name in _REPLIES if name in ConversableAgent.__dict__
    }
    for name, original in originals.items():
        setattr(ConversableAgent, name, _adopting(original, adopt))

    def undo() -> None:
        for name, original in originals.items():
            setattr(ConversableAgent, name, original)
        for agent in list(given):
            shared.remove_from_agent(agent)

    return undo


_REPLIES = ("generate_reply", "a_generate_reply")


def _adopting(original: Callable[..., Any], adopt: Callable[[Any], None]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def areply(self: Any, *args: Any, **kwargs: Any) -> Any:
            adopt(self)
            return await original(self, *args, **kwargs)

        return areply

    @functools.wraps(original)
    def reply(self: Any, *args: Any, **kwargs: Any) -> Any:
        adopt(self)
        return original(self, *args, **kwargs)

    return reply


def _v1() -> Callable[[], None]:
    from ag2 import Agent  # type: ignore[import-not-found, unused-ignore]

    from ._ag2_v1 import VeronicaMiddleware

    shared = VeronicaMiddleware()
    original = Agent.__dict__.get("_drive_scope")
    if not callable(original):  # API drift: agents are then contained at the provider layer only
        return lambda: None

    def ours(factories: Any) -> bool:
        return any(isinstance(factory, VeronicaMiddleware) for factory in factories)

    @functools.wraps(original)
    def _drive_scope(self: Any, *args: Any, additional_middleware: Any = (), **kwargs: Any) -> Any:
        extra = tuple(additional_middleware)
        if get_current_execution_context() is not None and not (
            ours(getattr(self, "_middleware", ())) or ours(extra)
        ):
            extra = (*extra, shared)  # last: innermost, so each model attempt is a step
        return original(self, *args, additional_middleware=extra, **kwargs)

    setattr(Agent, "_drive_scope", _drive_scope)  # noqa: B010

    def undo() -> None:
        setattr(Agent, "_drive_scope", original)  # noqa: B010

    return undo


def instrument(generation: str) -> None:
    """Contain every agent of the installed AG2 generation (idempotent)."""
    with _lock:
        if not _undo:
            _undo.append(_legacy() if generation == "0.14" else _v1())


def uninstrument() -> None:
    """Restore AG2 (idempotent); agents given the shared capability lose it again."""
    with _lock:
        while _undo:
            _undo.pop()()


def instrumented() -> bool:
    return bool(_undo)
