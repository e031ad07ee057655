"""AG2 0.14 (``import autogen``): the model-call step of the ``VeronicaCapability`` of :mod:`._ag2_legacy`.

A ``safeguard_llm_inputs`` hook begins the step right before ``OpenAIWrapper.create``; on HALT it
raises, so the model is not called. (Returning ``None`` from that hook would make AG2 send the
canned reply "LLM call blocked by safeguard" and carry on, which is not a stop.) A
``safeguard_llm_outputs`` hook commits the cost the model client reported, read as the change of
the client's ``actual_usage_summary`` across the call. Model calls that bypass the hooks (the
agent's private ``_generate_oai_reply_from_client``, used by ``summary_method="reflection_with_llm"``)
are begun and settled by a wrapper. Framework-free: the capability in :mod:`._ag2_legacy` mixes
this in; the per-agent state it keeps is defined here too.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from .. import CallNode, ExecutionContext, WrapOptions
from . import _ag2_claims, _provider_claims
from ._ag2_usage import UsageSnapshot, commit_llm, usage_snapshot

__all__ = ["MARK", "AgentState", "LlmSteps", "ReplyFunc"]

MARK = "_veronica_capability"  # the agent attribute holding its AgentState
ReplyFunc = Callable[..., Any]


class _Pending(NamedTuple):
    node: CallNode
    client: Any
    before: UsageSnapshot


class AgentState:
    """What one capability keeps about one agent, stored on the agent so it dies with it."""

    __slots__ = ("owner", "hooks", "replies", "shadowed", "bound", "pending")

    def __init__(self, owner: LlmSteps, hooks: tuple[tuple[str, Callable[..., Any]], ...]) -> None:
        self.owner = owner
        self.hooks = hooks
        self.replies: list[tuple[ReplyFunc, ReplyFunc]] = []  # (original, wrapper)
        self.shadowed: dict[str, Any] = {}  # name -> instance attribute it hid (None: the class method)
        self.bound: ExecutionContext | None = None  # resolved when the agent's latest reply started
        self.pending: _Pending | None = None  # the model call between the two safeguard hooks


class LlmSteps:
    """The model-call step, mixed into the capability (which provides the binding and the state)."""

    automatic: bool
    _hint: float
    _lock: threading.Lock

    def _state(self, agent: Any) -> AgentState | None:
        raise NotImplementedError

    def _context_for(self, agent: Any) -> ExecutionContext | None:
        raise NotImplementedError

    def remove_from_agent(self, agent: Any) -> None:
        raise NotImplementedError

    def _llm_input(self, agent: Any, messages: Any) -> Any:
        state = self._state(agent)
        ctx = self._context_for(agent) if state is not None else None
        if state is None or ctx is None:
            return messages
        self._settle_llm(agent, None)  # left open by a reply function we could not wrap
        node = ctx.begin_call("llm", self._llm_options(agent))  # raises: the model is not called
        client = getattr(agent, "client", None)
        state.pending = _Pending(node, client, usage_snapshot(client))
        _ag2_claims.began(node)  # the provider SDK request sent next, in this thread, joins it
        return messages

    def _llm_options(self, agent: Any) -> WrapOptions:
        return WrapOptions(operation_name=f"ag2:{agent.name}", cost_estimate_hint=self._hint)

    def _direct_llm(self, agent: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        """Cover model calls that bypass the hooks (``summary_method="reflection_with_llm"``)."""

        @functools.wraps(original)
        def generate(llm_client: Any, messages: Any, cache: Any = None, **kwargs: Any) -> Any:
            state = self._state(agent)
            ctx = None if state is not None and state.pending is not None else self._context_for(agent)
            if ctx is None:  # uncontained, or a reply whose hook already began this step
                return original(llm_client, messages, cache, **kwargs)
            node = ctx.begin_call("llm", self._llm_options(agent))  # raises: the model is not called
            before = usage_snapshot(llm_client)
            try:
                with _provider_claims.offered(node):  # the provider SDK request underneath joins it
                    response = original(llm_client, messages, cache, **kwargs)
            except Exception as exc:
                node.fail(exc)
                raise
            except BaseException:
                commit_llm(node, llm_client, before)
                raise
            commit_llm(node, llm_client, before, response)
            return response

        return generate

    def _llm_output(self, agent: Any, response: Any) -> Any:
        self._settle_llm(agent, None, response)
        return response

    def _settle_llm(self, agent: Any, error: BaseException | None, response: Any = None) -> None:
        state = self._state(agent)
        if state is None:
            return
        with self._lock:
            pending, state.pending = state.pending, None
        if pending is None:
            return
        _ag2_claims.settled(pending.node)
        if isinstance(error, Exception):
            pending.node.fail(error)
        else:
            # Returned (possibly with no text) or interrupted: the call ran, so it costs.
            commit_llm(pending.node, pending.client, pending.before, response)
