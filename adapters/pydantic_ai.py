"""Pydantic AI adapter: every model request and tool execution is a kernel step, refused before it runs.

``Agent(..., capabilities=[VeronicaCapability()])`` puts the capability on one agent;
``veronica_mw.instrument("pydantic-ai")`` adds one to every run of an agent built without it (it
wraps ``Agent.iter``, which ``run``, ``run_sync``, ``run_stream``, ``run_stream_events`` and
``iter`` all go through; :func:`uninstrument` restores it). What the capability hooks, verified on
pydantic-ai-slim 2.x:

* ``get_wrapper_model`` (2.62+; before it ``wrap_model_request``): each attempt's model is wrapped,
  and each request it sends (streamed or not, a continuation segment) is one step, begun before it
  is sent and committed with the response's usage priced for the model that answered;
* ``wrap_tool_execute``: each tool execution is one step, begun after its arguments validated and
  before the tool function runs. A tool that raises ``ModelRetry`` failed: it draws one retry;
* ``wrap_tool_validate``, ``wrap_output_validate``, ``wrap_output_process``: tool arguments or
  output that fail validation, and output validators or functions raising ``ModelRetry``, make
  pydantic-ai ask the model again: ``before_model_request`` draws one retry each from
  ``max_retries_total`` when it does (and refuses that request once the budget is spent).

Output checks and approvals (``veronica_mw.control``): a model answer a check rejects is asked again
as a ``ModelRetry`` carrying the check's feedback; a tool call waits for the context's approval
gates before it runs, and a rejection meant for the agent is returned as the tool's result.

How a halt surfaces: the capability sits outermost, so the ExecutionHalted raised by a refused
request or tool call is outside every other hook; pydantic-ai neither retries it nor feeds it to
the model, and ``run``/``run_sync``/``run_stream``/``iter`` raise it unchanged. Should another
capability re-raise it as something else, ``on_run_error`` puts the halt back.
"""

from __future__ import annotations

try:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
    from pydantic_ai.capabilities.abstract import (
        RawOutput,
        RawToolArgs,
        ValidatedToolArgs,
        WrapModelRequestHandler,
        WrapOutputProcessHandler,
        WrapOutputValidateHandler,
        WrapToolExecuteHandler,
        WrapToolValidateHandler,
    )
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.models import Model, ModelRequestContext
except ImportError as exc:  # pydantic-ai missing, or a 1.x without the capabilities API
    from .. import MissingFrameworkError

    missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").partition(".")[0] == "pydantic_ai"
    framework = "pydantic-ai-slim" if missing else "pydantic-ai-slim>=2.0"
    raise MissingFrameworkError(framework, "pydantic-ai", exc, module=__name__) from exc

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import ContextBinding, ExecutionConfig, ExecutionContext, ToolCallRejected, WrapOptions
from ..web.problem import find_halt
from . import _pydantic_ai_instrument as _instrument
from ._pydantic_ai_model import VeronicaModel
from ._pydantic_ai_steps import RETRY_SIGNALS, begin_tool, draw_retry

if TYPE_CHECKING:
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.output import OutputContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import RunContext, ToolDefinition

__all__ = ["VeronicaCapability", "instrument", "uninstrument"]

# pydantic-ai 2.62 added ``get_wrapper_model``, called for every attempt at a request (a retry on
# another model included); before it, the one attempt of each request step is wrapped instead.
_WRAPS_EACH_ATTEMPT = hasattr(AbstractCapability, "get_wrapper_model")


