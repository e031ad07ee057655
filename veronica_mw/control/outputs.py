"""``ModelOutput``: what an output check sees of a model call's result, whichever SDK produced it.

A result is read as every choice's text and every tool call's name and arguments (as JSON text),
from the same objects the kernel reads usage from (``kernel/pricing.py``): OpenAI chat completions
(every choice, ``tool_calls``), completions and Responses (``message`` and ``function_call``
items; SDK objects and dicts), Anthropic messages (``text`` and ``tool_use`` blocks), Google Gemini
(every candidate's ``text`` and ``functionCall`` parts), LangChain messages and generations
(``tool_calls``), LlamaIndex chat and completion responses (tool calls in ``additional_kwargs``
or ``ToolCallBlock``), Pydantic AI responses (text and tool-call parts), and the plain strings and
message dicts CrewAI and AG2 hand back. A result none of these describe has no text (never its
``repr()``). Nothing here imports an SDK: fields are read by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ModelOutput", "ToolCall", "extract_text"]

_TEXT_BLOCKS = frozenset({"text", "output_text"})
_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "function_call", "tool_call"})


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for: its ``name`` and its ``arguments`` as JSON text
    (as the model sent them; an SDK's parsed arguments are dumped)."""

    name: str
    arguments: str

    def decoded_arguments(self) -> str:
        """The arguments re-encoded without ``\\u`` escapes, so a pattern sees ``sk-`` however
        the model spelled it in JSON; the text itself when it is not JSON."""
        try:
            return json.dumps(json.loads(self.arguments), ensure_ascii=False)
        except (ValueError, RecursionError):
            return self.arguments


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _seq(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _json_text(value: Any) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        value = dict(value)  # SDK argument maps (protobuf-like) as a plain dict
    return json.dumps(value, ensure_ascii=False, default=str)


class _Reader:
    """Collects the texts (one per choice) and tool calls of one result."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.tool_calls: list[ToolCall] = []

    def tool(self, name: Any, arguments: Any) -> None:
        self.tool_calls.append(ToolCall(str(name or ""), _json_text(arguments)))

    def content(self, content: Any) -> str:
        """Text of a message ``content`` (a string, or blocks); tool-use blocks are collected."""
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        if not _seq(content):
            return ""
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
                continue
            kind = _get(block, "type")
            text = _get(block, "text")
            if isinstance(text, str) and (kind is None or kind in _TEXT_BLOCKS):
                parts.append(text)
            elif kind in _TOOL_BLOCKS:  # Anthropic tool_use, LangChain tool_call blocks
                arguments = _get(block, "input")
                self.tool(_get(block, "name"), arguments if arguments is not None else _get(block, "args"))
        return "".join(parts)

    def message(self, message: Any) -> None:
        """An OpenAI/AG2 message (dict or SDK), a LangChain message or a LlamaIndex ChatMessage."""
        self.texts.append(self.content(_get(message, "content")))
        calls = _get(message, "tool_calls")
        if calls is None:
            kwargs = _get(message, "additional_kwargs")  # LlamaIndex keeps them here
            calls = _get(kwargs, "tool_calls") if isinstance(kwargs, Mapping) else None
        self.openai_calls(calls)
        blocks = _get(message, "blocks")  # LlamaIndex ToolCallBlock(tool_name, tool_kwargs)
        if calls is None and _seq(blocks):
            for block in blocks:
                if _get(block, "tool_name") is not None:
                    self.tool(_get(block, "tool_name"), _get(block, "tool_kwargs"))
        legacy = _get(message, "function_call")  # OpenAI's older single function call
        if legacy is not None and not isinstance(legacy, str):
            self.tool(_get(legacy, "name"), _get(legacy, "arguments"))

    def openai_calls(self, calls: Any) -> None:
        if not _seq(calls):
            return
        for call in calls:
            function = _get(call, "function")
            if function is not None:  # OpenAI shape: {"function": {"name", "arguments"}}
                self.tool(_get(function, "name"), _get(function, "arguments"))
            else:  # LangChain shape: {"name", "args"}
                args = _get(call, "args")
                self.tool(_get(call, "name"), args if args is not None else _get(call, "arguments"))

    def responses(self, output: Sequence[Any]) -> None:
        """An OpenAI Responses ``output`` list: message text joined, function calls collected."""
        parts = []
        for item in output:
            kind = _get(item, "type")
            if kind in (None, "message"):
                parts.append(self.content(_get(item, "content")))
            elif kind == "function_call":
                self.tool(_get(item, "name"), _get(item, "arguments"))
            elif kind == "custom_tool_call":
                self.tool(_get(item, "name"), json.dumps(_get(item, "input")))
        self.texts.append("".join(parts))

    def candidates(self, candidates: Sequence[Any]) -> None:
        """Google Gemini candidates: each one's text parts joined, function calls collected."""
        for candidate in candidates:
            parts = _get(_get(candidate, "content"), "parts") or []
            texts = []
            for part in parts if _seq(parts) else []:
                call = _get(part, "function_call") or _get(part, "functionCall")
                if call is not None:
                    self.tool(_get(call, "name"), _get(call, "args"))
                text = _get(part, "text")
                if isinstance(text, str) and not _get(part, "thought"):
                    texts.append(text)
            self.texts.append("".join(texts))

    def read(self, result: Any) -> None:
        if result is None:
            return
        if isinstance(result, str):
            self.texts.append(result)
            return
        if isinstance(result, (bytes, bytearray)):
            self.texts.append(bytes(result).decode("utf-8", "replace"))
            return
        output = _get(result, "output")  # OpenAI Responses (SDK object or dict)
        if _seq(output) and (_get(result, "object") == "response" or _get(result, "output_text") is not None):
            self.responses(output)
            joined = _get(result, "output_text")  # the SDK's own join of the message text
            if isinstance(joined, str):
                self.texts[-1] = joined
            return
        choices = _get(result, "choices")  # OpenAI chat completions (and completions): every choice
        if _seq(choices) and choices:
            for choice in choices:
                message = _get(choice, "message") or _get(choice, "delta")
                if message is not None:
                    self.message(message)
                else:
                    text = _get(choice, "text")
                    self.texts.append(text if isinstance(text, str) else "")
            return
        candidates = _get(result, "candidates")  # Google Gemini (before .text: that is a property)
        if _seq(candidates):
            self.candidates(candidates)
            return
        generations = _get(result, "generations")  # LangChain LLMResult: every generation
        if _seq(generations) and generations:
            for generation in generations:
                for item in generation if _seq(generation) else [generation]:
                    self.read(item)
            return
        message = _get(result, "message")  # LlamaIndex ChatResponse, LangChain ChatGeneration
        if message is not None and not isinstance(message, str):
            self.message(message)
            return
        parts = _get(result, "parts")  # Pydantic AI ModelResponse: text and tool-call parts
        if _seq(parts) and parts and all(_get(p, "part_kind") is not None for p in parts):
            texts = []
            for part in parts:
                kind = _get(part, "part_kind")
                if kind == "tool-call":
                    self.tool(_get(part, "tool_name"), _get(part, "args"))
                elif kind == "text" and isinstance(_get(part, "content"), str):
                    texts.append(_get(part, "content"))
            self.texts.append("".join(texts))
            return
        if _get(result, "content") is not None or _get(result, "tool_calls") is not None:
            self.message(result)  # LangChain messages, Anthropic Message, message dicts (AG2)
            return
        if _seq(output):
            self.responses(output)
            return
        text = _get(result, "text")  # LangChain Generation, LlamaIndex CompletionResponse
        if isinstance(text, str):
            self.texts.append(text)


def _read(result: Any) -> _Reader:
    reader = _Reader()
    reader.read(result)
    return reader


def extract_text(result: Any) -> str:
    """The first choice's text, from any of the shapes listed in the module docstring ("" if none)."""
    texts = _read(result).texts
    return texts[0] if texts else ""


class ModelOutput:
    """One model call's result, as output checks see it.

    ``texts``: every choice's (candidate's, generation's) text; ``text``: the first one's;
    ``tool_calls``: every tool call asked for (:class:`ToolCall`); :meth:`parts`: every string a
    content check should read (texts, tool names, arguments). ``raw``: the result object itself;
    ``model``: the model that answered, when known; ``call_name``: the step's name
    (``WrapOptions.operation_name`` or the adapter's); ``chain_id``: the execution context's id.
    """

    __slots__ = ("raw", "model", "call_name", "chain_id", "_text", "_reader")

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
        self._reader: _Reader | None = None

    def _read(self) -> _Reader:
        if self._reader is None:  # read on first use: a check may only look at ``raw``
            self._reader = _read(self.raw) if self._text is None else _Reader()
            if self._text is not None:
                self._reader.texts.append(self._text)
        return self._reader

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(self._read().texts)

    @property
    def text(self) -> str:
        texts = self._read().texts
        return texts[0] if texts else ""

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(self._read().tool_calls)

    def parts(self) -> Iterator[tuple[str, str]]:
        """``(where, text)`` for every string of the result: ``("choice 0", ...)``, ``("tool call 0
        name", ...)``, ``("tool call 0 arguments", ...)`` (and their unescaped form if it differs)."""
        reader = self._read()
        for index, text in enumerate(reader.texts):
            yield f"choice {index}", text
        for index, call in enumerate(reader.tool_calls):
            yield f"tool call {index} name", call.name
            yield f"tool call {index} arguments", call.arguments
            decoded = call.decoded_arguments()
            if decoded != call.arguments:
                yield f"tool call {index} arguments", decoded

    def __repr__(self) -> str:
        preview = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        calls = len(self._read().tool_calls)
        where = f"model={self.model!r}, call_name={self.call_name!r}"
        return f"ModelOutput({preview!r}, tool_calls={calls}, {where})"
