"""on_limit: a level at its own cost or step limit asks for more before it halts, one ask at a time.
Admission claims the ask; ``level._on_limit`` (``veronica_mw.control.AskForMore``) asks and waits."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from ._lineage import _level
from ._state import ContextState
from .reasons import HaltReason

ASKED = {HaltReason.STEP_LIMIT: "steps", HaltReason.BUDGET_EXCEEDED: "cost"}


def claim(ctx: ContextState, i: int, refusal: Any) -> tuple[Any, ...] | None:
    """Under the level's lock, for a refusal by its own cost or step limit when it has on_limit:
    ``(ctx, level, i, refusal, future, first)``; the first caller asks, every caller waits on ``future``."""
    level = _level(ctx, i)
    if level._on_limit is None or refusal[0] not in ASKED:
        return None
    first = level._asking is None
    if first:
        level._asking = Future()
    return ctx, level, i, refusal, level._asking, first


def grant(level: ContextState, future: Future[Any], usd: float, steps: int, note: str) -> None:
    """The decision: raise the level's limit by it (under its lock), record it, wake the waiters."""
    ledger, usd, steps = level._ledger, max(0.0, usd), max(0, steps)
    with ledger.lock:
        config = replace(ledger.config, max_cost_usd=ledger.config.max_cost_usd + usd,
                         max_steps=ledger.config.max_steps + steps)  # fmt: skip
        ledger.raise_to(config)
        level.config, level._asking = config, None
    granted, limits = bool(usd or steps), {"max_cost_usd": config.max_cost_usd, "max_steps": config.max_steps}
    level.add_event("escalation_granted" if granted else "escalation_rejected",
                    f"+{usd:g} USD, +{steps} steps: {note}" if granted else note,
                    add_usd=usd, add_steps=steps, **limits)  # fmt: skip
    future.set_result((usd, steps, note))
