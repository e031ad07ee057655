"""``audit show``: runs drawn as a tree (contexts > calls, events, halts, nested contexts).

On a terminal the tree has box-drawing glyphs and colour; into a pipe or file it is plain text
indented two spaces per level, so it greps and diffs cleanly.
"""

from __future__ import annotations

import io
from typing import Any, TextIO, overload

from ..observe.audit_runs import Call, Run, roots
from ._style import Style

_Node = tuple[str, list[Any]]  # (text, children)


@overload
def render_runs(
    runs: dict[str, Run], selected: list[Run] | None, *, as_json: bool
) -> list[dict[str, Any]]: ...
@overload
def render_runs(runs: dict[str, Run], selected: list[Run] | None, *, stream: TextIO) -> list[str]: ...
def render_runs(
    runs: dict[str, Run], selected: list[Run] | None, *, as_json: bool = False, stream: TextIO | None = None
) -> Any:
    top = selected if selected is not None else roots(runs)
    if as_json:
        return [_run_json(run) for run in top]
    style = Style(stream if stream is not None else io.StringIO())
    lines: list[str] = []
    for run in top:
        text, children = _run_node(run, style)
        lines.append(text)
        _draw(children, "", lines, style.terminal)
    if not top:
        lines.append("no contexts in the log")
    return lines


def _draw(children: list[_Node], prefix: str, lines: list[str], glyphs: bool) -> None:
    for index, (text, grandchildren) in enumerate(children):
        last = index == len(children) - 1
        if glyphs:
            lines.append(f"{prefix}{'└── ' if last else '├── '}{text}")
            _draw(grandchildren, prefix + ("    " if last else "│   "), lines, glyphs)
        else:
            lines.append(f"{prefix}  {text}")
            _draw(grandchildren, prefix + "  ", lines, glyphs)


def _money(value: Any) -> str:
    return f"${float(value or 0.0):.6f}"


def _run_node(run: Run, style: Style) -> _Node:
    limits = run.limits
    parts = [style(run.label, "bold"), style(f"[chain {run.chain}]", "dim")]
    if limits:
        parts.append(
            f"limits ${limits.get('max_cost_usd', 0):g}/{limits.get('max_steps', 0)} steps/"
            f"{limits.get('max_retries_total', 0)} retries"
            + (f"/{limits['timeout_ms']:g} ms" if limits.get("timeout_ms") else "")
        )
    usage = run.usage or (run.halt or {}).get("usage")
    if usage:
        spent = _money(usage.get("cost_usd"))
        parts.append(f"used {usage.get('steps', 0)} steps {spent} in {usage.get('elapsed_ms', 0):.1f} ms")
    if run.halt is not None:
        parts.append(style(f"halted: {run.halt.get('reason')}", "red", "bold"))
    elif run.usage is None:
        parts.append(style("not ended", "yellow"))
    else:
        parts.append(style("ok", "green"))
    entries: list[tuple[float, _Node]] = [(c.t, _call_node(c, style)) for c in run.call_tree()]
    for event in run.events:
        entries.append(
            (
                float(event.get("t") or 0.0),
                (style(f"event {event.get('kind')}: {event.get('detail')}", "yellow"), []),
            )
        )
    if run.halt is not None:
        halt = run.halt
        text = style(f"halt {halt.get('reason')}: {halt.get('detail')}", "red")
        entries.append((float(halt.get("t") or 0.0), (text, [])))
    for child in run.children:
        entries.append((child.started, _run_node(child, style)))
    entries.sort(key=lambda e: e[0])
    return " ".join(parts), [node for _, node in entries]


def _call_node(call: Call, style: Style) -> _Node:
    parts = [style(f"{call.kind} {call.name}", "cyan"), f"#{call.call}"]
    if call.model:
        parts.append(call.model)
    if call.tokens_in or call.tokens_out:
        parts.append(f"{call.tokens_in}->{call.tokens_out} tokens")
    parts += [_money(call.cost_usd), style.status(call.status), f"{call.duration_ms:.1f} ms"]
    if call.error:
        parts.append(style(call.error, "red"))
    return " ".join(parts), [_call_node(child, style) for child in call.children]


def _run_json(run: Run) -> dict[str, Any]:
    return {
        "chain": run.chain,
        "parent_chain": run.parent_chain,
        "label": run.label,
        "attributes": run.attributes,
        "limits": run.limits,
        "config_digest": run.config_digest,
        "usage": run.usage,
        "halt": run.halt,
        "events": run.events,
        "calls": [_call_json(c) for c in run.call_tree()],
        "children": [_run_json(child) for child in run.children],
    }


def _call_json(call: Call) -> dict[str, Any]:
    data = call.as_dict()
    data["children"] = [_call_json(c) for c in call.children]
    return data
