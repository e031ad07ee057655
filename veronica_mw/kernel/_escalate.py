"""on_limit: a level at its own cost or step limit asks for more before it halts, one ask at a time.

Admission claims an :class:`Ask` under the level's lock; ``level._on_limit.ask(ask)`` (or ``aask``)
decides it -- the first caller asks and calls :meth:`Ask.grant`, the others wait on ``future`` --
and :meth:`Ask.settle` says whether to admit the call again (``veronica_mw.control.AskForMore``)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from ._lineage import _level, refuse
from ._state import ContextState
from .reasons import HaltReason

ASKED = {HaltReason.STEP_LIMIT: "steps", HaltReason.BUDGET_EXCEEDED: "cost"}


@dataclass(slots=True)
class Ask:
    """One refused caller's part in its level's pending ask (``first``: this caller asks)."""

    ctx: ContextState
    level: ContextState
    i: int
    refusal: tuple[Any, str, bool]
    future: Future[tuple[float, int, str]]
    first: bool

    def grant(self, usd: float, steps: int, note: str) -> None:
        """The decision: raise the level's limit by it (under the lock), record it, wake the waiters."""
        level, ledger = self.level, self.level._ledger
        usd, steps = max(0.0, usd), max(0, steps)
        with ledger.lock:
            config = replace(
                ledger.config, max_cost_usd=ledger.config.max_cost_usd + usd,
                max_steps=ledger.config.max_steps + steps,
            )  # fmt: skip
            ledger.raise_to(config)
            level.config, level._asking = config, None
        if usd or steps:
            limits = {"max_cost_usd": config.max_cost_usd, "max_steps": config.max_steps}
            level.add_event("escalation_granted", f"+{usd:g} USD, +{steps} steps: {note}",
                            add_usd=usd, add_steps=steps, **limits)  # fmt: skip
        else:
            level.add_event("escalation_rejected", note)
        self.future.set_result((usd, steps, note))

    def settle(self, outcome: tuple[float, int, str]) -> bool:
        """Whether to admit the call again; no grant is the ordinary halt, the decision in its detail."""
        if self.ctx._halted_now():  # a deadline passed while a person decided
            return False
        if outcome[0] > 0 or outcome[1] > 0:
            return True
        reason, detail, reached = self.refusal
        refuse(self.ctx, self.i, (reason, f"{detail}; asked for more: {outcome[2]}", reached))
        return False


def claim(ctx: ContextState, i: int, refusal: Any) -> Ask | None:
    """Under the level's lock: the ask for a refusal by its own cost or step limit, if it has on_limit."""
    level = _level(ctx, i)
    if level._on_limit is None or refusal[0] not in ASKED:
        return None
    first = level._asking is None
    if first:
        level._asking = Future()
    return Ask(ctx, level, i, refusal, level._asking, first)
