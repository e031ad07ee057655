"""AG2 0.14 (``import autogen``): :class:`VeronicaCapability`.

Where each part hooks in, and why there:

* LLM step: begun by a ``safeguard_llm_inputs`` hook (on HALT it raises, so the model is not
  called), committed by ``safeguard_llm_outputs``: see :mod:`._ag2_legacy_llm`.
* Tool step: the agent's ``execute_function``/``a_execute_function`` are wrapped on the instance
  (see :mod:`._ag2_tools`); a refused call is never run.
* Stopping: the built-in reply functions (model and tool replies) are swapped, through
  ``replace_reply_func``, for wrappers that end the reply once the context has halted: raise
  :class:`~veronica_mw.ExecutionHalted` (``on_halt="raise"``), or return "no reply", which ends
  the conversation at once with the transcript so far (``on_halt="terminate"``). They also settle
  a model call that raised. A first reply function captures the context when the reply starts
  and refuses to reply once it has halted.
* Model calls outside replies (``summary_method="reflection_with_llm"``) go straight to the
  agent's private ``_generate_oai_reply_from_client``; it is wrapped too (when present), so they
  are steps as well. AG2 catches the halt there: the summary is empty, with a UserWarning.
* Binding: ``a_initiate_chat`` runs the model call in an executor thread, where the caller's
  ContextVar is gone; the context resolved at the start of each reply (in the caller's task) is
  kept per agent and used there.
"""

from __future__ import annotations

try:
    from autogen import Agent, ConversableAgent  # type: ignore[import-not-found, unused-ignore]
    from autogen.agentchat.contrib.capabilities.agent_capability import (  # type: ignore[import-not-found, unused-ignore]
        AgentCapability,
    )
except ImportError as _exc:
    from .. import MissingFrameworkError

    raise MissingFrameworkError("ag2>=0.14,<0.15 (import autogen)", "ag2", _exc) from None

import functools
import inspect
import threading
from typing import Any, Literal

from .. import ContextBinding, ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from .. import get_current_execution_context as _current
from ._ag2_legacy_llm import MARK as _MARK
from ._ag2_legacy_llm import AgentState as _AgentState
from ._ag2_legacy_llm import LlmSteps, ReplyFunc
from ._ag2_tools import async_executor, sync_executor

__all__ = ["VeronicaCapability"]

OnHalt = Literal["raise", "terminate"]
_REPLY_FUNCS = (
    "generate_oai_reply",
    "a_generate_oai_reply",
    "generate_tool_calls_reply",
    "a_generate_tool_calls_reply",
    "generate_function_call_reply",
    "a_generate_function_call_reply",
)
_SHADOWED = ("execute_function", "a_execute_function", "_generate_oai_reply_from_client")


