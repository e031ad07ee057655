"""ESCALATE: a person approves, edits or rejects a sensitive tool call before it runs.

``RequireApproval(tools, approver)`` is a runtime policy (give it to ``ExecutionContext(pipeline=...)``
or a middleware's ``policies=``) and the kernel's approval gate for matching tool calls: the kernel
asks it at admission, before the tool runs, and applies its verdict (see
:mod:`veronica_mw.kernel._verdicts`). The approver answers ``Approve()``, ``Reject(message)``,
``Edit(arguments)``, True or False; a timeout, an exception or any other answer is a rejection
(fail closed).
"""

from __future__ import annotations

import asyncio
import contextvars
import fnmatch
import inspect
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..kernel._control import GateVerdict
from ..kernel.policy import PolicyContext, PolicyDecision
from ._queue_auth import args_sha256

if TYPE_CHECKING:
    from ..kernel.execution import ExecutionContext
    from ..kernel.graph import CallNode

__all__ = ["ApprovalRequest", "Approve", "Edit", "Reject", "RequireApproval"]

logger = logging.getLogger("veronica_mw")
_ALLOWED = PolicyDecision(allowed=True, policy_type="approval")
ON_REJECT = ("halt", "message")


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One tool call waiting for a decision. ``usage``: what the run had used when it asked."""

    id: str
    chain_id: str
    tool: str
    arguments: Any
    usage: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    timeout_s: float = 60.0

    @property
    def expires(self) -> float:
        return self.created + self.timeout_s

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "chain_id": self.chain_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "usage": self.usage,
            "created": self.created,
            "expires": self.expires,
        }


# Who decided and when (an ApprovalQueue fills them in): recorded in the decision's event, not
# part of what the answer means (so Approve(approver="alice") == Approve()).


@dataclass(frozen=True, slots=True)
class Approve:
    """Run the tool as asked."""

    approver: str | None = field(default=None, kw_only=True, compare=False)
    decided_at: float | None = field(default=None, kw_only=True, compare=False)


@dataclass(frozen=True, slots=True)
class Reject:
    """Do not run the tool; ``message`` says why (to the agent, with ``on_reject="message"``)."""

    message: str = ""
    approver: str | None = field(default=None, kw_only=True, compare=False)
    decided_at: float | None = field(default=None, kw_only=True, compare=False)


@dataclass(frozen=True, slots=True)
class Edit:
    """Run the tool with these arguments instead (where the adapter can pass them)."""

    arguments: Any
    approver: str | None = field(default=None, kw_only=True, compare=False)
    decided_at: float | None = field(default=None, kw_only=True, compare=False)


Answer = Approve | Reject | Edit | bool
Approver = Callable[[ApprovalRequest], Any]


def _is_async(approver: Any) -> bool:
    return inspect.iscoroutinefunction(approver) or inspect.iscoroutinefunction(
        getattr(approver, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


class RequireApproval:
    """Before a tool call whose name matches ``tools`` (names or glob patterns) runs,
    ``approver(request)`` (sync or async) must approve it within ``timeout_s``.

    ``on_reject="halt"``: a rejection halts the run with ``policy_denied`` (403 problem+json under
    the middlewares). ``"message"``: the tool call answers the agent with the rejection message
    instead, where the adapter can (``ToolCallRejected`` elsewhere), and the run carries on.
    """

    def __init__(
        self,
        tools: str | Iterable[str],
        approver: Approver,
        *,
        timeout_s: float = 60.0,
        on_reject: str = "halt",
    ) -> None:
        patterns = (tools,) if isinstance(tools, str) else tuple(tools)
        if not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise ValueError(f"tools must be tool names or glob patterns, got {tools!r}")
        if not callable(approver):
            raise TypeError(
                f"approver must be a callable (request) -> Approve | Reject | Edit, got {approver!r}"
            )
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"timeout_s must be a number > 0, got {timeout_s!r}")
        if not math.isfinite(timeout_s):
            raise ValueError("timeout_s must be finite: an unanswered request must end as a rejection")
        if on_reject not in ON_REJECT:
            raise ValueError(f"on_reject must be 'halt' or 'message', got {on_reject!r}")
        self.tools = patterns
        self.approver = approver
        self.timeout_s = float(timeout_s)
        self.on_reject = on_reject

    # -- RuntimePolicy --------------------------------------------------------------------------------

    @property
    def policy_type(self) -> str:
        return "approval"

    def check(self, context: PolicyContext) -> PolicyDecision:
        """Never denies by itself: the kernel asks :meth:`decide` for the tool calls it gates."""
        return _ALLOWED

    def reset(self) -> None:
        pass

    # -- ApprovalGate ---------------------------------------------------------------------------------

    def gates(self, tool: str) -> bool:
        """Whether ``tool`` (the step's name) needs approval. Adapters that prefix their step names
        (CrewAI's ``crewai.tool:send_email``) match by the part after the last ``:`` too."""
        bare = tool.rpartition(":")[2]
        return any(fnmatch.fnmatchcase(tool, p) or fnmatch.fnmatchcase(bare, p) for p in self.tools)

    def _request(self, ctx: ExecutionContext, node: CallNode, arguments: Any) -> ApprovalRequest:
        snapshot = ctx.get_snapshot()
        usage = {
            "steps_used": snapshot.step_count,
            "cost_usd_used": round(snapshot.cost_usd_accumulated, 9),
            "retries_used": snapshot.retries_used,
            "limits": ctx.config.as_dict(),
        }
        request = ApprovalRequest(
            secrets.token_hex(8), ctx.chain_id, node.name, arguments, usage, timeout_s=self.timeout_s
        )
        detail = f"{node.name} waits for approval"
        ctx.add_event("approval_requested", detail, request_id=request.id, tool=node.name)
        return request

    def decide(self, ctx: ExecutionContext, node: CallNode, arguments: Any) -> GateVerdict:
        """Ask the approver and wait (blocking this thread) for at most ``timeout_s``."""
        request = self._request(ctx, node, arguments)
        outcome: list[Any] = []
        # The approver runs on a helper thread so that the timeout holds even for one that blocks;
        # an async approver gets a loop of its own there.
        worker = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._ask_blocking, request, outcome),
            name="veronica-mw-approval",
            daemon=True,
        )
        worker.start()
        # An async approver is ended by the helper's own wait_for at the deadline; the short grace
        # lets its answer (or its cleanup) arrive. A stuck sync approver is abandoned.
        worker.join(max(0.0, request.expires - time.time()) + 0.25)
        if not outcome:
            return self._verdict(ctx, request, TimeoutError())
        return self._verdict(ctx, request, outcome[0])

    def _ask_blocking(self, request: ApprovalRequest, outcome: list[Any]) -> None:
        try:
            answer = self.approver(request)
            if inspect.isawaitable(answer):
                remaining = max(0.0, request.expires - time.time())
                answer = asyncio.run(_bounded(answer, remaining))
        except BaseException as exc:  # reported as the verdict, never raised on this thread
            answer = exc
        outcome.append(answer)

    async def adecide(self, ctx: ExecutionContext, node: CallNode, arguments: Any) -> GateVerdict:
        """Ask the approver and await its answer for at most ``timeout_s``, without blocking the loop."""
        request = self._request(ctx, node, arguments)
        try:
            if _is_async(self.approver):
                answer = await asyncio.wait_for(self.approver(request), self.timeout_s)
            else:  # a sync approver may block: it runs in a thread, the loop stays free
                answer = await asyncio.wait_for(_in_thread(self.approver, request), self.timeout_s)
                if inspect.isawaitable(answer):
                    answer = await _bounded(answer, max(0.0, request.expires - time.time()))
        except Exception as exc:  # a timeout included: fail closed
            answer = exc
        return self._verdict(ctx, request, answer)

    def _verdict(self, ctx: ExecutionContext, request: ApprovalRequest, answer: Any) -> GateVerdict:
        on_reject = self.on_reject
        if answer is True or isinstance(answer, Approve):
            verdict = GateVerdict(True, on_reject=on_reject)
            kind, detail = "approval_granted", "approved"
        elif isinstance(answer, Edit):
            verdict = GateVerdict(True, on_reject=on_reject, edited=True, arguments=answer.arguments)
            kind, detail = "approval_edited", "approved with edited arguments"
        else:
            if answer is False:
                message = "rejected by the approver"
            elif isinstance(answer, Reject):
                message = answer.message or "rejected by the approver"
            elif isinstance(answer, (TimeoutError, asyncio.TimeoutError)):
                message = f"no decision within {self.timeout_s:g}s"
            elif isinstance(answer, BaseException):
                logger.warning("veronica_mw: approver failed for %s", request.tool, exc_info=answer)
                message = f"approver failed: {type(answer).__name__}: {answer}"
            else:
                message = f"malformed approval answer {answer!r}"
            verdict = GateVerdict(False, message, on_reject=on_reject)
            kind, detail = "approval_rejected", message
        ctx.add_event(kind, f"{request.tool}: {detail}", **_decision_detail(request, answer))
        return verdict

    def __repr__(self) -> str:
        return (
            f"RequireApproval({self.tools!r}, {self.approver!r}, timeout_s={self.timeout_s:g}, "
            f"on_reject={self.on_reject!r})"
        )


