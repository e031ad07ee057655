"""Why the async handler is ``run_inline``, and the two LangChain dispatch quirks it works around.

LangChain dispatches a non-inline async handler's events through ``asyncio.gather``: one Task and
one event-loop turn per event, ~15-20 us each -- more than the whole sync handler costs. An inline
handler is awaited directly (no Task), before the non-inline ones. Two places of
``AsyncCallbackManager`` treat inline handlers in a way that would hurt the *other* handlers:

* ``on_llm_start`` (text LLMs) sends the event to the inline handlers only when there is one, so the
  non-inline handlers would never see a text LLM start. Read from there, :func:`inline_here` says
  False: the handler joins the non-inline group, and inside that group's ``ahandle_event`` it is
  inline again (awaited first, before the others are even created, so a halt skips nothing that
  was started).
* ``on_chat_model_start`` creates every handler's coroutine first, then awaits the inline ones, then
  gathers the rest. When an inline handler raises, the coroutines not yet awaited would be dropped
  (never awaited, a RuntimeWarning each, the other handlers never told). :func:`drain_siblings`
  awaits them before the halt propagates -- exactly what they get when the handler is not inline:
  the start event -- and closes the ones of Veronica's own handlers (a later message list of the
  same batch would otherwise ask for a step of a run LangChain never ends). The steps already begun for the
  batch's earlier message lists are given back: LangChain calls no model of a batch whose start
  raised, and never ends those runs.

Both read LangChain's frames (the manager's method and its locals); tests in
``tests/adapters/langchain/test_async_handler.py`` fail if LangChain's structure changes. If a
frame is not where it is expected, the halt still propagates; only the quirk is back.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Coroutine
from types import CodeType, FrameType
from typing import Any

from langchain_core.callbacks import AsyncCallbackManager

from ._langchain_handler import HandlerCore

__all__ = ["drain_siblings", "inline_here"]


def _codes(code: CodeType) -> set[CodeType]:
    # A method's own code and its comprehensions' (3.11 runs a comprehension in a frame of its own).
    found = {code}
    for const in code.co_consts:
        if isinstance(const, CodeType):
            found |= _codes(const)
    return found


_LLM_START = frozenset(_codes(AsyncCallbackManager.on_llm_start.__code__))
_CHAT_START = AsyncCallbackManager.on_chat_model_start.__code__
_getframe = sys._getframe


def inline_here() -> bool:
    """``run_inline`` as read by the caller of the property (see the module docstring)."""
    return _getframe(2).f_code not in _LLM_START


def _manager_frame(frame: FrameType | None) -> FrameType | None:
    while frame is not None and frame.f_code is not _CHAT_START:
        frame = frame.f_back
    return frame


def _is_veronica(coro: Any) -> bool:
    handlers = coro.cr_frame.f_locals.get("handlers") or ()
    return any(isinstance(h, HandlerCore) for h in handlers)


async def drain_siblings(frame: FrameType | None) -> list[Any]:
    """Await the start coroutines ``on_chat_model_start`` created for the other handlers and did
    not await yet (``frame``: the raising handler's own frame); close Veronica's own. Returns the
    run ids of the batch (runs LangChain will never end once a start raised)."""
    manager = _manager_frame(frame)
    if manager is None:
        return []
    local = manager.f_locals
    inline: list[Coroutine[Any, Any, Any]] = []
    rest: list[Coroutine[Any, Any, Any]] = []
    for name, into in (("inline_tasks", inline), ("non_inline_tasks", rest)):
        for coro in local.get(name) or ():
            if not inspect.iscoroutine(coro) or inspect.getcoroutinestate(coro) != inspect.CORO_CREATED:
                continue
            if _is_veronica(coro):
                coro.close()
            else:
                into.append(coro)
    for coro in inline:  # in order, as LangChain would have
        try:
            await coro
        except Exception:  # noqa: S112 - the halt is what propagates; LangChain logged theirs
            continue
    if rest:
        await asyncio.gather(*rest, return_exceptions=True)
    return [getattr(run, "run_id", None) for run in local.get("managers") or ()]