class VeronicaCapability(LlmSteps, AgentCapability):  # type: ignore[misc, unused-ignore]
    """Contain AG2 0.14 ``ConversableAgent`` conversations: add it to every agent that calls a model
    or runs tools (one instance may serve several agents, which then share one budget).

    ``context``/``config`` follow :class:`~veronica_mw.ContextBinding`: the explicit context,
    else the current one when a reply starts, else one owned context built from ``config``; with
    none of these the agents run uncontained. ``on_halt="raise"`` lets ``initiate_chat`` /
    ``a_initiate_chat`` raise :class:`~veronica_mw.ExecutionHalted`; ``"terminate"`` makes the
    halting agent give no reply, so the chat returns its ``ChatResult`` with the partial transcript.
    ``cost_estimate_hint`` (USD) is reserved before each model call.
    """

    automatic = False  # True for the one ``instrument()`` gives every agent (explicit ones replace it)

    def __init__(
        self,
        context: ExecutionContext | None = None,
        *,
        config: ExecutionConfig | None = None,
        on_halt: OnHalt = "raise",
        cost_estimate_hint: float = 0.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call, unused-ignore]
        if on_halt not in ("raise", "terminate"):
            raise ValueError(f"on_halt must be 'raise' or 'terminate', got {on_halt!r}")
        self._binding = ContextBinding(context, config)
        self._on_halt: OnHalt = on_halt
        self._hint = cost_estimate_hint
        WrapOptions(cost_estimate_hint=cost_estimate_hint)  # validate now, not at the first call
        self._lock = threading.Lock()
        self._wrappers: dict[ReplyFunc, ReplyFunc] = {}

    @property
    def on_halt(self) -> OnHalt:
        return self._on_halt

    @property
    def owned_context(self) -> ExecutionContext | None:
        """The context built from ``config`` (None until first needed, or with an explicit one)."""
        return self._binding.owned_context

    def reset(self) -> None:
        """Start a fresh owned context for the next conversation (no effect on explicit contexts)."""
        self._binding.reset_owned()

    # -- installation ----------------------------------------------------------------------------

    def add_to_agent(self, agent: Any) -> None:
        """Install the hooks, reply wrappers and tool wrappers on ``agent``."""
        if not isinstance(agent, ConversableAgent):
            raise TypeError(f"VeronicaCapability needs a ConversableAgent, got {type(agent).__name__}")
        hook_lists = getattr(agent, "hook_lists", {})
        if "safeguard_llm_inputs" not in hook_lists or "safeguard_llm_outputs" not in hook_lists:
            raise TypeError("VeronicaCapability needs ag2>=0.14 (safeguard_llm_inputs/outputs hooks)")
        existing = vars(agent).get(_MARK)
        if isinstance(existing, _AgentState) and existing.owner.automatic:
            existing.owner.remove_from_agent(agent)  # the one instrument() gave it: this one wins
        elif existing is not None:
            raise ValueError(f"agent {agent.name!r} already has a VeronicaCapability")
        state = _AgentState(
            self,
            (
                ("safeguard_llm_inputs", functools.partial(self._llm_input, agent)),
                ("safeguard_llm_outputs", functools.partial(self._llm_output, agent)),
            ),
        )
        vars(agent)[_MARK] = state
        for method, hook in state.hooks:
            agent.register_hook(method, hook)
        agent.register_reply([Agent, None], self._gate, position=0)
        for name in _REPLY_FUNCS:
            original = getattr(ConversableAgent, name, None)
            if original is not None:
                wrapper = self._reply_wrapper(original)
                agent.replace_reply_func(original, wrapper)
                state.replies.append((original, wrapper))
        state.shadowed = {name: vars(agent).get(name) for name in _SHADOWED}
        # Instance attributes shadow the methods AG2 documents as the override point.
        resolve = functools.partial(self._context_for, agent)
        setattr(agent, "execute_function", sync_executor(agent.execute_function, resolve, id(agent)))  # noqa: B010
        setattr(agent, "a_execute_function", async_executor(agent.a_execute_function, resolve, id(agent)))  # noqa: B010
        direct = getattr(agent, "_generate_oai_reply_from_client", None)
        if callable(direct):  # private in AG2: guarded, and only a second line of defence
            setattr(agent, "_generate_oai_reply_from_client", self._direct_llm(agent, direct))  # noqa: B010

    def remove_from_agent(self, agent: Any) -> None:
        """Undo :meth:`add_to_agent` (the first reply function stays registered but does nothing)."""
        state = self._state(agent)
        if state is None:
            return
        for method, hook in state.hooks:
            hooks = agent.hook_lists.get(method, [])
            if hook in hooks:
                hooks.remove(hook)
        for original, wrapper in state.replies:
            agent.replace_reply_func(wrapper, original)
        for name, shadowed in state.shadowed.items():
            if shadowed is None:
                vars(agent).pop(name, None)
            else:
                setattr(agent, name, shadowed)
        vars(agent).pop(_MARK, None)

    def _state(self, agent: Any) -> _AgentState | None:
        state = vars(agent).get(_MARK) if hasattr(agent, "__dict__") else None
        return state if isinstance(state, _AgentState) and state.owner is self else None

    # -- binding ---------------------------------------------------------------------------------

    def _context_for(self, agent: Any) -> ExecutionContext | None:
        explicit = self._binding.explicit
        if explicit is not None:
            return explicit
        current = _current()
        if current is not None:
            return current
        state = self._state(agent)
        bound = state.bound if state is not None else None
        return bound if bound is not None else self._binding.resolve()

    def _gate(
        self, recipient: Any, messages: Any = None, sender: Any = None, config: Any = None
    ) -> tuple[bool, None]:
        # Runs first in every reply, in the caller's thread or task: the one place where the
        # caller's ContextVar is still visible on the a_initiate_chat path.
        state = self._state(recipient)
        if state is None:
            return False, None
        ctx = state.bound = self._binding.resolve()
        if ctx is not None and self._halted(ctx):
            return True, None
        return False, None

    def _halted(self, ctx: ExecutionContext) -> bool:
        """True (terminate) or raise (raise) once ``ctx`` has halted; False while it may go on."""
        try:
            ctx.check()
        except ExecutionHalted:
            if self._on_halt == "terminate":
                return True
            raise
        return False

    # -- reply wrappers --------------------------------------------------------------------------

    def _reply_wrapper(self, original: ReplyFunc) -> ReplyFunc:
        wrapper = self._wrappers.get(original)
        if wrapper is not None:
            return wrapper
        if inspect.iscoroutinefunction(original):

            @functools.wraps(original)
            async def areply(
                recipient: Any, messages: Any = None, sender: Any = None, config: Any = None
            ) -> Any:
                try:
                    outcome = await original(recipient, messages=messages, sender=sender, config=config)
                except BaseException as exc:
                    return self._reply_failed(recipient, exc)
                return self._reply_done(recipient, outcome)

            wrapper = areply
        else:

            @functools.wraps(original)
            def reply(recipient: Any, messages: Any = None, sender: Any = None, config: Any = None) -> Any:
                try:
                    outcome = original(recipient, messages=messages, sender=sender, config=config)
                except BaseException as exc:
                    return self._reply_failed(recipient, exc)
                return self._reply_done(recipient, outcome)

            wrapper = reply
        self._wrappers[original] = wrapper
        return wrapper

    def _reply_done(self, recipient: Any, outcome: Any) -> Any:
        self._settle_llm(recipient, None)
        ctx = self._context_for(recipient)
        if ctx is not None and ctx.aborted and self._halted(ctx):
            return True, None
        return outcome

    def _reply_failed(self, recipient: Any, exc: BaseException) -> Any:
        self._settle_llm(recipient, exc)
        if isinstance(exc, ExecutionHalted) and self._on_halt == "terminate":
            return True, None
        raise exc
