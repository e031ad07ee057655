"""The hooks behind :class:`veronica_mw.adapters.llamaindex.VeronicaLlamaIndexHandler`.

One set of hooks serves every installed handler: an LLM call is begun in the context of each of
them (all or nothing), and handlers bound to the same context share a key, so it is counted once.
Imported only after ``llamaindex.py`` checked that LlamaIndex is installed.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import weakref
from collections.abc import Callable, Hashable
from contextvars import ContextVar, Token
from typing import Any, Protocol

from llama_index.core.agent.workflow import AgentWorkflow
from llama_index.core.agent.workflow.base_agent import BaseWorkflowAgent
from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]  # (re-exported)
from llama_index.core.instrumentation.span_handlers import NullSpanHandler
from llama_index.core.llms import callbacks as _llm_callbacks
from llama_index.core.tools.types import BaseTool, ToolOutput

from .. import CallNode, ExecutionContext, ExecutionHalted, ToolCallRejected, WrapOptions
from ..kernel.pricing import extract_usage, usage_from_mapping
from . import _provider_claims
from ._provider_estimate import limit, text_tokens

logger = logging.getLogger("veronica_mw.adapters.llamaindex")


class Handler(Protocol):
    def resolve_context(self) -> ExecutionContext | None: ...

    def llm_options(
        self, name: str, model: str | None, ctx: ExecutionContext, worst: tuple[int, int]
    ) -> WrapOptions: ...


installed: list[Handler] = []  # mutated under the public module's lock; read as a snapshot
# Open calls by LLM event id or tool span id: (kernel nodes, dedup key, context-var token).
_open: dict[str, tuple[list[CallNode], Hashable, Token[bool] | None]] = {}
# True while a tool call is already counted, so the tool's own (nested) spans are not counted again.
_in_tool: ContextVar[bool] = ContextVar("veronica_mw_llamaindex_tool", default=False)
_CALLBACKS_FILE = _llm_callbacks.__file__
_patched: dict[type, Any] = {}
_managers: weakref.WeakSet[CallbackManager] = weakref.WeakSet()


def _bound() -> list[tuple[Handler, ExecutionContext]]:
    """Each installed handler with the context it binds a call starting now to (if any)."""
    pairs = [(handler, handler.resolve_context()) for handler in list(installed)]
    return [(handler, ctx) for handler, ctx in pairs if ctx is not None]


def _begin_all(
    bound: list[tuple[Handler, ExecutionContext]],
    kind: str,
    options: Callable[[Handler, ExecutionContext], WrapOptions],
    key: Hashable,
) -> list[CallNode]:
    """Begin the call in every bound context; on a halt give back what was begun, then raise."""
    nodes: list[CallNode] = []
    for handler, ctx in bound:
        try:
            node = ctx.begin_call(kind, options(handler, ctx), key=key)
        except ExecutionHalted:
            for begun in nodes:
                begun.release()
            raise
        if node not in nodes:
            nodes.append(node)
    return nodes


def _dict_arguments(edited: Any) -> None:
    if not isinstance(edited, dict):
        raise TypeError(f"tool arguments must be a dict, got {type(edited).__name__}")


async def _abegin_tool(
    bound: list[tuple[Handler, ExecutionContext]], name: str, tool_input: dict[str, Any]
) -> list[CallNode]:
    """Begin an agent's tool call in every bound context, awaiting approval policies (so waiting
    for a person never blocks the workflow's event loop); on a refusal give back what was begun."""
    nodes: list[CallNode] = []
    key = ("llamaindex.tool", object())
    for _, ctx in bound:
        try:
            node = await ctx.abegin_call(
                "tool",
                WrapOptions(operation_name=name),
                key=key,
                arguments=tool_input,
                editable=_dict_arguments,
            )
        except (ExecutionHalted, ToolCallRejected):
            for begun in nodes:
                begun.release()
            raise
        if node not in nodes:
            nodes.append(node)
    return nodes