def _decision_detail(request: ApprovalRequest, answer: Any) -> dict[str, Any]:
    """What the decision's event records (and the audit log keeps): who decided, when, and the
    SHA-256 of the arguments asked for and of the edited ones."""
    edited = args_sha256(answer.arguments) if isinstance(answer, Edit) else None
    decided_at = getattr(answer, "decided_at", None) if isinstance(answer, (Approve, Reject, Edit)) else None
    return {
        "request_id": request.id,
        "tool": request.tool,
        "approver": getattr(answer, "approver", None)
        if isinstance(answer, (Approve, Reject, Edit))
        else None,
        "args_sha256": args_sha256(request.arguments),
        "edited_args_sha256": edited,
        "decided_at": decided_at if isinstance(decided_at, (int, float)) else time.time(),
    }


async def _in_thread(fn: Approver, request: ApprovalRequest) -> Any:
    """``fn(request)`` on a daemon thread of its own: one that never returns holds neither the
    loop's default executor nor, at shutdown, the loop itself."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            outcome: tuple[bool, Any] = (True, context.run(fn, request))
        except BaseException as exc:  # handed to the waiting coroutine
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(_deliver, future, outcome)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=work, name="veronica-mw-approval", daemon=True).start()
    return await future


def _deliver(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():  # timed out meanwhile
        return
    if outcome[0]:
        future.set_result(outcome[1])
    else:
        future.set_exception(outcome[1])


async def _bounded(awaitable: Any, timeout_s: float) -> Any:
    return await asyncio.wait_for(_awaited(awaitable), timeout_s)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
