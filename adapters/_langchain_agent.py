"""``VeronicaAgentMiddleware``: LangChain v1 agent middleware that runs model and tool calls as steps.

Imported lazily by :mod:`veronica_mw.adapters.langchain` (it needs ``langchain>=1``, not only
langchain-core). Each ``wrap_model_call``/``wrap_tool_call`` begins a step before calling the
handler and offers it (through :mod:`._langchain_claims`) to the LangChain run underneath, so the
callback handlers attached to that run (explicit or zero-config) commit the real usage into the
same step instead of counting a second one.

On HALT, ``exit_behavior="raise"`` raises :class:`~veronica_mw.ExecutionHalted` out of the agent;
``"end"`` answers for the model with an ``AIMessage`` without tool calls, so the agent ends with
the messages it has (the partial result), like LangChain's own ``exit_behavior="end"``.

Verification and control (see :mod:`._langchain_control`): an answer an output check rejects is
asked again with the check's feedback (bounded by the retry budget); a fallback model a policy
chose is swapped in; a tool call an approval policy gates waits for the approver (without blocking
the event loop in async agents) and runs with edited arguments, or answers with the rejection.
"""

from __future__ import annotations

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.messages import AIMessage, ToolMessage
except ImportError as _exc:
    from .. import MissingFrameworkError

    raise MissingFrameworkError("langchain>=1", "langchain", _exc) from None

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from langgraph.types import Command

from .. import (
    CallNode,
    ContextBinding,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    OutputRejected,
    ToolCallRejected,
    WrapOptions,
)
from ._langchain_claims import claimed
from ._langchain_control import (
    check_tool_arguments,
    edited_request,
    reask_request,
    rejected_tool_message,
    with_fallback,
)
from ._provider_estimate import OUTPUT_LIMITS, limit, reservation, text_tokens

if TYPE_CHECKING:
    # Only used in annotations; not exported by (or missing from) langchain 1.0.
    from langchain.agents.middleware import ExtendedModelResponse, ToolCallRequest

    _Base = AgentMiddleware[AgentState[Any], Any, Any]
else:
    _Base = AgentMiddleware  # langchain 1.0 takes two type parameters, later releases three

__all__ = ["VeronicaAgentMiddleware"]

ModelResult: TypeAlias = "ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]"
ToolResult: TypeAlias = "ToolMessage | Command[Any]"


def _message_of(response: Any) -> Any:
    """The AIMessage a model handler produced (it carries usage and model name)."""
    response = getattr(response, "model_response", response)  # ExtendedModelResponse
    if isinstance(response, ModelResponse):
        for message in reversed(response.result):
            if isinstance(message, AIMessage):
                return message
        return None
    return response


def _halt_text(halt: ExecutionHalted) -> str:
    return f"Run stopped by veronica-mw: {halt.reason}" + (f" ({halt.detail})" if halt.detail else "")


