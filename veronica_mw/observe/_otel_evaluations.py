"""Output check results on model-call spans: one ``gen_ai.evaluation.result`` event per check.

The GenAI conventions' evaluation event: ``gen_ai.evaluation.name`` (the check), ``.score.value``
(when the check gave a score), ``.score.label`` (``pass`` or ``fail``) and ``.explanation`` (the
check's message). The results come from the call's node (``CallNode.checks``), where the kernel's
output verification leaves every result it produced, passes included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ..kernel.graph import CallNode

EVENT = "gen_ai.evaluation.result"


def record_evaluations(span: Span, node: CallNode) -> None:
    for result in node.checks:
        attributes: dict[str, Any] = {
            "gen_ai.evaluation.name": str(getattr(result, "name", "")),
            "gen_ai.evaluation.score.label": "pass" if getattr(result, "passed", False) else "fail",
        }
        score = getattr(result, "score", None)
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            attributes["gen_ai.evaluation.score.value"] = float(score)
        message = getattr(result, "message", "")
        if message:
            attributes["gen_ai.evaluation.explanation"] = str(message)
        span.add_event(EVENT, attributes)
