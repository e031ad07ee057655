"""Which installed ``VeronicaCrewAIHooks`` own a CrewAI call, and that call's kernel nodes.

CrewAI's hooks are process-wide, so every installed instance sees every crew's calls. The owner
is decided per call: inside ``with hooks:`` (a ContextVar, which CrewAI copies into the threads
and tasks it starts) only that instance; elsewhere each instance installed with ``install()``.
Each owner resolves its context with the usual binding rule. Whatever the owners, a call made
inside a current ``ExecutionContext`` while any instance is active also counts there: a ``with``
block in one thread must not leave crews that other threads run in their own contexts
uncounted. A call is begun once per context that is not already covered by another (a child's
call counts in its ancestors anyway). Imported only by :mod:`veronica_mw.adapters.crewai`, after
its framework gate.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from typing import Any, Protocol

from crewai.hooks import HookAborted

from .. import (
    CallNode,
    ContextBinding,
    ExecutionContext,
    ExecutionHalted,
    TokenUsage,
    ToolCallRejected,
    WrapOptions,
    get_current_execution_context,
)
from ._provider_estimate import OUTPUT_LIMITS, limit, reservation, text_tokens


class CrewExecutionHalted(ExecutionHalted, HookAborted):
    """The halt as CrewAI sees it: an ``ExecutionHalted`` that is also CrewAI's ``HookAborted``,
    the one exception CrewAI lets out of a hook, never retries, and re-raises out of ``kickoff``."""

    def __init__(
        self, reason: str, snapshot: Any = None, partial_result: Any = None, detail: str = ""
    ) -> None:
        ExecutionHalted.__init__(self, reason, snapshot, partial_result, detail)
        self.source: Any = None  # HookAborted's field; CrewAI fills in the hook


def crew_halt(halted: ExecutionHalted) -> CrewExecutionHalted:
    return CrewExecutionHalted(halted.reason, halted.snapshot, halted.partial_result, halted.detail)


class Owner(Protocol):
    binding: ContextBinding
    serves_globally: bool
    llm_cost_hint: float | None  # None: the worst case of each model call
    tool_cost_hint: float


lock = threading.RLock()
installed: list[Owner] = []
# (owner, previous value) while inside ``with hooks:`` -- a chain rather than reset tokens, so
# one instance can be entered concurrently from several threads and tasks.
scope: ContextVar[tuple[Owner, Any] | None] = ContextVar("veronica_crewai_scope", default=None)


def _counts_in(ctx: ExecutionContext, other: ExecutionContext) -> bool:
    """A call counted in ``ctx`` is also counted in ``other`` (``ctx`` itself or an ancestor)."""
    level: ExecutionContext | None = ctx
    while level is not None:
        if level is other:
            return True
        level = level.parent
    return False


def _add(found: list[tuple[Owner, ExecutionContext]], owner: Owner, ctx: ExecutionContext) -> None:
    if any(_counts_in(seen, ctx) for _, seen in found):
        return  # already counted there, through this very context or a child of it
    found[:] = [(o, seen) for o, seen in found if not _counts_in(ctx, seen)]  # ctx covers them
    found.append((owner, ctx))


def owners() -> list[tuple[Owner, ExecutionContext]]:
    current = scope.get()
    active = list(installed)
    if not active:
        return []
    if current is not None and current[0] in active:
        candidates = [current[0]]
    else:
        candidates = [owner for owner in active if owner.serves_globally]
    found: list[tuple[Owner, ExecutionContext]] = []
    for owner in candidates:
        ctx = owner.binding.resolve()
        if ctx is not None:
            _add(found, owner, ctx)
    here = get_current_execution_context()
    if here is not None:
        # The crew runs inside a context: it is counted there, whichever instance is active (its
        # cost hints: this block's instance, else the first one installed).
        _add(found, candidates[0] if candidates else active[0], here)
    return found


def raise_if_halted() -> None:
    """Stop the crew (as CrewExecutionHalted) if a context owning this flow has halted."""
    for _, ctx in owners():
        if ctx.aborted:
            raise crew_halt(ctx.halted_error())


class Call:
    """The kernel nodes of one model or tool call, one per owning context.

    ``state``: ``pending`` (begun by a before hook), ``running`` (inside the LLM wrapper),
    ``done`` (settled). ``wrapped``: the LLM class is wrapped, so a pending call that never
    became running provably never ran.
    """

    __slots__ = ("nodes", "state", "wrapped")

    def __init__(self, nodes: list[CallNode]) -> None:
        self.nodes = nodes
        self.state = "pending"
        self.wrapped = False

    def commit(self, result: Any, usage: TokenUsage | None = None) -> None:
        self.state = "done"
        for node in self.nodes:
            node.commit(result, usage=usage)

    def fail(self, exc: BaseException) -> None:
        self.state = "done"
        for node in self.nodes:
            node.fail(exc)

    def release(self) -> None:
        self.state = "done"
        for node in self.nodes:
            node.release()


def _options(owner: Owner, kind: str, name: str, llm: Any, ctx: ExecutionContext, prompt: Any) -> WrapOptions:
    model = getattr(llm, "model", None) if llm is not None else None
    provider = None
    if isinstance(model, str) and "/" in model:  # LiteLLM style "openai/gpt-4o": provider + model
        provider, model = model.split("/", 1)
    model = model if isinstance(model, str) and model else None
    operation = f"crewai.{kind}:{name}"
    hint = owner.llm_cost_hint if kind == "llm" else owner.tool_cost_hint
    if hint is None:  # a model call's worst case: the prompt estimated, the LLM's max_tokens or the default
        limits = {field: getattr(llm, field, None) for field in OUTPUT_LIMITS}
        hint = reservation(
            ctx, model, provider, text_tokens(prompt), limit(limits, *OUTPUT_LIMITS), operation
        )
    return WrapOptions(operation_name=operation, cost_estimate_hint=hint, model=model, provider=provider)


def _dict_arguments(edited: Any) -> None:
    if not isinstance(edited, dict):
        raise TypeError(f"tool arguments must be a dict, got {type(edited).__name__}")


def begin(kind: str, name: str, llm: Any = None, arguments: Any = None, prompt: Any = None) -> Call | None:
    """Begin the call in every owning context (None: uncontained); on a halt, give back what was
    begun and raise :class:`CrewExecutionHalted`, so the call does not run. A tool call an
    approval policy gates waits here; a rejection that answers the agent raises ToolCallRejected."""
    found = owners()
    if not found:
        return None
    nodes: list[CallNode] = []
    editable = _dict_arguments if kind == "tool" else False
    for owner, ctx in found:
        try:
            nodes.append(
                ctx.begin_call(
                    kind,
                    _options(owner, kind, name, llm, ctx, prompt),
                    arguments=arguments,
                    editable=editable,
                )
            )
        except (ExecutionHalted, ToolCallRejected) as refused:
            for node in nodes:
                node.release()
            if isinstance(refused, ExecutionHalted):
                raise crew_halt(refused) from None
            raise
    return Call(nodes)


def edited_arguments(call: Call | None) -> dict[str, Any] | None:
    """The arguments an approver edited for this tool call, if any."""
    for node in call.nodes if call is not None else ():
        if node.edited_arguments is not None:
            return dict(node.edited_arguments)
    return None


# The call in flight in this thread/task: hooks, LLM wrapper and tool run share one context there.
llm_call: ContextVar[Call | None] = ContextVar("veronica_crewai_llm_call", default=None)
tool_call: ContextVar[Call | None] = ContextVar("veronica_crewai_tool_call", default=None)
# The rejection message of a tool call the before hook blocked, for the after hook to answer with.
tool_rejection: ContextVar[str | None] = ContextVar("veronica_crewai_tool_rejection", default=None)
