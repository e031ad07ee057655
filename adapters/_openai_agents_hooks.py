"""``VeronicaRunHooks``: one kernel step per Agents SDK model call and local tool call.

Kept apart from :mod:`veronica_mw.adapters.openai_agents` (which imports it after the gated
framework import) so that module holds only the public surface and ``instrument()``.
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, ModelResponse, RunContextWrapper, RunHooks, Tool, TResponseInputItem

from .. import (
    CallNode,
    ContextBinding,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    ToolCallRejected,
    WrapOptions,
)
from . import _openai_agents_mcp
from ._openai_agents_calls import (
    AgentsToolCallRejected,
    Call,
    OpenCalls,
    agents_halt,
    current_run,
    settle_orphans,
    token_usage,
)
from ._openai_agents_mcp import tool_key

__all__ = ["VeronicaRunHooks", "model_and_provider"]

# Model-name prefixes of the SDK's routing providers: the rest is "<provider>/<model>".
_ROUTERS = ("litellm/", "any-llm/")


def _default_model() -> str | None:
    try:
        from agents.models.default_models import get_default_model
    except ImportError:  # API drift: an unnamed model is then simply not priced
        return None
    name = get_default_model()
    return name if isinstance(name, str) else None


def model_and_provider(model: Any) -> tuple[str | None, str | None]:
    """(model, provider) to price a call with, from an agent's or a RunConfig's ``model``: a name
    (``"gpt-4o"``, ``"openai/gpt-4o"``, ``"litellm/anthropic/claude-..."``), a ``Model`` that names
    its model (the SDK's OpenAI and LiteLLM models do), or None for the SDK's default model."""
    if model is None:
        model = _default_model()
    if not isinstance(model, str):
        model = getattr(model, "model", None)
    if not isinstance(model, str) or not model:
        return None, None
    for prefix in _ROUTERS:
        if model.startswith(prefix):
            model = model[len(prefix) :]
            break
    provider, slash, name = model.partition("/")
    if slash and provider and name:
        return name, provider
    return model, None


def _arguments(context: Any) -> Any:
    """A function tool call's arguments as an approver sees them (a dict when they are JSON)."""
    raw = getattr(context, "tool_arguments", None)
    if not isinstance(raw, str):
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _answers(response: Any) -> bool:
    """Whether a model response carries a message (text an output check can judge)."""
    return any(getattr(item, "type", None) == "message" for item in getattr(response, "output", ()) or ())


class VeronicaRunHooks(RunHooks[Any]):
    """Contain Agents SDK runs: pass as ``Runner.run(agent, input, hooks=VeronicaRunHooks())``
    (``run_sync`` and ``run_streamed`` alike).

    Every model call (``on_llm_start``) and every local tool call (``on_tool_start``: function
    tools, MCP server tools, agents used as tools, shell/computer/apply-patch tools) is one step,
    begun before it runs: at a limit the hook raises :class:`AgentsExecutionHalted` (an
    ``ExecutionHalted``), the call never runs and the caller of ``Runner.run`` receives the halt.
    A model call is committed with its ``ModelResponse.usage``, priced with genai-prices for the
    agent's model name; handoffs stay in the same run, so the next agent's calls count in the
    same context. Hosted tools (web search, file search, code interpreter, hosted MCP) run inside
    the model call on OpenAI's side and are paid through it.

    Binding, at each call: the explicit ``context``; else the current one (request middleware,
    an entered ``ExecutionContext``); else one context owned by these hooks, built from
    ``config`` (shared by every run they serve; :meth:`reset` starts a new one); else the call
    runs uncontained. ``cost_estimate_hint`` (USD) is reserved before each model call, so
    concurrent calls cannot jointly overshoot ``max_cost_usd``, and kept as its cost when the
    model reports no usage. One instance may serve any number of runs, also concurrently.
    """

    def __init__(
        self,
        context: ExecutionContext | None = None,
        *,
        config: ExecutionConfig | None = None,
        on_limit: Any = None,
        cost_estimate_hint: float = 0.0,
    ) -> None:
        super().__init__()
        self.binding = ContextBinding(context, config, on_limit)
        # Validated now rather than at the first call.
        self.cost_estimate_hint = WrapOptions(cost_estimate_hint=cost_estimate_hint).cost_estimate_hint
        self._open = OpenCalls()
        # Now, before any run lists its MCP tools (their bodies bind invoke_mcp_tool then).
        _openai_agents_mcp.install(pin=True)

    @property
    def context(self) -> ExecutionContext | None:
        """The context a call made here and now would be counted in (None: uncontained)."""
        return self.binding.resolve()

    @property
    def owned_context(self) -> ExecutionContext | None:
        """The context these hooks built from ``config`` (None until first needed)."""
        return self.binding.owned_context

    def reset(self) -> None:
        """Start a fresh owned context (from ``config``) for the next run."""
        self.binding.reset_owned()

    async def _begin(
        self, kind: str, options: WrapOptions, key: Any, arguments: Any = None
    ) -> CallNode | None:
        settle_orphans()  # calls of runs that died with them open (cheap when there are none)
        ctx = self.binding.resolve()
        if ctx is None:
            return None
        try:
            # ``key``: another VeronicaRunHooks on the same run (user hooks that wrap ours, plus
            # the instrumented Runner's) gets this same node instead of counting the call twice.
            # The async form: a tool call an approval policy gates waits for its approver
            # without blocking the event loop.
            return await ctx.abegin_call(kind, options, key=key, arguments=arguments)
        except ExecutionHalted as halted:
            raise agents_halt(halted) from None
        except ToolCallRejected as rejected:  # the SDK would wrap it in UserError
            if isinstance(rejected, AgentsToolCallRejected):
                raise
            raise AgentsToolCallRejected(rejected.tool, rejected.message) from None

    # -- model calls --------------------------------------------------------------------------

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        stale = self._open.pop(context, "llm")
        if stale is not None:  # the previous model call of this run never reached on_llm_end
            stale.settle(None, False)
        scope = current_run.get()
        model, provider = model_and_provider(
            scope.model if scope is not None and scope.model else getattr(agent, "model", None)
        )
        options = WrapOptions(
            operation_name=f"openai_agents.llm:{getattr(agent, 'name', 'agent')}",
            cost_estimate_hint=self.cost_estimate_hint,
            model=model,
            provider=provider,
        )
        node = await self._begin("llm", options, ("openai_agents.llm", id(context)))
        if node is not None:
            self._open.add(context, Call("llm", node, None, getattr(context, "usage", None), scope))

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        call = self._open.pop(context, "llm")
        if call is None:
            return
        node = call.node
        usage = token_usage(getattr(response, "usage", None))
        cost = node.reserved_usd if usage is None else None  # nothing reported: the hint stands
        try:
            if _answers(response):
                # The result goes to the context's output checks, if it has any (and becomes
                # the partial result of a halt).
                node.commit(response, usage=usage, cost_usd=cost)
            else:  # only tool calls or handoffs: no answer to check
                node.commit(usage=usage, cost_usd=cost)
        except ExecutionHalted as halted:  # a check halted the run (verification_failed)
            raise agents_halt(halted) from halted.__cause__

    # -- tool calls ---------------------------------------------------------------------------

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        name = getattr(tool, "name", None) or type(tool).__name__
        # Function tools get a ToolContext of their own per call; the other local tool families
        # share the run's wrapper, so only the former can be told apart by key.
        key = tool_key(context)
        options = WrapOptions(operation_name=f"openai_agents.tool:{name}")
        node = await self._begin("tool", options, key, _arguments(context))
        if node is not None:
            self._open.add(context, Call("tool", node, tool, None, current_run.get()))

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        call = self._open.pop(context, "tool", tool)
        if call is not None:
            call.node.commit(result)

    # -- handoffs -----------------------------------------------------------------------------

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        # No step: the handoff is part of the model call that chose it, and the next agent's
        # calls are counted like any other. Recorded so the run's events show who took over.
        ctx = self.binding.resolve()
        if ctx is not None:
            source, target = getattr(from_agent, "name", "?"), getattr(to_agent, "name", "?")
            ctx.add_event("handoff", f"{source} -> {target}", source=source, target=target)
