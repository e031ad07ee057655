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
except ImportError as _exc:  # the SDK missing, or some other package named "agents"
    from .. import MissingFrameworkError

    _missing = isinstance(_exc, ModuleNotFoundError) and (_exc.name or "").partition(".")[0] == "agents"
    raise MissingFrameworkError(
        "openai-agents" if _missing else "openai-agents>=0.24", "openai-agents", _exc, module=__name__
    ) from None


def _too_old(version: str) -> bool:
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) < (0, 24)


if _too_old(_sdk_version):  # older releases lack hooks and semantics this adapter relies on
    from .. import MissingFrameworkError

    raise MissingFrameworkError(
        "openai-agents>=0.24", "openai-agents", ImportError(f"found openai-agents {_sdk_version}"), module=__name__
    )

from ._openai_agents_calls import AgentsExecutionHalted
from ._openai_agents_hooks import VeronicaRunHooks
from ._openai_agents_runner import ChainedRunHooks, instrument, instrumented, uninstrument

__all__ = [
    "AgentsExecutionHalted",
    "ChainedRunHooks",
    "VeronicaRunHooks",
    "instrument",
    "instrumented",
    "uninstrument",
]