def _enclosing_key(own_event_id: str) -> Hashable:
    """The key of the LLM call this one runs inside (``chat`` implemented through ``complete``, an
    async or streaming form delegating to a sync one), else a key of its own.

    LlamaIndex's callback wrappers keep their open event's id in a local named ``event_id``; the
    stack shows whether one of them runs around us, even inside a stream being consumed (which no
    context variable could tell). Should that name change, nested calls are counted twice: never
    fewer calls than really ran.
    """
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == _CALLBACKS_FILE:
            outer = frame.f_locals.get("event_id")
            entry = _open.get(outer) if isinstance(outer, str) else None
            if entry is not None:
                return entry[1]
        frame = frame.f_back  # type: ignore[assignment]
    return ("llamaindex.llm", own_event_id)


def enclosing_llm_key(ctx: ExecutionContext, kind: str) -> Hashable | None:
    """For the provider SDK instrumentation: the key of the LLM event a request is sent inside
    (LlamaIndex's ``OpenAI`` calls the OpenAI SDK within its ``chat``), found like
    :func:`_enclosing_key`; the kernel hands back the open step for it, so the call counts once."""
    if kind != "llm" or not _open:
        return None
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == _CALLBACKS_FILE:
            outer = frame.f_locals.get("event_id")
            entry = _open.get(outer) if isinstance(outer, str) else None
            if entry is not None:
                return entry[1]
        frame = frame.f_back  # type: ignore[assignment]
    return None


_provider_claims.register(enclosing_llm_key)


def _response_usage(response: Any) -> tuple[Any, str | None]:
    """Usage and model of a Chat/CompletionResponse: ``raw["usage"]`` (dict or provider object),
    else OpenAI-style token counts in ``additional_kwargs``."""
    raw = getattr(response, "raw", None)
    usage, model = extract_usage(raw) if raw is not None else (None, None)
    if usage is None:
        extra = getattr(response, "additional_kwargs", None)
        usage = usage_from_mapping(extra) if isinstance(extra, dict) else None
    return usage, model


def _settle(nodes: list[CallNode], result: Any, error: BaseException | None, **usage: Any) -> None:
    for node in nodes:
        if isinstance(error, Exception):
            node.fail(error)  # draws one retry, like any failed call (a halt inside is no failure)
        elif error is not None:
            node.commit()  # stream closed early or cancelled: it may have cost money, keep the hint
        else:
            node.commit(result, **usage)


class _LLMGate(BaseCallbackHandler):
    """The blocking hook: ExecutionHalted raised from ``on_event_start`` of an LLM event ends that
    call before the model runs (LlamaIndex does not catch exceptions from these handlers)."""

    def __init__(self) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])

    def on_event_start(
        self,
        event_type: CBEventType,
        payload: dict[str, Any] | None = None,
        event_id: str = "",
        parent_id: str = "",
        **kwargs: Any,
    ) -> str:
        bound = _bound() if event_type == CBEventType.LLM and event_id else []
        if not bound:
            return event_id
        payload = payload or {}
        serialized = payload.get(EventPayload.SERIALIZED) or {}
        form = "chat" if EventPayload.MESSAGES in payload else "complete"
        name = f"{serialized.get('class_name', 'llm')}.{form}"
        model = serialized.get("model_name") or serialized.get("model")  # OpenAI's LLM: ``model``
        model = model if isinstance(model, str) and model != "unknown" else None
        key = _enclosing_key(event_id)
        # The worst case, as the provider layer reserves it: the prompt estimated, and the LLM's
        # max_tokens (serialized with it) or the configured default.
        prompt = payload.get(EventPayload.MESSAGES, payload.get(EventPayload.PROMPT))
        worst = (text_tokens(prompt), limit(serialized, "max_tokens", "max_new_tokens", "num_output"))
        _open[event_id] = (
            _begin_all(bound, "llm", lambda h, ctx: h.llm_options(name, model, ctx, worst), key),
            key,
            None,
        )
        return event_id

    def on_event_end(
        self,
        event_type: CBEventType,
        payload: dict[str, Any] | None = None,
        event_id: str = "",
        **kwargs: Any,
    ) -> None:
        entry = _open.pop(event_id, None) if event_type == CBEventType.LLM else None
        if entry is not None:
            payload = payload or {}
            response = payload.get(EventPayload.RESPONSE, payload.get(EventPayload.COMPLETION))
            usage, model = _response_usage(response)
            _settle(entry[0], response, payload.get(EventPayload.EXCEPTION), usage=usage, model=model)

    def start_trace(self, trace_id: str | None = None) -> None:
        return None

    def end_trace(self, trace_id: str | None = None, trace_map: dict[str, list[str]] | None = None) -> None:
        return None


