"""Cost of one AG2 0.14 model call, read from its ``OpenAIWrapper``'s usage summary.

AG2's hooks see the extracted reply, not the raw response, so the usage of a call is the change
of ``client.actual_usage_summary`` (``{"total_cost": ..., "<model>": {"cost", "prompt_tokens",
"completion_tokens", ...}}``) across it. ``actual`` (not ``total``) excludes cache hits, which
cost nothing. Framework-free: it only reads mappings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import CallNode, TokenUsage

UsageSnapshot = dict[str, tuple[int, int, float]]


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        return 0.0
    return float(value)


def usage_snapshot(client: Any) -> UsageSnapshot:
    """Per model: (prompt tokens, completion tokens, cost) the client has reported so far."""
    summary = getattr(client, "actual_usage_summary", None)
    if not isinstance(summary, Mapping):
        return {}
    snapshot: UsageSnapshot = {}
    for model, entry in summary.items():
        if isinstance(entry, Mapping):
            snapshot[str(model)] = (
                int(_number(entry.get("prompt_tokens"))),
                int(_number(entry.get("completion_tokens"))),
                _number(entry.get("cost")),
            )
    return snapshot


def usage_delta(before: UsageSnapshot, after: UsageSnapshot) -> tuple[TokenUsage | None, str | None, float]:
    """(tokens, model, client-reported cost) of what happened between two snapshots."""
    changed = [model for model, value in after.items() if before.get(model) != value]
    if not changed:
        return None, None, 0.0
    prompt = completion = 0
    cost = 0.0
    for model in changed:
        old = before.get(model, (0, 0, 0.0))
        new = after[model]
        prompt += max(new[0] - old[0], 0)
        completion += max(new[1] - old[1], 0)
        cost += max(new[2] - old[2], 0.0)
    return TokenUsage(prompt, completion), changed[0] if len(changed) == 1 else None, cost


def commit_llm(node: CallNode, client: Any, before: UsageSnapshot, response: Any = None) -> None:
    """Commit ``node`` with the cost the client reported, else its token usage priced by the kernel.

    A client-reported cost wins because it honours a ``price`` set in the AG2 ``llm_config``;
    custom model clients usually report 0, and then genai-prices prices the tokens.
    """
    tokens, model, cost = usage_delta(before, usage_snapshot(client))
    result: dict[str, Any] = {} if response is None else {"result": response}
    if cost > 0.0:
        node.commit(**result, cost_usd=cost)
    elif tokens is not None:
        node.commit(**result, usage=tokens, model=model)
    else:
        node.commit(**result)
