"""CrewAI tools that call an MCP server are one step: the MCP call joins the CrewAI tool step.

CrewAI's ``before_tool_call`` hook begins the tool's step (one node per owning context) and keeps
the call in a ContextVar until ``after_tool_call``; the tool body -- CrewAI's native MCP tools, an
``MCPServerAdapter`` tool, or any tool using an MCP client -- runs in that context (CrewAI's MCP
tools copy it into the worker thread they run the client in). A finder registered with
:mod:`._provider_claims` hands that step to the MCP instrumentation, which joins it instead of
opening a second one. Imported by :mod:`veronica_mw.adapters.crewai`.
"""

from __future__ import annotations

from .. import CallNode, ExecutionContext
from . import _provider_claims
from ._crewai_calls import tool_call


def _enclosing_tool(ctx: ExecutionContext, kind: str) -> CallNode | None:
    call = tool_call.get() if kind == "tool" else None
    if call is None:
        return None
    for node in call.nodes:
        if node.context is ctx and not node.settled:
            return node
    return None


_provider_claims.register(_enclosing_tool)