_GATE = _LLMGate()


class _Watcher(NullSpanHandler):
    """Instrumentation, which only observes: attaches the gate to each LLM about to run, and counts
    tool calls made outside an agent (exceptions here are swallowed, so those cannot be refused)."""

    def span_enter(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        parent_id: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(instance, BaseLLM):
            manager = instance.callback_manager
            if isinstance(manager, CallbackManager) and _GATE not in manager.handlers:
                manager.add_handler(_GATE)
                _managers.add(manager)
        elif isinstance(instance, BaseTool) and not _in_tool.get() and (bound := _bound()):
            options = WrapOptions(operation_name=instance.metadata.get_name())
            try:
                nodes = _begin_all(bound, "tool", lambda h, ctx: options, ("llamaindex.tool", id_))
            except ExecutionHalted:
                logger.debug("veronica_mw: %s runs outside an agent after a halt", options.operation_name)
                return
            _open[id_] = (nodes, id_, _in_tool.set(True))

    def span_exit(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> None:
        self._end(id_, result, None)

    def span_drop(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> None:
        self._end(id_, None, err)

    @staticmethod
    def _end(id_: str, result: Any, err: BaseException | None) -> None:
        entry = _open.pop(id_, None)
        if entry is None:
            return
        nodes, _, token = entry
        if token is not None:
            try:
                _in_tool.reset(token)
            except ValueError:  # exited in another context than it entered: nothing to undo there
                pass
        _settle(nodes, result, err if err is not None else getattr(result, "exception", None))


_WATCHER = _Watcher()


def _gate_tool_dispatch(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an agent's ``_call_tool(ctx, tool, tool_input)``, which turns tool exceptions into error
    results for the model: our halt is raised outside it, so it fails the step and the run."""

    @functools.wraps(original)
    async def _call_tool(self: Any, ctx: Any, tool: Any, tool_input: dict[str, Any]) -> Any:
        bound = _bound()
        if not bound:
            return await original(self, ctx, tool, tool_input)
        name = tool.metadata.get_name()
        try:
            nodes = await _abegin_tool(bound, name, tool_input)
        except ToolCallRejected as rejected:  # on_reject="message": the model hears why, the run goes on
            text = f"Tool call rejected: {rejected.message}"
            return ToolOutput(
                content=text, tool_name=name, raw_input=tool_input, raw_output=text, is_error=True
            )
        edited = next((node.edited_arguments for node in nodes if node.edited_arguments is not None), None)
        if edited is not None:  # an approver changed the arguments
            tool_input = dict(edited)
        token = _in_tool.set(True)
        try:
            output = await original(self, ctx, tool, tool_input)
        except Exception:
            for node in nodes:  # only the workflow's wait-for-event pause gets here: it runs again
                node.release()
            raise
        except BaseException as interrupt:
            _settle(nodes, None, interrupt)
            raise
        finally:
            _in_tool.reset(token)
        error = getattr(output, "exception", None)
        _settle(nodes, output, error)
        if isinstance(error, ExecutionHalted):
            raise error  # a halt inside the tool ends the run instead of reaching the model
        return output

    return _call_tool


def hook() -> None:
    """Add the span watcher and wrap the agents' tool dispatch (first handler installed)."""
    if not any(h is _WATCHER for h in get_dispatcher().span_handlers):
        get_dispatcher().add_span_handler(_WATCHER)
    for cls in (BaseWorkflowAgent, AgentWorkflow):
        original = cls.__dict__.get("_call_tool")
        if original is None or not inspect.iscoroutinefunction(original):
            logger.warning("veronica_mw: %s._call_tool not found: its tools are counted, not refused", cls)
            continue
        _patched[cls] = original
        setattr(cls, "_call_tool", _gate_tool_dispatch(original))  # noqa: B010


def unhook() -> None:
    """Undo :func:`hook` and detach the gate from every callback manager (last handler out)."""
    handlers = get_dispatcher().span_handlers
    handlers[:] = [h for h in handlers if h is not _WATCHER]  # by identity: pydantic models compare by value
    for cls, original in _patched.items():
        setattr(cls, "_call_tool", original)  # noqa: B010
    _patched.clear()
    for manager in list(_managers):
        if _GATE in manager.handlers:
            manager.remove_handler(_GATE)
    _managers.clear()
