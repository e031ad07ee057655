"""``ModelOutput``: what an output check sees of a model call's result, whichever SDK produced it.

The text is read from the same objects the kernel reads usage from (``kernel/pricing.py``): OpenAI
chat completions, completions and Responses (SDK objects and dicts), Anthropic messages, LangChain
messages and generations, LlamaIndex chat and completion responses, and the plain strings and
message dicts CrewAI and AG2 hand back. Nothing here imports an SDK: fields are read by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ModelOutput", "extract_text"]

_TEXT_BLOCKS = frozenset({"text", "output_text"})


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _content_text(content: Any) -> str:
    """Text of a message ``content``: a string, or a list of blocks (OpenAI/Anthropic/LangChain)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
                continue
            kind = _get(block, "type")
            text = _get(block, "text")
            if isinstance(text, str) and (kind is None or kind in _TEXT_BLOCKS):
                parts.append(text)
        return "".join(parts)
    return str(content)


def _responses_text(output: Sequence[Any]) -> str:
    """Joined text of an OpenAI Responses ``output`` list (message items with output_text parts)."""
    parts = []
    for item in output:
        if _get(item, "type") in (None, "message"):
            parts.append(_content_text(_get(item, "content")))
    return "".join(parts)


def extract_text(result: Any) -> str:
    """The text a model produced, from any of the response shapes listed in the module docstring."""
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    if isinstance(result, (bytes, bytearray)):
        return bytes(result).decode("utf-8", "replace")
    text = _get(result, "output_text")  # OpenAI Responses SDK object: the joined text
    if isinstance(text, str):
        return text
    choices = _get(result, "choices")  # OpenAI chat completions (and completions)
    if isinstance(choices, Sequence) and not isinstance(choices, str) and choices:
        first = choices[0]
        message = _get(first, "message") or _get(first, "delta")
        if message is not None:
            return _content_text(_get(message, "content"))
        text = _get(first, "text")
        return text if isinstance(text, str) else ""
    generations = _get(result, "generations")  # LangChain LLMResult
    if isinstance(generations, Sequence) and generations:
        first = generations[0]
        if isinstance(first, Sequence) and first:
            first = first[0]
        return extract_text(first)
    message = _get(result, "message")  # LlamaIndex ChatResponse, LangChain ChatGeneration
    if message is not None and not isinstance(message, str):
        return _content_text(_get(message, "content"))
    content = _get(result, "content")  # LangChain messages, Anthropic Message, message dicts (AG2)
    if content is not None:
        return _content_text(content)
    output = _get(result, "output")  # OpenAI Responses as a dict
    if isinstance(output, Sequence) and not isinstance(output, str):
        return _responses_text(output)
    text = _get(result, "text")  # LangChain Generation, LlamaIndex CompletionResponse
    if isinstance(text, str):
        return text
    return str(result)


class ModelOutput:
    """One model call's result, as output checks see it.

    ``text``: the answer's text (see :func:`extract_text`); ``raw``: the result object itself;
    ``model``: the model that answered, when known; ``call_name``: the step's name
    (``WrapOptions.operation_name`` or the adapter's); ``chain_id``: the execution context's id.
    """

    __slots__ = ("raw", "model", "call_name", "chain_id", "_text")

    def __init__(
        self,
        raw: Any,
        *,
        model: str | None = None,
        call_name: str = "",
        chain_id: str = "",
        text: str | None = None,
    ) -> None:
        self.raw = raw
        self.model = model
        self.call_name = call_name
        self.chain_id = chain_id
        self._text = text

    @property
    def text(self) -> str:
        if self._text is None:  # read on first use: a check may only look at ``raw``
            self._text = extract_text(self.raw)
        return self._text

    def __repr__(self) -> str:
        preview = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        return f"ModelOutput({preview!r}, model={self.model!r}, call_name={self.call_name!r})"
