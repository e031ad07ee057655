"""CrewAI adapter: bound every model and tool call of a crew by an :class:`~veronica_mw.ExecutionContext`.

``VeronicaCrewAIHooks`` registers CrewAI's ``before/after_llm_call`` and ``before/after_tool_call``
hooks (plus a check at each task start) and wraps ``call``/``acall`` of CrewAI's LLM classes for
the model calls no hook sees (the forced final answer at ``max_iter``, output conversion,
planning). Model and tool calls are both steps, each counted once, before it runs.

How a halt surfaces: ``kickoff``/``akickoff`` raise :class:`CrewExecutionHalted`, which *is* an
``ExecutionHalted`` (reason, snapshot, partial result) and also CrewAI's ``HookAborted``. That is
deliberate: CrewAI swallows any other exception raised in a hook, and retries a task on generic
errors, but lets ``HookAborted`` through untouched. A refused model call never runs. A refused
tool call is blocked by CrewAI, and the ``after_tool_call`` hook CrewAI then runs raises the
halt, so the whole crew stops (not only that tool call); later tasks never start.
"""

from __future__ import annotations

try:
    from crewai.hooks import (
        InterceptionPoint,
        LLMCallHookContext,
        ToolCallHookContext,
        register_after_llm_call_hook,
        register_after_tool_call_hook,
        register_before_llm_call_hook,
        register_before_tool_call_hook,
        register_hook,
        unregister_after_llm_call_hook,
        unregister_after_tool_call_hook,
        unregister_before_llm_call_hook,
        unregister_before_tool_call_hook,
        unregister_hook,
    )
except ImportError as exc:  # crewai missing, or older than 1.15.3 (no hook dispatcher / HookAborted)
    from .. import MissingFrameworkError

    missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").partition(".")[0] == "crewai"
    raise MissingFrameworkError("crewai" if missing else "crewai>=1.15.3", "crewai", exc) from exc

from collections.abc import Callable
from types import TracebackType
from typing import Any

from .. import ContextBinding, ExecutionConfig, ExecutionContext, ToolCallRejected, WrapOptions
from . import _crewai_calls as calls
from . import _crewai_mcp  # noqa: F401  (an MCP call inside a CrewAI tool joins its step)
from ._crewai_calls import CrewExecutionHalted
from ._crewai_llm import unwrap_all, wrap_all, wrap_llm

__all__ = ["CrewExecutionHalted", "VeronicaCrewAIHooks"]


# -- the hooks: module-level functions, registered once while any instance is installed, so an
#    executor's snapshot of the hook lists never holds a stale instance ---------------------------


def _role(agent: Any) -> str:
    role = getattr(agent, "role", None)
    return role if isinstance(role, str) and role else "agent"


def _before_llm(hc: LLMCallHookContext) -> None:
    current = calls.llm_call.get()
    if current is not None and current.state == "running":
        return  # a provider dispatching hooks inside a call the LLM wrapper already counted
    if current is not None and current.state == "pending":
        # Begun, but the model never ran (a hook after ours blocked it). With the class wrapped
        # that is certain and the step is given back; unwrapped we cannot tell, so it counts.
        if current.wrapped:
            current.release()
        else:
            current.commit(None)
    call = calls.begin(
        "llm", _role(hc.agent), hc.llm, prompt=hc.messages
    )  # raises CrewExecutionHalted at a limit
    if call is not None:
        call.wrapped = wrap_llm(hc.llm)
    calls.llm_call.set(call)


def _after_llm(hc: LLMCallHookContext) -> None:
    call = calls.llm_call.get()
    if call is not None and call.state == "running":
        return  # provider-level hooks inside a wrapped call: the wrapper settles it
    if call is not None and call.state == "pending":  # the LLM class could not be wrapped
        call.commit(hc.response)
    calls.llm_call.set(None)
    calls.raise_if_halted()


def _before_tool(tc: ToolCallHookContext) -> bool | None:
    stale = calls.tool_call.get()
    if stale is not None and stale.state == "pending":
        stale.commit(None)  # its after hook never ran (CrewAI raised between the two)
    calls.tool_call.set(None)
    calls.tool_rejection.set(None)
    # Raising here makes CrewAI block the tool; _after_tool, which CrewAI still runs, stops the crew.
    try:
        call = calls.begin("tool", tc.tool_name, arguments=dict(tc.tool_input))
    except ToolCallRejected as rejected:  # on_reject="message": blocked, answered in _after_tool
        calls.tool_rejection.set(f"Tool call rejected: {rejected.message}")
        return False
    edited = calls.edited_arguments(call)
    if edited is not None:  # an approver changed them: CrewAI runs the tool with this very dict
        tc.tool_input.clear()
        tc.tool_input.update(edited)
    calls.tool_call.set(call)
    return None


def _after_tool(tc: ToolCallHookContext) -> str | None:
    call = calls.tool_call.get()
    calls.tool_call.set(None)
    rejection = calls.tool_rejection.get()
    if rejection is not None:
        calls.tool_rejection.set(None)
        return rejection  # the agent reads why instead of CrewAI's "blocked by hook"
    if call is not None and call.state == "pending":
        call.commit(tc.tool_result)
    calls.raise_if_halted()
    return None


