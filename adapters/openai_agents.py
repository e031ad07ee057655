"""OpenAI Agents SDK adapter: bound every model and tool call of an agent run by an execution context.

* :class:`VeronicaRunHooks` -- run hooks, ``Runner.run(agent, input, hooks=VeronicaRunHooks())``
  (also ``run_sync`` and ``run_streamed``): each model call and each local tool call is one
  kernel step, begun in ``on_llm_start``/``on_tool_start`` so a refused call never runs, and
  committed in ``on_llm_end`` (with ``ModelResponse.usage``, priced for the agent's model) or
  ``on_tool_end``. Handoffs keep the run, so the next agent's calls count in the same context.
* :func:`instrument` (``veronica_mw.instrument("openai-agents")``, part of the default set when
  the SDK is installed) -- every ``Runner`` call made while an execution context is current
  (request middleware, ``with ExecutionContext(...)``) gets these hooks, chained in front of the
  caller's own; outside any context nothing changes.

How a halt surfaces: ``Runner.run``/``run_sync`` raise, and iterating ``stream_events()`` of a
streamed run ends by raising, :class:`AgentsExecutionHalted`, which *is* an ``ExecutionHalted``
(reason, snapshot, partial result) and also the SDK's ``AgentsException``. The SDK wraps any other
exception from ``on_tool_start`` in ``UserError``; its own exceptions it lets through unchanged.
"""

from __future__ import annotations

try:
    from agents.version import __version__ as _sdk_version  # imports the whole SDK

    # Older releases lack hooks and semantics this adapter relies on.
    _release = tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in _sdk_version.split(".")[:2])
    if _release < (0, 24):
        raise ImportError(f"found openai-agents {_sdk_version}")
except ImportError as _exc:  # the SDK missing or too old, or some other package named "agents"
    from .. import MissingFrameworkError

    _missing = isinstance(_exc, ModuleNotFoundError) and (_exc.name or "").partition(".")[0] == "agents"
    raise MissingFrameworkError(
        "openai-agents" if _missing else "openai-agents>=0.24", "openai-agents", _exc, module=__name__
    ) from None

from ._openai_agents_calls import AgentsExecutionHalted, AgentsToolCallRejected
from ._openai_agents_hooks import VeronicaRunHooks
from ._openai_agents_runner import ChainedRunHooks, instrument, instrumented, uninstrument

__all__ = [
    "AgentsExecutionHalted",
    "AgentsToolCallRejected",
    "ChainedRunHooks",
    "VeronicaRunHooks",
    "instrument",
    "instrumented",
    "uninstrument",
]
