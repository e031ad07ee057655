"""google-genai automatic function calling: every Python tool the SDK runs between requests is a step.

With Python functions in ``config.tools``, ``generate_content`` (sync, async, streamed, and the
chats built on them) calls them itself, between model requests, through
``_extra_utils.invoke_function_from_dict_args`` (``..._async`` for coroutine functions; the async
client runs sync functions through that one in a worker thread). It is wrapped so each run is
admitted as a ``tool`` step before the function runs and settled with its result.

The SDK turns any exception of a tool run into an ``{"error": ...}`` function response and asks
the model again, which would swallow a refusal. So ``get_function_response_parts`` (and its async
twin), which collect the responses of one model turn, are wrapped too: once a tool run of the turn
was refused, the halt is raised from there, out of the SDK's loop, to the caller. MCP sessions in
``config.tools`` go through ``mcp.ClientSession.call_tool``, contained by the MCP instrumentation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from .. import CallNode, ExecutionContext, ExecutionHalted, WrapOptions
from ._provider_calls import context_now

# The halts met by the tool runs of the model turn being answered (a list shared with the worker
# threads the async client runs sync tools in: they get a copy of this context, the same list).
_refused: ContextVar[list[ExecutionHalted] | None] = ContextVar("veronica_genai_refused", default=None)


def _begin(ctx: ExecutionContext, function: Any, args: Any) -> CallNode:
    name = getattr(function, "__name__", None) or type(function).__name__
    options = WrapOptions(operation_name=f"google_genai.tool:{name}")
    try:
        return ctx.begin_call("tool", options, arguments=args)
    except ExecutionHalted as halted:
        refused = _refused.get()
        if refused is not None:
            refused.append(halted)
        raise


def _settle_failure(node: CallNode, exc: BaseException) -> None:
    if isinstance(exc, Exception):
        node.fail(exc)  # the SDK hands the error to the model; one retry is drawn
    else:
        node.commit()  # interrupted mid-run: it may have had effects


def wrap_invoke(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def invoke_function_from_dict_args(args: Any, function_to_invoke: Any) -> Any:
        ctx = context_now()
        if ctx is None:
            return original(args, function_to_invoke)
        node = _begin(ctx, function_to_invoke, args)  # a refusal: the function does not run
        try:
            result = original(args, function_to_invoke)
        except BaseException as exc:
            _settle_failure(node, exc)
            raise
        node.commit(result)
        return result

    return invoke_function_from_dict_args


def wrap_ainvoke(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def invoke_function_from_dict_args_async(args: Any, function_to_invoke: Any) -> Any:
        ctx = context_now()
        if ctx is None:
            return await original(args, function_to_invoke)
        node = _begin(ctx, function_to_invoke, args)
        try:
            result = await original(args, function_to_invoke)
        except BaseException as exc:
            _settle_failure(node, exc)
            raise
        await node.acommit(result)
        return result

    return invoke_function_from_dict_args_async


def wrap_parts(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_function_response_parts(*args: Any, **kwargs: Any) -> Any:
        refused: list[ExecutionHalted] = []
        token = _refused.set(refused)
        try:
            parts = original(*args, **kwargs)
        finally:
            _refused.reset(token)
        if refused:
            raise refused[0]
        return parts

    return get_function_response_parts


def wrap_aparts(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def get_function_response_parts_async(*args: Any, **kwargs: Any) -> Any:
        refused: list[ExecutionHalted] = []
        token = _refused.set(refused)
        try:
            parts = await original(*args, **kwargs)
        finally:
            _refused.reset(token)
        if refused:
            raise refused[0]
        return parts

    return get_function_response_parts_async
