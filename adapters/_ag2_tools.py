"""Tool steps for AG2 0.14: wrappers for a ``ConversableAgent``'s ``execute_function`` and
``a_execute_function``, the override point AG2 documents for running function and tool calls.

All four tool paths (sync/async chats, ``tool_calls``/``function_call``) go through one of them,
while ``safeguard_tool_inputs`` only sees the sync ``tool_calls`` path. A refused call is not
run and comes back as an unsuccessful ``(False, {"content": "Error: ..."})`` result instead of
an exception: AG2 runs async functions of sync chats in a helper thread that would lose it, and
elsewhere turns it into the same "Error: ..." text anyway. Ending the chat is left to the reply
wrappers of :mod:`._ag2_legacy`, which see that the context has halted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .. import CallNode, ExecutionContext, ExecutionHalted, WrapOptions

Resolve = Callable[[], "ExecutionContext | None"]


class _ToolFailed(RuntimeError):
    """A function/tool call AG2 reported as unsuccessful (its "Error: ..." content)."""


def _begin(resolve: Resolve, owner: int, func_call: Any, call_id: Any) -> tuple[CallNode | None, Any]:
    """(node, None) to run the call, (None, None) uncontained, (None, refusal) when refused."""
    ctx = resolve()
    if ctx is None:
        return None, None
    name = str(func_call.get("name", "")) if isinstance(func_call, dict) else ""
    # One key per call: an override that calls the other executor must not count it twice.
    key = ("ag2-tool", owner, call_id) if call_id else None
    try:
        return ctx.begin_call("tool", WrapOptions(operation_name=name), key=key), None
    except ExecutionHalted as halted:
        return None, (False, {"name": name, "role": "function", "content": f"Error: {halted}"})


def _end(resolve: Resolve, node: CallNode, outcome: Any) -> Any:
    ok, result = outcome if isinstance(outcome, tuple) and len(outcome) == 2 else (False, outcome)
    content = result.get("content") if isinstance(result, dict) else result
    ctx = resolve()
    if ok:
        node.commit(content)
    elif ctx is not None and ctx.aborted:
        node.fail(ctx.halted_error())  # halted inside the tool; AG2 made it an "Error: ..."
    else:
        node.fail(_ToolFailed(str(content)))
    return outcome


def sync_executor(original: Callable[..., Any], resolve: Resolve, owner: int) -> Callable[..., Any]:
    """Wrap a bound ``execute_function``; each call is one tool step of ``resolve()``'s context."""

    @functools.wraps(original)
    def execute_function(func_call: Any, call_id: Any = None, verbose: bool = False) -> Any:
        node, refusal = _begin(resolve, owner, func_call, call_id)
        if node is None:
            return refusal or original(func_call, call_id=call_id, verbose=verbose)
        try:
            outcome = original(func_call, call_id=call_id, verbose=verbose)
        except Exception as exc:
            node.fail(exc)
            raise
        except BaseException:
            node.commit()  # interrupted mid-call: it may have cost, keep the reservation
            raise
        return _end(resolve, node, outcome)

    return execute_function


def async_executor(original: Callable[..., Any], resolve: Resolve, owner: int) -> Callable[..., Any]:
    """Wrap a bound ``a_execute_function`` like :func:`sync_executor`."""

    @functools.wraps(original)
    async def a_execute_function(func_call: Any, call_id: Any = None, verbose: bool = False) -> Any:
        node, refusal = _begin(resolve, owner, func_call, call_id)
        if node is None:
            return refusal or await original(func_call, call_id=call_id, verbose=verbose)
        try:
            outcome = await original(func_call, call_id=call_id, verbose=verbose)
        except Exception as exc:
            node.fail(exc)
            raise
        except BaseException:
            node.commit()
            raise
        return _end(resolve, node, outcome)

    return a_execute_function
