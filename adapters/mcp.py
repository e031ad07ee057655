"""MCP instrumentation: every ``tools/call`` an MCP client sends inside a context is one tool step.

``veronica_mw.instrument("mcp")`` wraps ``mcp.ClientSession.call_tool``, which every MCP client
ends in — ``mcp.Client``, ``ClientSessionGroup`` and ``fastmcp.Client`` alike. Inside a context the
call is admitted before the request is sent (a refused call raises
:class:`~veronica_mw.ExecutionHalted` and the server sees nothing); every argument is passed
through unchanged, and so is the result. A result with ``isError`` (an unknown tool, a tool that
raised) is a failed call, like an exception: it draws one retry. A tool step a layer above
already began for the same call (``ctx.call_tool`` around it) is adopted, not counted again.
Each ``tools/call`` round is a step: ``mcp.Client`` answering an input-required result sends
another one. Tested with mcp 2.x (and fastmcp 4.x over it).
"""

from __future__ import annotations

from .. import MissingFrameworkError

try:
    from mcp.client.session import ClientSession
except ImportError as exc:
    raise MissingFrameworkError("mcp", "mcp", exc) from exc

from typing import Any

from .. import CallNode, ExecutionContext, WrapOptions
from . import _openai_agents_mcp
from . import _provider_claims as claims
from ._provider_calls import context_now
from ._provider_patch import Instrumentation, Patches

__all__ = ["ToolResultError", "instrument", "instrumented", "uninstrument"]


class ToolResultError(Exception):
    """Recorded (never raised) for a tool result with ``isError``: a failed call, which draws one
    retry, so an agent looping on a failing tool is bounded by ``max_retries_total``."""


def _is_error(result: Any) -> bool:
    flag = getattr(result, "is_error", None)  # mcp 2.x
    if flag is None and not hasattr(type(result), "is_error"):
        flag = getattr(result, "isError", None)  # mcp 1.x
    return flag is True


def _step(ctx: ExecutionContext, name: str) -> tuple[CallNode, bool]:
    """The tool step of this call and whether it is ours to settle (raises ExecutionHalted)."""
    found = claims.enclosing(ctx, "tool")
    if found is not None:
        options = WrapOptions(operation_name=f"mcp:{name}")
        node = found if isinstance(found, CallNode) else ctx.begin_call("tool", options, key=found)
        if claims.claim(node):
            return node, node.options is options
    node = ctx.begin_call("tool", WrapOptions(operation_name=f"mcp:{name}"))
    claims.claim(node)
    return node, True


def _wrap_call_tool(original: Any) -> Any:
    async def call_tool(self: Any, *args: Any, **kwargs: Any) -> Any:
        ctx = context_now()
        if ctx is None:
            return await original(self, *args, **kwargs)
        name = kwargs.get("name", args[0] if args else "?")
        node, own = _step(ctx, str(name))  # ExecutionHalted here: the request is not sent
        try:
            result = await original(self, *args, **kwargs)
        except BaseException as exc:
            if own:
                if isinstance(exc, Exception):
                    node.fail(exc)
                else:  # cancelled mid-call: the tool may have run
                    node.commit()
            raise
        if own:
            if _is_error(result):
                node.fail(ToolResultError(f"MCP tool {name!r} returned an error result"))
            else:
                node.commit(result)
        return result

    return call_tool


_slot = Instrumentation()


def _apply() -> Patches:
    patches = Patches()
    patches.wrap(ClientSession, "call_tool", _wrap_call_tool)
    return patches


def instrument() -> None:
    """Patch the MCP client session (idempotent); see the module docstring."""
    _slot.install(_apply)
    _openai_agents_mcp.reinstate()  # the Agents SDK join that run hooks built earlier rely on


def uninstrument() -> None:
    """Restore the MCP client session (idempotent), and the Agents SDK's MCP tool body that the join
    of explicit ``VeronicaRunHooks`` wraps (:func:`instrument` puts that back while they live)."""
    _slot.remove()
    _openai_agents_mcp.release()


def instrumented() -> bool:
    return _slot.active
