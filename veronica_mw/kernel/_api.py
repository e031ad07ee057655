"""CallAPI: what code calls on a context (``begin_call``, ``wrap_*``/``call_*``, their coroutine
versions, ``check``, ``cancel``, ``record_retry``) and what a node asks of it: thin shells around
admission, settlement and the verdicts."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from . import _admission, _calls, _lineage, _settle, _verdicts
from ._node import CallNode
from ._state import ContextState
from .config import DEFAULT_OPTIONS, WrapOptions
from .reasons import Decision, HaltReason

logger = logging.getLogger("veronica_mw")
T = TypeVar("T")
_NO_KWARGS: dict[str, Any] = {}  # never mutated: ``fn(**{})``


class CallAPI(ContextState):
    """The calls of an :class:`~veronica_mw.ExecutionContext` (its state: :class:`ContextState`)."""

    __slots__ = ()

    def check(self) -> None:
        """Raise :class:`ExecutionHalted` if this context (or an ancestor) has halted (takes no step)."""
        if self._halted_now():
            raise self.halted_error()

    def cancel(self, detail: str = "") -> None:
        """Halt with reason ``cancelled``; ``detail`` goes to the log."""
        if detail:
            logger.info("veronica_mw: context %s cancelled: %s", self.chain_id, detail)
        self._abort(HaltReason.CANCELLED, detail)

    def record_retry(self, exc: BaseException | None = None) -> bool:
        """Draw one retry from the chain-wide budget (every level's); False (and halt) when spent."""
        return _lineage.record_retry(self, exc)

    # -- the two-phase API -----------------------------------------------------------------------

    def begin_call(
        self,
        kind: str,
        options: WrapOptions | None = None,
        *,
        key: Hashable | None = None,
        parent_id: int | None = None,
        arguments: Any = None,
        editable: bool | Callable[[Any], Any] = False,
    ) -> CallNode:
        """Reserve one step (and the cost hint) for a call about to run, or raise ExecutionHalted.

        ``key`` identifies the call across several hooks that all see it (e.g. a LangChain run
        id): while a node with that key is open, the same node is returned and nothing is counted
        twice. A tool call that an approval policy gates waits here for the approver, who sees
        ``arguments``; pass ``editable=True`` when you run the tool with ``node.edited_arguments``
        if set (or a function raising TypeError/ValueError for edits that do not fit the tool). A
        rejection raises :class:`ExecutionHalted` (``policy_denied``) or
        :class:`~veronica_mw.ToolCallRejected` (answer the agent with its message). Async code
        uses :meth:`abegin_call`, which waits without blocking the event loop.
        """
        node = _admission.begin(self, kind, options or DEFAULT_OPTIONS, key, parent_id, False)
        if node is None:
            raise self.halted_error()
        if node._gates:
            _verdicts.approve(self, node, arguments, editable)
        return node

    async def abegin_call(
        self,
        kind: str,
        options: WrapOptions | None = None,
        *,
        key: Hashable | None = None,
        parent_id: int | None = None,
        arguments: Any = None,
        editable: bool | Callable[[Any], Any] = False,
    ) -> CallNode:
        """:meth:`begin_call` for async code: an approval and an async parent budget's ``areserve``
        are awaited (never blocking the loop); settle with ``acommit``/``afail``/``arelease``."""
        node = await _admission.abegin(self, kind, options or DEFAULT_OPTIONS, key, parent_id, False)
        if node is None:
            raise self.halted_error()
        if node._gates:
            await _verdicts.agate(self, node, arguments, editable)
        return node

    # -- the one-call forms (see _calls) ---------------------------------------------------------

    def wrap_llm_call(self, fn: Callable[[], Any], options: WrapOptions | None = None) -> Decision:
        """Run ``fn`` as one LLM step if every limit allows it; its result becomes the partial result."""
        return _calls.run(self, "llm", fn, (), _NO_KWARGS, options or DEFAULT_OPTIONS, True)  # type: ignore[no-any-return]

    def wrap_tool_call(self, fn: Callable[[], Any], options: WrapOptions | None = None) -> Decision:
        return _calls.run(self, "tool", fn, (), _NO_KWARGS, options or DEFAULT_OPTIONS, True)  # type: ignore[no-any-return]

    async def awrap_llm_call(self, fn: Callable[[], Any], options: WrapOptions | None = None) -> Decision:
        """Like :meth:`wrap_llm_call`; ``fn`` may be async or return an awaitable, which is awaited."""
        return await _calls.arun(self, "llm", fn, (), _NO_KWARGS, options or DEFAULT_OPTIONS, True)  # type: ignore[no-any-return]

    async def awrap_tool_call(self, fn: Callable[[], Any], options: WrapOptions | None = None) -> Decision:
        return await _calls.arun(self, "tool", fn, (), _NO_KWARGS, options or DEFAULT_OPTIONS, True)  # type: ignore[no-any-return]

    def call_llm(
        self, fn: Callable[..., T], *args: Any, options: WrapOptions | None = None, **kwargs: Any
    ) -> T:
        """Return ``fn(*args, **kwargs)`` run as one LLM step; raise ExecutionHalted on HALT."""
        return _calls.run(self, "llm", fn, args, kwargs, options or DEFAULT_OPTIONS, False)  # type: ignore[no-any-return]

    def call_tool(
        self, fn: Callable[..., T], *args: Any, options: WrapOptions | None = None, **kwargs: Any
    ) -> T:
        return _calls.run(self, "tool", fn, args, kwargs, options or DEFAULT_OPTIONS, False)  # type: ignore[no-any-return]

    async def acall_llm(
        self, fn: Callable[..., Any], *args: Any, options: WrapOptions | None = None, **kwargs: Any
    ) -> Any:
        return await _calls.arun(self, "llm", fn, args, kwargs, options or DEFAULT_OPTIONS, False)

    async def acall_tool(
        self, fn: Callable[..., Any], *args: Any, options: WrapOptions | None = None, **kwargs: Any
    ) -> Any:
        return await _calls.arun(self, "tool", fn, args, kwargs, options or DEFAULT_OPTIONS, False)

    # -- what a node asks of its context (CallNode.commit, fail, ...) -----------------------------

    def _commit(
        self, node: CallNode, result: Any, cost_usd: float | None, usage: Any, model: str | None
    ) -> Decision:
        return _verdicts.commit(self, node, result, cost_usd, usage, model)

    async def _acommit(
        self, node: CallNode, result: Any, cost_usd: float | None, usage: Any, model: str | None
    ) -> Decision:
        return await _verdicts.acommit(self, node, result, cost_usd, usage, model)

    def _fail(self, node: CallNode, exc: BaseException | None) -> None:
        _settle.fail(self, node, exc)

    async def _afail(self, node: CallNode, exc: BaseException | None) -> None:
        await _settle.afail(self, node, exc)

    def _release(self, node: CallNode, status: str) -> None:
        _settle.close(self, node, status, 0.0, refund_step=True)

    async def _arelease(self, node: CallNode, status: str) -> None:
        await _settle.arelease(self, node, status)

    def _downgraded(self, node: CallNode, requested: str | None) -> None:
        _verdicts.downgraded(self, node, requested)

    def _add_reservation(self, node: CallNode, usd: float) -> None:
        _lineage.add_reservation(self, node, usd)