def _before_task(step: Any) -> None:
    """A halted context starts no further task; arm the agent's LLM classes and executor."""
    calls.raise_if_halted()
    agent = getattr(step, "agent", None)
    if agent is None or not calls.owners():
        return
    # ``function_calling_llm`` is read from the instance dict: the attribute warns it is deprecated.
    for llm in (getattr(agent, "llm", None), getattr(agent, "__dict__", {}).get("function_calling_llm")):
        if llm is not None:
            wrap_llm(llm)
    # An agent's executor copies the global LLM hook lists once, when built: one built before
    # install() would never call our hooks.
    executor = getattr(agent, "agent_executor", None)
    for field, hook in (("before_llm_call_hooks", _before_llm), ("after_llm_call_hooks", _after_llm)):
        hooks = getattr(executor, field, None)
        if isinstance(hooks, list) and hook not in hooks:
            hooks.append(hook)


_HOOKS: tuple[tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]], ...] = (
    (register_before_llm_call_hook, unregister_before_llm_call_hook, _before_llm),
    (register_after_llm_call_hook, unregister_after_llm_call_hook, _after_llm),
    (register_before_tool_call_hook, unregister_before_tool_call_hook, _before_tool),
    (register_after_tool_call_hook, unregister_after_tool_call_hook, _after_tool),
)


def _register(owner: VeronicaCrewAIHooks) -> None:
    with calls.lock:
        if owner in calls.installed:
            return
        if not calls.installed:
            for register, _, hook in _HOOKS:
                register(hook)
            register_hook(InterceptionPoint.PRE_STEP, _before_task)
            wrap_all()
        calls.installed.append(owner)


def _unregister(owner: VeronicaCrewAIHooks) -> None:
    with calls.lock:
        if owner not in calls.installed:
            return
        calls.installed.remove(owner)
        if calls.installed:
            return
        for _, unregister, hook in _HOOKS:
            unregister(hook)
        unregister_hook(InterceptionPoint.PRE_STEP, _before_task)
        unwrap_all()


class VeronicaCrewAIHooks:
    """Hard limits for CrewAI crews, through CrewAI's LLM and tool hooks.

    Binding, at each call: the explicit ``context``; else the current one (request middleware,
    an entered ``ExecutionContext``); else one context owned by this instance, built from
    ``config`` (shared by every crew it serves; :meth:`reset` starts a new one); else the call
    runs uncontained. ``with hooks:`` serves only the crews run inside the block (and the threads
    CrewAI starts for them); ``install()`` serves every crew that is not inside another
    instance's block, until ``uninstall()``. Before each model call its worst case is reserved
    (the prompt estimated, the LLM's ``max_tokens`` or the configured default out, priced for its
    model; a named unpriced model is refused, ``unpriced``, under a cost limit);
    ``llm_cost_hint``/``tool_cost_hint`` (USD) reserve that instead, kept as the cost when the
    model reports no usage.
    """

    def __init__(
        self,
        context: ExecutionContext | None = None,
        *,
        config: ExecutionConfig | None = None,
        on_limit: Any = None,
        llm_cost_hint: float | None = None,
        tool_cost_hint: float = 0.0,
    ) -> None:
        self.binding = ContextBinding(context, config, on_limit)
        # Validated now rather than at the first call. None: each model call's worst case.
        self.llm_cost_hint = (
            None
            if llm_cost_hint is None
            else WrapOptions(cost_estimate_hint=llm_cost_hint).cost_estimate_hint
        )
        self.tool_cost_hint = WrapOptions(cost_estimate_hint=tool_cost_hint).cost_estimate_hint
        self.serves_globally = False
        self._entries = 0

    @property
    def context(self) -> ExecutionContext | None:
        """The context a call made here and now would be counted in (None: uncontained)."""
        return self.binding.resolve()

    @property
    def installed(self) -> bool:
        return self in calls.installed

    def reset(self) -> None:
        """Start a fresh owned context (from ``config``) for the next run."""
        self.binding.reset_owned()

    def install(self) -> VeronicaCrewAIHooks:
        """Serve every crew outside another instance's ``with`` block, until :meth:`uninstall`."""
        with calls.lock:
            self.serves_globally = True
            _register(self)
        return self

    def uninstall(self) -> None:
        """Undo :meth:`install`. The last instance out removes the hooks and the LLM wrappers."""
        with calls.lock:
            self.serves_globally = False
            if self._entries == 0:
                _unregister(self)

    def __enter__(self) -> VeronicaCrewAIHooks:
        with calls.lock:
            self._entries += 1
            _register(self)
        calls.scope.set((self, calls.scope.get()))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        current = calls.scope.get()
        calls.scope.set(current[1] if current is not None else None)
        with calls.lock:
            self._entries -= 1
            if self._entries == 0 and not self.serves_globally:
                _unregister(self)
