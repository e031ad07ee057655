"""MCP tools run by the Agents SDK are one step: the MCP call joins the tool step of the run hooks.

The SDK turns each MCP server tool into a function tool whose body is
``MCPUtil.invoke_mcp_tool(server, tool, tool_context, input_json)``, which sends ``tools/call``
through ``mcp.ClientSession.call_tool`` -- instrumented by ``veronica_mw.instrument("mcp")``. Our
``on_tool_start`` hook has already begun the call's tool step by then, keyed by its
``ToolContext`` and ``tool_call_id``, but it ran in a task of its own, so the MCP instrumentation
(in the tool's task) cannot see it. ``invoke_mcp_tool`` is wrapped to publish that key, in a
ContextVar, for the duration of the tool body; a finder (:mod:`._provider_claims`) hands it to the
MCP instrumentation, which adopts the hook's step instead of opening a second one. Parallel MCP
calls each carry their own key, so each joins its own step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any

from .. import CallNode, ExecutionContext

_tool_key: ContextVar[Hashable | None] = ContextVar("veronica_openai_agents_mcp_tool", default=None)


def tool_key(context: Any) -> Hashable | None:
    """The kernel key ``on_tool_start`` begins a function tool's step with (None: not keyed)."""
    call_id = getattr(context, "tool_call_id", None)
    return ("openai_agents.tool", id(context), call_id) if isinstance(call_id, str) else None


def enclosing_tool(ctx: ExecutionContext, kind: str) -> CallNode | Hashable | None:
    """For the MCP instrumentation: the key of the Agents SDK tool step an MCP call is made in."""
    return _tool_key.get() if kind == "tool" else None


def wrap_invoke(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap the plain function behind the ``MCPUtil.invoke_mcp_tool`` classmethod."""

    @functools.wraps(original)
    async def invoke_mcp_tool(
        cls: Any, server: Any, tool: Any, context: Any, input_json: str, **kwargs: Any
    ) -> Any:
        token = _tool_key.set(tool_key(context))
        try:
            return await original(cls, server, tool, context, input_json, **kwargs)
        finally:
            _tool_key.reset(token)

    return invoke_mcp_tool
