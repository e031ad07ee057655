"""What a Bedrock request will cost and what its response reported: plans and outcomes.

``converse``/``converse_stream`` share one request shape (``messages``, ``system``, ``toolConfig``,
``inferenceConfig.maxTokens``). ``invoke_model`` sends the model's own JSON body, recognized by its
shape, not its model id (inference profiles and ARNs name models differently):

- Anthropic messages (``anthropic_version`` / ``max_tokens``): usage ``input_tokens``/``output_tokens``;
- Amazon Nova (``messages`` + ``inferenceConfig``, ``max_new_tokens`` or ``maxTokens``): ``usage``
  ``inputTokens``/``outputTokens``;
- a ``prompt`` body: Meta Llama (``max_gen_len``; usage ``prompt_token_count``/
  ``generation_token_count``), Mistral (``max_tokens``);
- Amazon Titan text (``inputText``, ``textGenerationConfig.maxTokenCount``);
- anything else: every string of the body is counted as input, the configured default as output.

Bedrock's ``x-amzn-bedrock-input-token-count`` / ``-output-token-count`` response headers, when
present, are the usage of any invoke_model response; without them or a usage in the body, the
call is charged an estimate from the generated text (every string of an unknown body) -- never $0.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from ..kernel.pricing import TokenUsage
from ._provider_calls import Outcome, Plan, limit, text_tokens

__all__ = [
    "PROVIDER",
    "converse_outcome",
    "converse_plan",
    "invoke_body",
    "invoke_outcome",
    "invoke_plan",
    "strings",
]

PROVIDER = "aws"  # genai-prices provider id of Bedrock


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def converse_plan(body: Mapping[str, Any], model: str | None, operation: str) -> Plan:
    """The plan of a converse/converse_stream request body (``modelId`` travels in the URL)."""
    output = limit(_mapping(body.get("inferenceConfig")), "maxTokens")
    tokens_in = text_tokens(body.get("messages"), body.get("system"), body.get("toolConfig"))
    return Plan(operation, model, PROVIDER, tokens_in, output, "inferenceConfig.maxTokens")


def usage_of(usage: Any) -> TokenUsage | None:
    """A Converse ``usage`` (also Nova's invoke body, whose cache counts are named ``...Count``)."""
    if not isinstance(usage, Mapping):
        return None
    cached = _count(usage.get("cacheReadInputTokens")) or _count(usage.get("cacheReadInputTokenCount"))
    written = _count(usage.get("cacheWriteInputTokens")) or _count(usage.get("cacheWriteInputTokenCount"))
    total_in = _count(usage.get("inputTokens")) + cached + written
    return TokenUsage(total_in, _count(usage.get("outputTokens")), cached, written)


def _content_chars(blocks: Any) -> int:
    """Generated characters of Converse (or Nova) content blocks: text, tool calls, reasoning."""
    chars = 0
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, Mapping):
            continue
        text = block.get("text")
        chars += len(text) if isinstance(text, str) else 0
        tool = block.get("toolUse")
        if isinstance(tool, Mapping):
            chars += len(str(tool.get("name", ""))) + len(json.dumps(tool.get("input", ""), default=str))
        reasoning = _mapping(_mapping(block.get("reasoningContent")).get("reasoningText")).get("text")
        chars += len(reasoning) if isinstance(reasoning, str) else 0
    return chars


def converse_outcome(parsed: Mapping[str, Any]) -> Outcome:
    message = _mapping(_mapping(parsed.get("output")).get("message"))
    return usage_of(parsed.get("usage")), None, _content_chars(message.get("content"))


def invoke_body(raw: Any) -> dict[str, Any] | None:
    """The JSON object of an invoke_model ``body`` (bytes or str), or None when it is not one."""
    if isinstance(raw, (bytes, bytearray, str)):
        try:
            body = json.loads(raw)
        except ValueError:
            return None
        return body if isinstance(body, dict) else None
    return None


def _family(body: Mapping[str, Any]) -> str:
    if "anthropic_version" in body or ("messages" in body and "max_tokens" in body):
        return "anthropic"
    if "messages" in body:
        return "nova"
    if "prompt" in body:
        return "prompt"
    if "inputText" in body:
        return "titan"
    return "unknown"