class VeronicaAgentMiddleware(_Base):
    """Bound every model and tool call of a ``create_agent(...)`` agent through the kernel.

    Binding as for every adapter: ``context``, else the current context, else one owned context
    built from ``config``, else uncontained. ``exit_behavior``: ``"raise"`` (default) raises
    :class:`~veronica_mw.ExecutionHalted`; ``"end"`` ends the agent with the messages so far plus an
    ``AIMessage`` naming the halt (its ``response_metadata["veronica_mw"]`` has reason and detail).
    """

    def __init__(
        self,
        context: ExecutionContext | None = None,
        *,
        config: ExecutionConfig | None = None,
        on_limit: Any = None,
        exit_behavior: Literal["raise", "end"] = "raise",
        cost_estimate_hint: float | None = None,
    ) -> None:
        super().__init__()
        if exit_behavior not in ("raise", "end"):
            raise ValueError(f"exit_behavior must be 'raise' or 'end', got {exit_behavior!r}")
        self._binding = ContextBinding(context, config, on_limit)
        self.exit_behavior = exit_behavior
        # None: each model call reserves its worst case (the provider layer's estimator).
        self._hint = (
            None
            if cost_estimate_hint is None
            else WrapOptions(cost_estimate_hint=cost_estimate_hint).cost_estimate_hint
        )

    @property
    def owned_context(self) -> ExecutionContext | None:
        """The context this middleware built from ``config`` (None until first needed)."""
        return self._binding.owned_context

    # -- shared steps -------------------------------------------------------------------------------

    def _model_options(self, ctx: ExecutionContext, request: ModelRequest[Any]) -> WrapOptions:
        model = getattr(request.model, "model_name", None) or getattr(request.model, "model", None)
        model = model if isinstance(model, str) and model else None
        hint = self._hint
        if hint is None:  # the worst case: prompt estimated, the model's max tokens or the default
            settings = {name: getattr(request.model, name, None) for name in OUTPUT_LIMITS}
            prompt = (
                getattr(request, "system_prompt", None),
                request.messages,
                getattr(request, "tools", None),
            )
            hint = reservation(
                ctx, model, None, text_tokens(prompt), limit(settings, *OUTPUT_LIMITS), "agent_model"
            )
        return WrapOptions(operation_name="agent_model", cost_estimate_hint=hint, model=model)

    def _model_halted(self, halt: ExecutionHalted) -> AIMessage:
        if self.exit_behavior == "raise":
            raise halt
        meta = {"veronica_mw": {"reason": halt.reason, "detail": halt.detail}}
        return AIMessage(content=_halt_text(halt), response_metadata=meta)

    def _tool_halted(self, halt: ExecutionHalted, request: ToolCallRequest) -> ToolMessage:
        if self.exit_behavior == "raise":
            raise halt
        # The model call that follows is refused too and ends the agent (see _model_halted).
        call = request.tool_call
        return ToolMessage(
            content=_halt_text(halt), name=call["name"], tool_call_id=call["id"], status="error"
        )

    @staticmethod
    def _settle_error(node: CallNode, exc: BaseException) -> None:
        if isinstance(exc, Exception):
            node.fail(exc)  # ExecutionHalted from inside is recorded as a halt, not a failure
        else:
            node.commit(cost_usd=node.reserved_usd)

    @staticmethod
    async def _asettle_error(node: CallNode, exc: BaseException) -> None:
        # Awaits an async budget parent; a coroutine being closed (GeneratorExit) cannot await.
        if isinstance(exc, Exception):
            await node.afail(exc)
        elif isinstance(exc, asyncio.CancelledError):
            await node.acommit(cost_usd=node.reserved_usd)
        else:
            node.commit(cost_usd=node.reserved_usd)

    @staticmethod
    def _commit_model(node: CallNode, response: ModelResult) -> None:
        # Usually a callback handler already committed the real usage; this is the fallback
        # when none is attached (auto instrumentation disabled).
        message = _message_of(response)
        if message is not None:
            node.commit(message)
        else:
            node.commit()

    @staticmethod
    async def _acommit_model(node: CallNode, response: ModelResult) -> None:
        message = _message_of(response)
        if message is not None:
            await node.acommit(message)  # async output checks (and an async parent) are awaited here
        else:
            await node.acommit()

    # -- model calls --------------------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResult:
        ctx = self._binding.resolve()
        if ctx is None:
            return handler(request)
        while True:  # re-asked after a rejected answer; the kernel bounds it by the retry budget
            try:
                node = ctx.begin_call("llm", self._model_options(ctx, request))
            except ExecutionHalted as halt:
                return self._model_halted(halt)
            try:
                with claimed(ctx, node):
                    response = handler(with_fallback(request, node))
                self._commit_model(node, response)
            except OutputRejected as rejected:
                request = reask_request(request, rejected)
                continue
            except ExecutionHalted as halt:
                node.fail(halt)
                return self._model_halted(halt)
            except BaseException as exc:
                self._settle_error(node, exc)
                raise
            return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResult:
        ctx = self._binding.resolve()
        if ctx is None:
            return await handler(request)
        while True:
            try:
                node = await ctx.abegin_call("llm", self._model_options(ctx, request))
            except ExecutionHalted as halt:
                return self._model_halted(halt)
            try:
                with claimed(ctx, node):
                    response = await handler(with_fallback(request, node))
                await self._acommit_model(node, response)
            except OutputRejected as rejected:
                request = reask_request(request, rejected)
                continue
            except ExecutionHalted as halt:
                await node.afail(halt)
                return self._model_halted(halt)
            except BaseException as exc:
                await self._asettle_error(node, exc)
                raise
            return response

    # -- tool calls ---------------------------------------------------------------------------------

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        ctx = self._binding.resolve()
        if ctx is None:
            return handler(request)
        call = request.tool_call
        try:
            node = ctx.begin_call(
                "tool",
                WrapOptions(operation_name=call["name"]),
                arguments=call["args"],
                editable=check_tool_arguments,
            )
        except ExecutionHalted as halt:
            return self._tool_halted(halt, request)
        except ToolCallRejected as rejected:
            return rejected_tool_message(request, rejected)
        try:
            with claimed(ctx, node):
                result = handler(edited_request(request, node))
        except ExecutionHalted as halt:
            node.fail(halt)
            return self._tool_halted(halt, request)
        except BaseException as exc:
            self._settle_error(node, exc)
            raise
        node.commit(result)
        return result

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolResult:
        ctx = self._binding.resolve()
        if ctx is None:
            return await handler(request)
        call = request.tool_call
        try:  # waits for an approver, when a policy gates this tool, without blocking the loop
            node = await ctx.abegin_call(
                "tool",
                WrapOptions(operation_name=call["name"]),
                arguments=call["args"],
                editable=check_tool_arguments,
            )
        except ExecutionHalted as halt:
            return self._tool_halted(halt, request)
        except ToolCallRejected as rejected:
            return rejected_tool_message(request, rejected)
        try:
            with claimed(ctx, node):
                result = await handler(edited_request(request, node))
        except ExecutionHalted as halt:
            await node.afail(halt)
            return self._tool_halted(halt, request)
        except BaseException as exc:
            await self._asettle_error(node, exc)
            raise
        await node.acommit(result)
        return result
