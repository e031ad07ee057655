"""examples/escalation_app.py runs offline: an approved request, a rejected one, a job granted less."""

from __future__ import annotations

from collections.abc import Callable


def test_escalation_example(run_example: Callable[[str], str]) -> None:
    out = run_example("escalation_app.py")
    assert "approve: 200 {'notes': 5, 'steps_used': 5, 'max_steps': 8}" in out
    assert "reject: 429 max_steps=3 reached; asked for more: rejected by bob: enough for today" in out
    assert "pending: raise max_steps for job " in out
    assert "job: {'status': 'done', 'notes': 5, 'steps_used': 5, 'max_steps': 5}" in out
    # 5 approved + 3 before the rejection + 5 in the job: a refused step never ran.
    assert "searches run: 13" in out