@dataclass(init=False, eq=False, repr=False)
class VeronicaCapability(AbstractCapability[Any]):
    """Hard limits for a Pydantic AI agent: model requests and tool executions are steps.

    Binding, at each call: the explicit ``context``; else the current one (request middleware, an
    entered ``ExecutionContext``); else one context owned by this capability, built from
    ``config`` and shared by every run it serves (:meth:`reset` starts a new one); else the call
    runs uncontained. Before each model request its worst case is reserved (the prompt estimated,
    ``max_tokens`` or the configured default out, priced for the model), so ``max_cost_usd`` stops
    the request that could cross it; the priced usage replaces it. ``cost_estimate_hint`` (USD)
    reserves that instead; without it, a model genai-prices cannot price is refused (``unpriced``)
    under a cost limit.
    """

    def __init__(
        self,
        context: ExecutionContext | None = None,
        *,
        config: ExecutionConfig | None = None,
        on_limit: Any = None,
        cost_estimate_hint: float | None = None,
    ) -> None:
        self.binding = ContextBinding(context, config, on_limit)
        self.cost_estimate_hint = (
            None
            if cost_estimate_hint is None
            else WrapOptions(cost_estimate_hint=cost_estimate_hint).cost_estimate_hint
        )
        # Failures pydantic-ai may answer by asking the model again; drawn from the retry budget
        # when it does (the next request step of the same run), not when a run_stream() ends on one.
        self._retries_due: list[BaseException] = []

    def __repr__(self) -> str:
        return f"VeronicaCapability(context={self.binding.explicit!r})"

    @property
    def context(self) -> ExecutionContext | None:
        """The context a call made here and now would be counted in (None: uncontained)."""
        return self.binding.resolve()

    @property
    def owned_context(self) -> ExecutionContext | None:
        """The context built from ``config``, once a call needed it."""
        return self.binding.owned_context

    def reset(self) -> None:
        """Start a fresh owned context (from ``config``) for the next run."""
        self.binding.reset_owned()

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live context: not part of an agent spec

    def get_ordering(self) -> CapabilityOrdering:
        # Outermost: a refusal raised here is outside every other capability's error hooks, and
        # the model wrapper sees the request before any wrapper that batches or reroutes it.
        return CapabilityOrdering(position="outermost")

    async def for_run(self, ctx: RunContext[Any]) -> VeronicaCapability:
        run = copy.copy(self)  # the same binding and hint, retries due kept per run
        run._retries_due = []
        return run

    # -- model requests ------------------------------------------------------------------------

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        due, self._retries_due = self._retries_due, []
        for failure in due:  # this request is the retry: refused here when the budget is spent
            draw_retry(self, failure)
        return request_context

    if _WRAPS_EACH_ATTEMPT:

        def get_wrapper_model(self, model: Model) -> Model | None:
            if isinstance(model, VeronicaModel) and model._owner is self:
                return None
            return VeronicaModel(model, self)

    else:  # pydantic-ai < 2.62: the request step's model is wrapped, for its one attempt

        async def wrap_model_request(
            self,
            ctx: RunContext[Any],
            *,
            request_context: ModelRequestContext,
            handler: WrapModelRequestHandler,
        ) -> ModelResponse:
            model = request_context.model
            if not (isinstance(model, VeronicaModel) and model._owner is self):
                request_context.model = VeronicaModel(model, self)
            return await handler(request_context)

    # -- tools -----------------------------------------------------------------------------------

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        try:  # raises ExecutionHalted at a limit or an approver's "no": the tool never runs
            step = await begin_tool(self, f"pydantic_ai.tool:{call.tool_name}", call, args)
        except ToolCallRejected as rejected:
            return rejected.message  # the approver's answer is the tool's result, for the model
        if step is None:
            return await handler(args)
        if step.node.edited_arguments is not None:  # an approver edited them
            args = step.node.edited_arguments
        with step.running():  # a tool raising ModelRetry failed: its step draws the retry itself
            result = await handler(args)
        step.node.commit(result)
        return result

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        try:
            return await handler(args)
        except RETRY_SIGNALS as exc:  # bad arguments: the model will be asked to call it again
            self._retries_due.append(exc)
            raise

    # -- output ----------------------------------------------------------------------------------

    async def wrap_output_validate(
        self,
        ctx: RunContext[Any],
        *,
        output_context: OutputContext,
        output: RawOutput,
        handler: WrapOutputValidateHandler,
    ) -> Any:
        try:
            return await handler(output)
        except RETRY_SIGNALS as exc:
            if not ctx.partial_output:  # a partial streamed output failing is no retry
                self._retries_due.append(exc)
            raise

    async def wrap_output_process(
        self,
        ctx: RunContext[Any],
        *,
        output_context: OutputContext,
        output: Any,
        handler: WrapOutputProcessHandler,
    ) -> Any:
        try:
            return await handler(output)
        except RETRY_SIGNALS as exc:  # an output validator or output function said ModelRetry
            if not ctx.partial_output:
                self._retries_due.append(exc)
            raise

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        halt = find_halt(error)
        if halt is not None and halt is not error:
            raise halt  # a halt some layer re-raised as another exception: the caller gets the halt
        raise error


def instrument() -> None:
    """Contain every agent run (agents built without ``VeronicaCapability`` too) in the current
    execution context. Idempotent; used by ``veronica_mw.instrument("pydantic-ai")``."""
    _instrument.patch(Agent, VeronicaCapability)


def uninstrument() -> None:
    """Undo :func:`instrument`."""
    _instrument.unpatch(Agent)
