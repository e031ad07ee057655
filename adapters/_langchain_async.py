"""``VeronicaAsyncCallbackHandler``: the async twin of the callback handler, awaited inline.

LangChain runs a sync handler's methods in its thread-pool executor for async runs (one hop per
event) and a non-inline async handler's coroutines as Tasks through ``asyncio.gather`` (one Task
and one loop turn per event). This handler is ``run_inline``: LangChain awaits its coroutines
directly on the loop, before the model or tool runs and before the non-inline handlers; how the
two places where that would hurt the other handlers are handled is in :mod:`._langchain_inline`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.outputs import LLMResult

from .. import CallNode, ExecutionConfig, ExecutionContext
from ._langchain_claims import adopt
from ._langchain_handler import HandlerCore, llm_result
from ._langchain_inline import drain_siblings, inline_here

__all__ = ["VeronicaAsyncCallbackHandler"]

_running_loop = asyncio._get_running_loop  # the C accessor: no exception when there is none


class VeronicaAsyncCallbackHandler(HandlerCore, AsyncCallbackHandler):
    """Contain async LangChain runs (``ainvoke``, ``astream``, ``abatch``, LangGraph async graphs).

    Same binding, options and counting as :class:`VeronicaCallbackHandler`; a halt is raised from
    the awaited ``on_*_start`` (``raise_error``), so the model or tool is never called and
    :class:`~veronica_mw.ExecutionHalted` propagates unchanged. Steps are begun with the kernel's
    ``abegin_call``, so a tenant pool backed by Redis reserves without blocking the event loop.

    For async runs only: LangChain runs an async handler's coroutines of a *sync* run in a private
    loop in a thread and swallows their errors, so a halt could not stop a sync ``invoke``. Use
    :class:`VeronicaCallbackHandler` where sync runs happen too (both may be attached: one run is
    one step). Events LangChain dispatches synchronously inside an async run -- a chat model
    without native async runs ``_generate`` in a thread and reports its tokens from there -- are
    ignored (no event loop runs in that thread; the step was begun and is settled on the loop).
    """

    raise_error = True

    @property  # a class attribute in LangChain, read at each dispatch
    def run_inline(self) -> bool:  # type: ignore[override]
        return inline_here()

    def __init__(
        self,
        context: ExecutionContext | None = None,
        *,
        config: ExecutionConfig | None = None,
        cost_estimate_hint: float | None = None,
        on_limit: Any = None,
    ) -> None:
        super().__init__()
        self._setup(context, config, cost_estimate_hint, on_limit)

    @property
    def ignore_chain(self) -> bool:
        return True

    @property
    def ignore_retriever(self) -> bool:
        return True

    @property
    def ignore_retry(self) -> bool:
        return True

    @property
    def ignore_custom_event(self) -> bool:
        return True

    @property
    def ignore_llm(self) -> bool:
        return _running_loop() is None

    @property
    def ignore_chat_model(self) -> bool:
        return _running_loop() is None

    @property
    def ignore_agent(self) -> bool:  # tool events are filtered by this flag
        return _running_loop() is None

    async def _abegin(
        self,
        kind: str,
        run_id: UUID,
        serialized: Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        extra: Mapping[str, Any],
        arguments: Any = None,
    ) -> None:
        ctx = self._resolve()
        if ctx is None:
            return
        node = adopt(ctx, kind, run_id)
        if node is None:
            # Raises ExecutionHalted (or ToolCallRejected): the call never runs. A gated tool's
            # approval is awaited here without blocking the loop.
            options = self._options(kind, serialized, metadata, extra, ctx, arguments)
            node = await ctx.abegin_call(
                kind, options, key=run_id, arguments=arguments if kind == "tool" else None
            )
        self._open[run_id] = node

    async def _asettle(self, node: CallNode, response: LLMResult) -> None:
        message, usage, model = llm_result(response)
        if message is not None:
            await node.acommit(message, usage=usage, model=model)
        else:
            await node.acommit(usage=usage, model=model)

    async def _afail(self, run_id: UUID, error: BaseException) -> None:
        node = self._open.pop(run_id, None)
        if node is None:
            return
        if isinstance(error, Exception):
            await node.afail(error)
        else:  # cancelled mid-call: the reservation is kept as spent (see HandlerCore._fail)
            await node.acommit(cost_usd=node.reserved_usd)

    # -- model runs ---------------------------------------------------------------------------------

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            await self._abegin("llm", run_id, serialized, metadata, kwargs, messages)
        except Exception:
            # Inline and raising: the other handlers' start coroutines are still awaited, and the
            # steps of this batch's earlier message lists (never run, never ended) given back.
            for earlier in await drain_siblings(sys._getframe()):
                node = self._open.pop(earlier, None)
                if node is not None:
                    await node.arelease()
            raise

    async def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        await self._abegin("llm", run_id, serialized, metadata, kwargs, prompts)

    async def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        node = self._open.pop(run_id, None)
        if node is not None:
            await self._asettle(node, response)

    async def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        await self._afail(run_id, error)

    # -- tool runs ----------------------------------------------------------------------------------

    async def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        arguments = inputs if inputs is not None else input_str
        await self._abegin("tool", run_id, serialized, metadata, kwargs, arguments)

    async def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        node = self._open.pop(run_id, None)
        if node is not None:
            await node.acommit(output)

    async def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        await self._afail(run_id, error)
