"""What the LangChain v1 agent middleware does with the kernel's verdicts (checks, downgrade, approvals).

- A model answer rejected by an output check (``OutputRejected``, one retry already drawn) is asked
  again with the check's feedback appended as a user message, for this model call only: the
  agent's state keeps just the answer that passed.
- A fallback model chosen by a policy (``DowngradeAt``) is swapped in by copying the chat model with
  its model-name field replaced (``model_name``/``model``/``model_id``, whichever it has); a model
  without one runs unchanged and the kernel records ``downgrade_unsupported``.
- Approved tool calls run with the approver's edited arguments; a rejection with
  ``on_reject="message"`` becomes the tool's answer.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import ModelRequest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from .. import CallNode, OutputRejected, ToolCallRejected

if TYPE_CHECKING:
    from langchain.agents.middleware import ToolCallRequest

__all__ = [
    "check_tool_arguments",
    "edited_request",
    "reask_request",
    "rejected_tool_message",
    "with_fallback",
]

_MODEL_FIELDS = ("model_name", "model", "model_id")


def _override(request: Any, **changes: Any) -> Any:
    override = getattr(request, "override", None)
    if callable(override):
        return override(**changes)
    return dataclasses.replace(request, **changes)  # pragma: no cover - releases before override()


def reask_request(request: ModelRequest[Any], rejected: OutputRejected) -> ModelRequest[Any]:
    """``request`` with the rejected answer and the check's feedback appended."""
    messages = list(request.messages)
    answer = rejected.output.raw if rejected.output is not None else None
    # The rejected answer gives the model its context; one asking for tools is left out, because
    # a tool call without its tool results is an invalid conversation for most providers.
    if isinstance(answer, AIMessage) and not answer.tool_calls:
        messages.append(answer)
    messages.append(HumanMessage(content=rejected.feedback))
    return _override(request, messages=messages)  # type: ignore[no-any-return]


def with_fallback(request: ModelRequest[Any], node: CallNode) -> ModelRequest[Any]:
    """``request`` on ``node.fallback_model`` when the chat model has a model-name field."""
    fallback = node.fallback_model
    if fallback is None:
        return request
    model = request.model
    fields = getattr(type(model), "model_fields", {})
    for name in _MODEL_FIELDS:
        current = getattr(model, name, None)
        if name in fields and isinstance(current, str):
            if current != fallback:
                request = _override(request, model=model.model_copy(update={name: fallback}))
            node.downgraded(current)
            return request
    return request


def check_tool_arguments(edited: Any) -> None:
    """LangChain tool calls take a dict of arguments (the ``editable`` check given to the kernel)."""
    if not isinstance(edited, dict):
        raise TypeError(f"tool call arguments must be a dict, got {type(edited).__name__}")


def edited_request(request: ToolCallRequest, node: CallNode) -> ToolCallRequest:
    if node.edited_arguments is None:
        return request
    call = {**request.tool_call, "args": dict(node.edited_arguments)}
    return _override(request, tool_call=call)  # type: ignore[no-any-return]


def rejected_tool_message(request: ToolCallRequest, rejected: ToolCallRejected) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(
        content=f"Tool call rejected: {rejected.message}",
        name=call["name"],
        tool_call_id=call["id"],
        status="error",
    )
