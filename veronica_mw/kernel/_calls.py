"""The one-call forms of the kernel API: ``wrap_*`` (return a Decision), ``call_*`` (return the
result or raise ExecutionHalted) and their coroutine versions. All of them are thin shells around
``_begin`` (``_abegin``) and one settle of the node, so sync and async paths cannot drift apart;
the coroutine forms await a budget parent that has ``areserve``/``asettle``. A plain context (no
policies, breaker, parent, checks or observers) runs them inline, without a node object per call
(:mod:`veronica_mw.kernel._inline`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from . import observer as _obs
from ._io import call_request, response_text
from ._verdicts import ToolCall
from .config import DEFAULT_OPTIONS, WrapOptions
from .context import current_node
from .exceptions import ExecutionHalted
from .reasons import Decision

if TYPE_CHECKING:
    from .graph import CallNode

T = TypeVar("T")
_NO_KWARGS: dict[str, Any] = {}  # never mutated: ``fn(**{})``


class CallAPI:
    """Mixin of :class:`~veronica_mw.ExecutionContext`; see that class for the state it uses."""

    __slots__ = ()

    if TYPE_CHECKING:
        _aparent: Any
        _plain: bool  # no pipeline, breaker, parent, checks or own observers: see _inline

        def _inline(
            self,
            kind: str,
            fn: Callable[..., Any],
            args: Any,
            kwargs: Any,
            options: WrapOptions,
            decision: bool,
        ) -> Any: ...
        async def _ainline(
            self,
            kind: str,
            fn: Callable[..., Any],
            args: Any,
            kwargs: Any,
            options: WrapOptions,
            decision: bool,
        ) -> Any: ...

        def _begin(
            self, kind: str, options: WrapOptions, key: Any, parent_id: int | None, inline: bool = False
        ) -> CallNode | None: ...
        async def _abegin(
            self, kind: str, options: WrapOptions, key: Any, parent_id: int | None, inline: bool = False
        ) -> CallNode | None: ...
        def _fail(self, node: CallNode, exc: BaseException | None) -> None: ...
        def _interrupt(self, node: CallNode, exc: BaseException | None = None) -> None: ...
        async def _afail(self, node: CallNode, exc: BaseException | None) -> None: ...
        async def _ainterrupt(self, node: CallNode, exc: BaseException) -> None: ...
        def halted_error(self) -> ExecutionHalted: ...
        def _approve(self, node: CallNode, arguments: Any, editable: Any) -> None: ...
        async def _aapprove(self, node: CallNode, arguments: Any, editable: Any) -> None: ...
        async def _agate(self, node: CallNode, arguments: Any, editable: Any) -> None: ...

    # -- Decision-returning forms ------------------------------------------------------------------

    def wrap_llm_call(self, fn: Callable[[], Any], options: WrapOptions | None = None) -> Decision:
        """Run ``fn`` as one LLM step if every limit allows it; its result becomes the partial result."""
        if self._plain and not _obs._global:
            return self._inline("llm", fn, (), _NO_KWARGS, options or DEFAULT_OPTIONS, True)  # type: ignore[no-any-return]
        return self._wrap("llm", fn, options)

    def wrap_tool_call(self, fn: Callable[[], Any], options: WrapOptions | None = None) -> Decision:
        if self._plain and not _obs._global:
            return self._inline("tool", fn, (), _NO_KWARGS, options or DEFAULT_OPTIONS, True)  # type: ignore[no-any-return]
        return self._wrap("tool", fn, options)

    async def awrap_llm_call(self, fn: Callable[[], Any], options: WrapOptions | None = None) -> Decision:
        """Like :meth:`wrap_llm_call`; ``fn`` may be async or return an awaitable, which is awaited."""
        if self._plain and not _obs._global:
            return await self._ainline("llm", fn, (), _NO_KWARGS, options or DEFAULT_OPTIONS, True)  # type: ignore[no-any-return]
        return await self._awrap("llm", fn, options)

    async def awrap_tool_call(self, fn: Callable[[], Any], options: WrapOptions | None = None) -> Decision:
        if self._plain and not _obs._global:
            return await self._ainline("tool", fn, (), _NO_KWARGS, options or DEFAULT_OPTIONS, True)  # type: ignore[no-any-return]
        return await self._awrap("tool", fn, options)

    # -- result-returning forms --------------------------------------------------------------------

    def call_llm(
        self, fn: Callable[..., T], *args: Any, options: WrapOptions | None = None, **kwargs: Any
    ) -> T:
        """Return ``fn(*args, **kwargs)`` run as one LLM step; raise ExecutionHalted on HALT."""
        if self._plain and not _obs._global:
            return self._inline("llm", fn, args, kwargs, options or DEFAULT_OPTIONS, False)  # type: ignore[no-any-return]
        return self._call("llm", fn, args, kwargs, options)  # type: ignore[no-any-return]

    def call_tool(
        self, fn: Callable[..., T], *args: Any, options: WrapOptions | None = None, **kwargs: Any
    ) -> T:
        if self._plain and not _obs._global:
            return self._inline("tool", fn, args, kwargs, options or DEFAULT_OPTIONS, False)  # type: ignore[no-any-return]
        return self._call("tool", fn, args, kwargs, options)  # type: ignore[no-any-return]

    async def acall_llm(
        self, fn: Callable[..., Any], *args: Any, options: WrapOptions | None = None, **kwargs: Any
    ) -> Any:
        if self._plain and not _obs._global:
            return await self._ainline("llm", fn, args, kwargs, options or DEFAULT_OPTIONS, False)
        return await self._acall("llm", fn, args, kwargs, options)

    async def acall_tool(
        self, fn: Callable[..., Any], *args: Any, options: WrapOptions | None = None, **kwargs: Any
    ) -> Any:
        if self._plain and not _obs._global:
            return await self._ainline("tool", fn, args, kwargs, options or DEFAULT_OPTIONS, False)
        return await self._acall("tool", fn, args, kwargs, options)

    # -- shared shells -----------------------------------------------------------------------------

    # A halt found while settling (a failed output check) is a HALT decision here, like any other;
    # OutputRejected propagates, so the caller's retry loop asks again.
    # ``node.io`` is None unless an observer keeps call bodies (the audit log's record_bodies):
    # then the LLM forms record what they were given and the response text.

    def _wrap(self, kind: str, fn: Callable[[], Any], options: WrapOptions | None) -> Decision:
        node = self._begin(kind, options or DEFAULT_OPTIONS, None, None, True)
        if node is None:
            return Decision.HALT
        try:
            if node._gates:
                self._approve(node, None, False)
            result = self._run(node, fn, (), {})
            if node.io is not None:
                node.record_io(response_text=response_text(result))
            return node.commit(result)
        except ExecutionHalted:
            return Decision.HALT

    async def _awrap(self, kind: str, fn: Callable[[], Any], options: WrapOptions | None) -> Decision:
        if self._aparent is None:  # nothing to await before the call: the sync admission, inline
            node = self._begin(kind, options or DEFAULT_OPTIONS, None, None, True)
        else:
            node = await self._abegin(kind, options or DEFAULT_OPTIONS, None, None, True)
        if node is None:
            return Decision.HALT
        try:
            if node._gates:
                await self._agate(node, None, False)
            result = await self._arun(node, fn, (), {})
            if node.io is not None:
                node.record_io(response_text=response_text(result))
            return await node.acommit(result)
        except ExecutionHalted:
            return Decision.HALT

    def _call(
        self, kind: str, fn: Callable[..., Any], args: Any, kwargs: Any, options: WrapOptions | None
    ) -> Any:
        node = self._begin(kind, options or DEFAULT_OPTIONS, None, None, True)
        if node is None:
            raise self.halted_error()
        if node._gates:
            call = ToolCall(fn, args, kwargs)
            self._approve(node, call.arguments, call.editable)
            if node.edited_arguments is not None:
                args, kwargs = call.rebuild(node.edited_arguments)
        if node.io is not None:
            node.io["request"] = call_request(args, kwargs, node.model)  # already a clean copy
        result = self._run(node, fn, args, kwargs)
        if node.io is not None:
            node.record_io(response_text=response_text(result))
        node.commit(result)
        return result

    async def _acall(
        self, kind: str, fn: Callable[..., Any], args: Any, kwargs: Any, options: WrapOptions | None
    ) -> Any:
        if self._aparent is None:
            node = self._begin(kind, options or DEFAULT_OPTIONS, None, None, True)
        else:
            node = await self._abegin(kind, options or DEFAULT_OPTIONS, None, None, True)
        if node is None:
            raise self.halted_error()
        if node._gates:
            call = ToolCall(fn, args, kwargs)
            await self._agate(node, call.arguments, call.editable)
            if node.edited_arguments is not None:
                args, kwargs = call.rebuild(node.edited_arguments)
        if node.io is not None:
            node.io["request"] = call_request(args, kwargs, node.model)  # already a clean copy
        result = await self._arun(node, fn, args, kwargs)
        if node.io is not None:
            node.record_io(response_text=response_text(result))
        await node.acommit(result)
        return result

    def _run(self, node: CallNode, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        token = current_node.set(node.node_id)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            self._fail(node, exc)
            raise
        except BaseException as exc:
            self._interrupt(node, exc)
            raise
        finally:
            current_node.reset(token)

    async def _arun(self, node: CallNode, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        token = current_node.set(node.node_id)
        try:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result
        except Exception as exc:
            await self._afail(node, exc)
            raise
        except BaseException as exc:
            await self._ainterrupt(node, exc)
            raise
        finally:
            current_node.reset(token)
