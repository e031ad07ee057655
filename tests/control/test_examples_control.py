"""examples/approvals_app.py runs offline and shows an approval, a rejection and an edit."""

from __future__ import annotations

from collections.abc import Callable


def test_approvals_example(run_example: Callable[[str], str]) -> None:
    out = run_example("approvals_app.py")
    assert "approve: 200 email to cfo@example.com sent" in out
    assert "reject: 403 approval: tool 'send_email' rejected: not to the whole company" in out
    assert "edit: 200 email to ceo-office@example.com sent" in out
    assert out.count("decided by alice") == 2 and out.count("decided by bob") == 1
    assert "emails sent: ['cfo@example.com', 'ceo-office@example.com']" in out
