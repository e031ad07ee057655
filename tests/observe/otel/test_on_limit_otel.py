"""An escalation is a span event like the context's other events, against the real OTel SDK."""

from __future__ import annotations

from veronica_mw import Approve, AskForMore, ExecutionConfig, ExecutionContext

from .otel_support import Telemetry, attrs, otel

__all__ = ["otel"]  # the fixture, re-exported for pytest


def test_escalation_granted_is_a_span_event(otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    asked: list[object] = []

    def approver(request: object) -> Approve:
        asked.append(request)
        return Approve(approver="alice")

    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0),
        on_limit=AskForMore(approver, add_steps=2),
    )
    with tracer.start_as_current_span("request"), ctx:
        for _ in range(3):
            ctx.call_tool(lambda: None)
    assert len(asked) == 1
    events = {e.name: e for e in otel.span("request").events}
    assert set(events) == {"veronica.escalation_requested", "veronica.escalation_granted"}
    granted = attrs(events["veronica.escalation_granted"])
    assert granted["veronica.add_steps"] == 2 and granted["veronica.max_steps"] == 3
    assert "approved by alice" in granted["veronica.detail"]
    assert len(otel.spans("execute_tool tool")) == 3
