"""``AskForMore``: at its cost or step limit a context asks a person for more instead of halting.

``ExecutionContext(..., on_limit=AskForMore(approver, add_usd=0.5))`` (or a middleware's
``on_limit=``): when a call would pass the context's own ``max_cost_usd`` / ``max_steps``, the
kernel stops before it and this asks ``approver`` -- an :class:`~veronica_mw.ApprovalQueue` or any
sync/async callable, as for ``RequireApproval`` -- whether to raise that limit. Approve: raised by
``add_usd`` / ``add_steps`` (never past ``max_usd`` / ``max_steps``); ``Edit({"add_usd": x})``:
raised by less; anything else (a rejection, no answer within ``timeout_s``, an error): the
ordinary halt, the decision in its detail. The first call at the limit asks; calls that hit it
meanwhile wait for the same decision (see :mod:`veronica_mw.kernel._escalate`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import math
import secrets
import threading
import time
from typing import Any

from ..kernel._escalate import ASKED, grant
from ..kernel._lineage import refuse
from ..kernel._state import ContextState
from .approval import ApprovalRequest, Approve, Approver, Edit, Reject, _bounded, _in_thread, _is_async

__all__ = ["AskForMore"]

# What a caller waits beyond the approver's timeout (scheduling, the grant itself).
_GRACE_S = 1.0
Outcome = tuple[float, int, str]  # (USD added, steps added, what was decided)


class Ask:
    """One refused caller's part in its level's pending ask (what the kernel's admission claimed:
    ``veronica_mw.kernel._escalate.claim``): the ``first`` caller asks, every caller waits."""

    __slots__ = ("ctx", "level", "i", "refusal", "future", "first")

    def __init__(self, claimed: tuple[Any, ...]) -> None:
        self.ctx: ContextState = claimed[0]
        self.level: ContextState = claimed[1]
        self.i: int = claimed[2]
        self.refusal: tuple[Any, str, bool] = claimed[3]
        self.future: concurrent.futures.Future[Outcome] = claimed[4]
        self.first: bool = claimed[5]

    def grant(self, outcome: Outcome) -> None:
        grant(self.level, self.future, *outcome)

    def settle(self, outcome: Outcome) -> bool:
        """Granted: admit the call again (unless a deadline passed meanwhile); else the ordinary
        halt, the decision in its detail."""
        if self.ctx._halted_now():
            return False
        if outcome[0] > 0 or outcome[1] > 0:
            return True
        reason, detail, reached = self.refusal
        refuse(self.ctx, self.i, (reason, f"{detail}; asked for more: {outcome[2]}", reached))
        return False


def _amount(value: Any, name: str, integer: bool) -> Any:
    if value is None:
        return None
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be {'an int' if integer else 'a number'} > 0, got {value!r}")
    return value if integer else float(value)


class AskForMore:
    """Ask ``approver`` for ``add_usd`` more (at the cost limit) or ``add_steps`` more (at the step
    limit); a limit whose ``add_*`` is None is never raised. ``max_usd`` / ``max_steps``: the most
    the limit may ever reach (None: no cap). ``timeout_s``: how long a person may take (a
    context's deadline ends the wait sooner). One instance may serve many contexts (a middleware's
    requests): each context has its own pending ask."""

    def __init__(
        self,
        approver: Approver,
        *,
        add_usd: float | None = None,
        add_steps: int | None = None,
        max_usd: float | None = None,
        max_steps: int | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        if not callable(approver):
            raise TypeError(
                f"approver must be an ApprovalQueue or a callable (request) -> answer, got {approver!r}"
            )
        self.add_usd: float | None = _amount(add_usd, "add_usd", False)
        self.add_steps: int | None = _amount(add_steps, "add_steps", True)
        if self.add_usd is None and self.add_steps is None:
            raise ValueError("give add_usd= and/or add_steps=: what a person is asked to add")
        self.max_usd: float | None = _amount(max_usd, "max_usd", False)
        self.max_steps: int | None = _amount(max_steps, "max_steps", True)
        self.timeout_s: float = _amount(timeout_s, "timeout_s", False)
        self.approver = approver

    # -- the offer and the request ------------------------------------------------------------------

    def _offer(self, level: ContextState, dimension: str) -> tuple[float, str]:
        """How much may be added to ``dimension`` of ``level`` now (0: nothing; then why)."""
        config = level._ledger.config
        if dimension == "cost":
            add, cap, limit, name = self.add_usd, self.max_usd, config.max_cost_usd, "max_usd"
        else:
            add, cap, limit, name = self.add_steps, self.max_steps, config.max_steps, "max_steps"
        if add is None:
            return 0.0, f"on_limit does not raise the {dimension} limit"
        room = add if cap is None else min(add, cap - limit)
        if room <= 1e-9:  # float sums of grants may leave a hair below the cap
            return 0.0, f"{name}={cap:g} reached: no more may be added"
        return float(room), ""

    def _request(self, ask: Ask, dimension: str, offer: float, wait_s: float | None) -> ApprovalRequest:
        level = ask.level
        snapshot = level.get_snapshot()
        limit = "max_cost_usd" if dimension == "cost" else "max_steps"
        arguments = {
            "context": level._name,
            "chain_id": level.chain_id,
            "path": level.attributes.get("path", level._name),
            "limit": limit,
            "limit_value": getattr(level._ledger.config, limit),
            "reached": ask.refusal[1],
            ("add_usd" if dimension == "cost" else "add_steps"): offer if dimension == "cost" else int(offer),
        }
        usage = {
            "steps_used": snapshot.step_count,
            "cost_usd_used": round(snapshot.cost_usd_accumulated, 9),
            "cost_usd_reserved": round(snapshot.cost_usd_reserved, 9),
            "retries_used": snapshot.retries_used,
            "limits": level._ledger.config.as_dict(),
        }
        timeout_s = self.timeout_s if wait_s is None else max(0.001, min(self.timeout_s, wait_s))
        request = ApprovalRequest(
            secrets.token_hex(8), level.chain_id, f"raise {limit}", arguments, usage, timeout_s=timeout_s
        )
        level.add_event(
            "escalation_requested", f"{limit} reached: asks for {offer:g} more", request_id=request.id,
            limit=limit, offer=offer,
        )  # fmt: skip
        return request

    def _grant(self, dimension: str, offer: float, answer: Any) -> Outcome:
        """The approver's answer as ``(add_usd, add_steps, note)``: fail closed on anything odd."""
        who = getattr(answer, "approver", None)
        by = f" by {who}" if who else ""
        if answer is True or isinstance(answer, Approve):
            granted, note = offer, f"approved{by}"
        elif isinstance(answer, Edit):
            key = "add_usd" if dimension == "cost" else "add_steps"
            value = answer.arguments.get(key) if isinstance(answer.arguments, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                return 0.0, 0, f"rejected: the edit gives no valid {key} ({value!r})"
            granted, note = min(float(value), offer), f"approved {key}={min(value, offer):g}{by}"
        elif isinstance(answer, Reject):
            return 0.0, 0, f"rejected{by}: {answer.message or 'rejected by the approver'}"
        elif answer is False:
            return 0.0, 0, "rejected by the approver"
        elif isinstance(answer, (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)):
            return 0.0, 0, "no decision in time"
        elif isinstance(answer, BaseException):
            return 0.0, 0, f"approver failed: {type(answer).__name__}: {answer}"
        else:
            return 0.0, 0, f"malformed answer {answer!r}"
        if dimension == "cost":
            return granted, 0, note
        return 0.0, int(granted), note

    # -- the kernel's protocol (see veronica_mw.kernel._escalate) -----------------------------------

    def _wait_s(self, ask: Ask) -> float | None:
        ends = [level._deadline for level in (ask.ctx, ask.level) if level._deadline]
        return max(0.0, min(ends) - time.monotonic()) if ends else None

    def _bound(self, wait_s: float | None) -> float:
        return self.timeout_s + _GRACE_S if wait_s is None else min(wait_s, self.timeout_s + _GRACE_S)

    def ask(self, claimed: tuple[Any, ...]) -> bool:
        """Blocking: the first caller asks (an async approver runs on a helper thread's loop), the
        others wait for its decision; whether to admit the call again."""
        ask = Ask(claimed)
        wait_s = self._wait_s(ask)
        if ask.first:
            decided: Outcome = (0.0, 0, "the asking call was interrupted")
            try:
                decided = self._decide_blocking(ask, wait_s)
            finally:  # whatever happens, the waiters get a decision
                ask.grant(decided)
        try:
            outcome = ask.future.result(self._bound(wait_s))
        except concurrent.futures.TimeoutError:
            outcome = (0.0, 0, "no decision before the deadline")
        return ask.settle(outcome)

    async def aask(self, claimed: tuple[Any, ...]) -> bool:
        """:meth:`ask` without blocking the event loop."""
        ask = Ask(claimed)
        wait_s = self._wait_s(ask)
        if ask.first:
            outcome: Outcome = (0.0, 0, "the asking call was cancelled")
            try:
                outcome = await self._decide(ask, wait_s)
            finally:
                ask.grant(outcome)
        try:
            shared = asyncio.shield(asyncio.wrap_future(ask.future))
            outcome = await asyncio.wait_for(shared, self._bound(wait_s))
        except (TimeoutError, asyncio.TimeoutError):
            outcome = (0.0, 0, "no decision before the deadline")
        return ask.settle(outcome)

    def _prepare(self, ask: Ask, wait_s: float | None) -> tuple[str, float, Any]:
        dimension = ASKED[ask.refusal[0]]
        offer, why = self._offer(ask.level, dimension)
        return dimension, offer, (self._request(ask, dimension, offer, wait_s) if offer > 0 else why)

    def _decide_blocking(self, ask: Ask, wait_s: float | None) -> Outcome:
        try:
            dimension, offer, request = self._prepare(ask, wait_s)
            if isinstance(request, str):
                return 0.0, 0, request
            outcome: list[Any] = []
            worker = threading.Thread(
                target=contextvars.copy_context().run, args=(self._ask_on_thread, request, outcome),
                name="veronica-mw-ask-for-more", daemon=True,
            )  # fmt: skip
            worker.start()
            worker.join(request.timeout_s + 0.25)  # a stuck sync approver is abandoned
            return self._grant(dimension, offer, outcome[0] if outcome else TimeoutError())
        except Exception as exc:  # fail closed: the ordinary halt
            return 0.0, 0, f"on_limit failed: {type(exc).__name__}: {exc}"

    def _ask_on_thread(self, request: ApprovalRequest, outcome: list[Any]) -> None:
        try:
            answer = self.approver(request)
            if asyncio.iscoroutine(answer) or hasattr(answer, "__await__"):
                answer = asyncio.run(_bounded(answer, max(0.0, request.expires - time.time())))
        except BaseException as exc:  # reported as the decision, never raised on this thread
            answer = exc
        outcome.append(answer)

    async def _decide(self, ask: Ask, wait_s: float | None) -> Outcome:
        try:
            dimension, offer, request = self._prepare(ask, wait_s)
            if isinstance(request, str):
                return 0.0, 0, request
            try:
                if _is_async(self.approver):
                    answer = await asyncio.wait_for(self.approver(request), request.timeout_s)
                else:  # a sync approver may block: a thread of its own, the loop stays free
                    answer = await asyncio.wait_for(_in_thread(self.approver, request), request.timeout_s)
                    if hasattr(answer, "__await__"):
                        answer = await _bounded(answer, max(0.0, request.expires - time.time()))
            except Exception as exc:  # a timeout included
                answer = exc
            return self._grant(dimension, offer, answer)
        except Exception as exc:
            return 0.0, 0, f"on_limit failed: {type(exc).__name__}: {exc}"

    def __repr__(self) -> str:
        return (
            f"AskForMore({self.approver!r}, add_usd={self.add_usd}, add_steps={self.add_steps}, "
            f"max_usd={self.max_usd}, max_steps={self.max_steps}, timeout_s={self.timeout_s:g})"
        )
