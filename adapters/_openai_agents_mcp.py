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

:func:`install` puts the wrapper and the finder in place: ``instrument("openai-agents")`` does it
(and :func:`remove` undoes it), and so does constructing :class:`VeronicaRunHooks`, which pins it
for the process (explicit hooks with only ``instrument("mcp")`` must not count a call twice).
:func:`release` (``veronica_mw.uninstrument()``, through the MCP instrumentation's undo) removes it
even when pinned, so the SDK is restored; :func:`reinstate` (the MCP instrumentation's install) puts a
pinned one back. Both are inert outside an MCP tool body: the wrapper only publishes a key, the
finder only answers then.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any

from .. import CallNode, ExecutionContext
from . import _provider_claims

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


_original: list[Any] = []  # MCPUtil.invoke_mcp_tool's classmethod, while it is wrapped
_pinned: list[bool] = []  # non-empty: VeronicaRunHooks need the join; remove() leaves it
_lock = threading.Lock()


def _mcp_util() -> Any:
    # adapters/mcp.py imports this module, so it is type-checked in envs without the Agents SDK too.
    try:
        from agents.mcp.util import MCPUtil  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # the SDK without its MCP support: no MCP tools to join
        return None
    return MCPUtil


def install(*, pin: bool = False) -> None:
    """Wrap ``MCPUtil.invoke_mcp_tool`` and register the finder (idempotent). ``pin``: keep them
    through :func:`remove` (the run hooks' use)."""
    with _lock:
        if pin and not _pinned:
            _pinned.append(True)
        _install()


def _install() -> None:  # under _lock
    if _original:
        return
    util = _mcp_util()
    invoke = None if util is None else util.__dict__.get("invoke_mcp_tool")
    if isinstance(invoke, classmethod):  # guard against API drift
        _original.append(invoke)
        util.invoke_mcp_tool = classmethod(wrap_invoke(invoke.__func__))
    _provider_claims.register(enclosing_tool)


def _remove() -> None:  # under _lock
    _provider_claims.unregister(enclosing_tool)
    if _original:
        _mcp_util().invoke_mcp_tool = _original.pop()


def remove() -> None:
    """Undo :func:`install` (idempotent), unless the run hooks pinned it."""
    with _lock:
        if not _pinned:
            _remove()


def release() -> None:
    """Undo :func:`install` even if pinned (idempotent): the MCP instrumentation is being removed,
    and with it every patch. The pin stays, for :func:`reinstate`."""
    with _lock:
        _remove()


def reinstate() -> None:
    """Put back the join :func:`release` took away if run hooks pinned it (the MCP instrumentation is
    being installed again, and hooks built earlier must still count an MCP tool once)."""
    with _lock:
        if _pinned:
            _install()