def invoke_plan(
    body: Mapping[str, Any] | None, raw: Any, model: str | None, operation: str = "bedrock.invoke_model"
) -> Plan:
    """The plan of an invoke_model request; ``body``: its JSON object (None: not JSON, ``raw``)."""
    if body is None:
        text = raw.decode(errors="replace") if isinstance(raw, (bytes, bytearray)) else str(raw or "")
        return Plan(operation, model, PROVIDER, text_tokens(text), limit({}))
    family = _family(body)
    if family == "anthropic":
        tokens_in = text_tokens(body.get("messages"), body.get("system"), body.get("tools"))
        return Plan(operation, model, PROVIDER, tokens_in, limit(body, "max_tokens"), "max_tokens")
    if family == "nova":
        config = _mapping(body.get("inferenceConfig"))
        field = "maxTokens" if "maxTokens" in config else "max_new_tokens"
        tokens_in = text_tokens(body.get("messages"), body.get("system"), body.get("toolConfig"))
        return Plan(operation, model, PROVIDER, tokens_in, limit(config, field), f"inferenceConfig.{field}")
    if family == "prompt":  # Meta Llama's max_gen_len; Mistral's (and others') max_tokens
        field = "max_tokens" if "max_tokens" in body and "max_gen_len" not in body else "max_gen_len"
        return Plan(operation, model, PROVIDER, text_tokens(body.get("prompt")), limit(body, field), field)
    if family == "titan":
        config = _mapping(body.get("textGenerationConfig"))
        output = limit(config, "maxTokenCount")
        field = "textGenerationConfig.maxTokenCount"
        return Plan(operation, model, PROVIDER, text_tokens(body.get("inputText")), output, field)
    return Plan(operation, model, PROVIDER, text_tokens(body), limit({}))


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def _header_usage(headers: Mapping[str, Any]) -> TokenUsage | None:
    found = [headers.get(f"x-amzn-bedrock-{kind}-token-count") for kind in ("input", "output")]
    counts = [int(value) for value in found if isinstance(value, str) and value.isdigit()]
    return TokenUsage(counts[0], counts[1]) if len(counts) == 2 else None


def _body_usage(body: Mapping[str, Any]) -> TokenUsage | None:
    usage = body.get("usage")
    if isinstance(usage, Mapping) and "input_tokens" in usage:  # Anthropic
        cached = _count(usage.get("cache_read_input_tokens"))
        written = _count(usage.get("cache_creation_input_tokens"))
        total_in = _count(usage.get("input_tokens")) + cached + written
        return TokenUsage(total_in, _count(usage.get("output_tokens")), cached, written)
    if isinstance(usage, Mapping) and "inputTokens" in usage:  # Nova
        return usage_of(usage)
    if "prompt_token_count" in body or "generation_token_count" in body:  # Llama
        return TokenUsage(_count(body.get("prompt_token_count")), _count(body.get("generation_token_count")))
    if "inputTextTokenCount" in body:  # Titan
        results: Any = body.get("results")
        results = results if isinstance(results, list) else ()
        out = sum(_count(_mapping(r).get("tokenCount")) for r in results)
        return TokenUsage(_count(body.get("inputTextTokenCount")), out)
    return None


def _generated_chars(body: Mapping[str, Any]) -> int:
    content = body.get("content")
    if isinstance(content, list):  # Anthropic: text and tool_use blocks
        chars = 0
        for block in content:
            block = _mapping(block)
            text = block.get("text") if block.get("type") != "tool_use" else None
            chars += len(text) if isinstance(text, str) else 0
            if block.get("type") == "tool_use":
                chars += len(str(block.get("name", ""))) + len(
                    json.dumps(block.get("input", ""), default=str)
                )
            thinking = block.get("thinking")
            chars += len(thinking) if isinstance(thinking, str) else 0
        return chars
    if "output" in body:  # Nova
        return _content_chars(_mapping(_mapping(body.get("output")).get("message")).get("content"))
    if isinstance(body.get("generation"), str):  # Llama
        return len(body["generation"])
    if isinstance(body.get("results"), list):  # Titan
        return sum(len(s) for r in body["results"] for s in strings(_mapping(r).get("outputText")))
    return sum(len(s) for s in strings(body))  # unknown shape: all of it may be generated


def invoke_outcome(headers: Mapping[str, Any], data: bytes) -> Outcome:
    """The usage of an invoke_model response (headers, else body) and its generated characters."""
    body = invoke_body(data)
    tokens = _header_usage(headers)
    if tokens is None and body is not None:
        tokens = _body_usage(body)
    if body is None:
        return tokens, None, len(data.decode(errors="replace"))
    return tokens, None, _generated_chars(body)
