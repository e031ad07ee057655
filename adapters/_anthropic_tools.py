"""Anthropic's SDK-side tool loop (``client.beta.messages.tool_runner(...)``): each tool run is a step.

The runner (sync, async, streamed) sends a request, runs the tools the reply asked for through
``_run_tool`` / ``_run_toolset_member`` of ``BaseSyncToolRunner`` / ``BaseAsyncToolRunner``, and
sends again. Its requests are model steps already (they go through the patched client); these two
methods are wrapped so that each tool run inside an execution context is a ``tool`` step admitted
*before* the tool runs. A refusal raises :class:`~veronica_mw.ExecutionHalted` from outside the
SDK's own ``try`` (which turns a tool's exceptions into ``is_error`` results), so it ends the
runner's loop and reaches the caller; nothing more is sent. A result marked ``is_error`` settles the
step as failed (one retry drawn, as for any failed call). Imported by :mod:`.anthropic`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .. import WrapOptions
from ._provider_calls import context_now
from ._provider_patch import Patches, attr

__all__ = ["patch"]


def _name(tool: Any, tool_use: Any) -> str:
    name = getattr(tool_use, "name", None) or getattr(tool, "name", None)
    return f"anthropic.tool:{name}" if isinstance(name, str) and name else "anthropic.tool"


def _settle(node: Any, result: Any) -> None:
    if isinstance(result, dict) and result.get("is_error"):
        node.fail(RuntimeError(f"tool error: {result.get('content')!r}"[:500]))
    else:
        node.commit(result)


def _failed(node: Any, exc: BaseException) -> None:
    if isinstance(exc, Exception):
        node.fail(exc)
    else:  # cancelled or interrupted while the tool ran: it ran, so the step counts
        node.commit(None)


def _wrap(original: Any) -> Callable[..., Any]:
    """``_run_tool(self, tool, tool_use)`` or ``_run_toolset_member(self, tool_use)``."""
    if inspect.iscoroutinefunction(original):

        async def arun(self: Any, *args: Any) -> Any:
            ctx = context_now()
            if ctx is None:
                return await original(self, *args)
            tool_use = args[-1]
            options = WrapOptions(operation_name=_name(args[0] if len(args) > 1 else None, tool_use))
            node = await ctx.abegin_call("tool", options, arguments=getattr(tool_use, "input", None))
            try:
                result = await original(self, *args)
            except BaseException as exc:
                _failed(node, exc)
                raise
            _settle(node, result)
            return result

        return arun

    def run(self: Any, *args: Any) -> Any:
        ctx = context_now()
        if ctx is None:
            return original(self, *args)
        tool_use = args[-1]
        options = WrapOptions(operation_name=_name(args[0] if len(args) > 1 else None, tool_use))
        node = ctx.begin_call("tool", options, arguments=getattr(tool_use, "input", None))
        try:
            result = original(self, *args)
        except BaseException as exc:
            _failed(node, exc)
            raise
        _settle(node, result)
        return result

    return run


def patch(module: Any, patches: Patches) -> None:
    """Wrap the tool runners' tool-running methods (absent in SDKs without ``tool_runner``)."""
    runner = attr(module, "lib.tools._beta_runner")
    for cls_name in ("BaseSyncToolRunner", "BaseAsyncToolRunner"):
        cls = getattr(runner, cls_name, None) if runner is not None else None
        for method in ("_run_tool", "_run_toolset_member"):
            patches.wrap(cls, method, _wrap)
