"""Open kernel steps of Agents SDK model and tool calls, from their start hook to their end hook.

The SDK awaits every hook in a task of its own (``gather_with_cancel``), so nothing a start hook
puts in a ContextVar reaches the end hook. Open steps are therefore kept per SDK context object:
the run's ``RunContextWrapper`` for model calls (one at a time per run), the call's ``ToolContext``
for function tools (the run's wrapper for the other local tool families), in a weak mapping.

A call whose end hook never runs -- the model raised, its response failed validation, a sibling
tool failed, the run was cancelled -- is settled when its run ends (under ``instrument()``, which
sees how it ended) or else after its context object was garbage-collected (at the next hook call
or run end). A model call that did return is committed with the usage the SDK added to the run's
``Usage`` meanwhile.

Imported only by :mod:`veronica_mw.adapters.openai_agents`, after its framework gate.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from contextvars import ContextVar
from typing import Any

from agents import AgentsException

from .. import CallNode, ExecutionHalted, TokenUsage, ToolCallRejected


class AgentsExecutionHalted(ExecutionHalted, AgentsException):
    """The halt as the Agents SDK sees it: an :class:`~veronica_mw.ExecutionHalted` (reason,
    snapshot, partial result) that is also an ``AgentsException``.

    That is deliberate: the SDK wraps any other exception raised around a function tool (its
    ``on_tool_start`` hook included) in ``UserError("Error running tool ...")``, but re-raises its
    own exceptions untouched, so the caller of ``Runner.run`` receives the halt itself.
    """

    def __init__(
        self, reason: str, snapshot: Any = None, partial_result: Any = None, detail: str = ""
    ) -> None:
        ExecutionHalted.__init__(self, reason, snapshot, partial_result, detail)
        self.run_data = None  # AgentsException's field; the SDK fills it in on the way out


class AgentsToolCallRejected(ToolCallRejected, AgentsException):
    """An approver's rejection (``on_reject="message"``) as the Agents SDK sees it: a
    :class:`~veronica_mw.ToolCallRejected` the SDK lets through unwrapped. Run hooks cannot answer
    a tool call in the tool's place, so the run ends with it and the tool never runs."""

    def __init__(self, tool: str, message: str) -> None:
        ToolCallRejected.__init__(self, tool, message)
        self.run_data = None


def agents_halt(halted: ExecutionHalted) -> AgentsExecutionHalted:
    if isinstance(halted, AgentsExecutionHalted):
        return halted
    return AgentsExecutionHalted(halted.reason, halted.snapshot, halted.partial_result, halted.detail)


def token_usage(usage: Any) -> TokenUsage | None:
    """The kernel's view of an SDK ``Usage``; None when it counts no tokens (some providers
    report none; the SDK then still counts the request)."""
    if usage is None:
        return None
    counts = _counts(usage)
    if not any(counts[1:]):
        return None
    return TokenUsage(counts[1], counts[2], counts[3], counts[4])


def _counts(usage: Any) -> tuple[int, int, int, int, int]:
    """(requests, input, output, cache read, cache write) of an SDK ``Usage``."""
    details = getattr(usage, "input_tokens_details", None)
    values = (
        getattr(usage, "requests", 0),
        getattr(usage, "input_tokens", 0),
        getattr(usage, "output_tokens", 0),
        getattr(details, "cached_tokens", 0),
        getattr(details, "cache_write_tokens", 0),
    )
    a, b, c, d, e = (v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0 for v in values)
    return (a, b, c, d, e)


class Call:
    """One open step: the kernel node, the tool it runs (None for a model call) and, for a model
    call, the run's ``Usage`` with its counts at the start (to see whether the model returned)."""

    __slots__ = ("kind", "node", "tool", "usage", "baseline", "scope")

    def __init__(self, kind: str, node: CallNode, tool: Any, usage: Any, scope: RunScope | None) -> None:
        self.kind = kind
        self.node = node
        self.tool = tool
        self.usage = usage
        self.baseline = _counts(usage) if usage is not None else None
        self.scope = scope

    def settle(self, exc: BaseException | None, blamed: bool) -> None:
        """Settle a call whose end hook never ran; ``blamed``: ``exc`` is what ended it."""
        node = self.node
        if node.settled:
            return
        if self.kind == "llm" and self.usage is not None and self.baseline is not None:
            now = _counts(self.usage)
            delta = [max(0, a - b) for a, b in zip(now, self.baseline, strict=True)]
            if any(delta[1:]):  # the model did answer; only what came after failed
                node.commit(usage=TokenUsage(delta[1], delta[2], delta[3], delta[4]))
                return
            if delta[0]:  # answered without counting tokens: the hint stands as its cost
                node.commit(cost_usd=node.reserved_usd)
                return
        if isinstance(exc, ExecutionHalted):
            node.fail(exc)  # cut short by the halt: status "halted", reservation kept, no retry
        elif blamed and isinstance(exc, Exception):
            node.fail(exc)  # recorded as an error; draws one retry from the chain-wide budget
        else:
            # Cancelled, cut short by a sibling, or nobody knows: the call may have cost money,
            # so its reservation is kept as spent (and no retry is drawn).
            node.commit(cost_usd=node.reserved_usd)


# Calls whose context object was garbage-collected with them still open. A finalizer may run
# at any allocation -- also inside the kernel's lock on this very thread -- so it only queues them
# here (a deque append is atomic), and they are settled at the next hook call or run end.
_orphans: deque[list[Call]] = deque()


def settle_orphans() -> None:
    while _orphans:
        try:
            calls = _orphans.popleft()
        except IndexError:  # another thread took the last one
            return
        while calls:
            calls.pop().settle(None, False)


class OpenCalls:
    """The open calls of one ``VeronicaRunHooks``, by SDK context object."""

    __slots__ = ("_weak", "_strong", "_lock")

    def __init__(self) -> None:
        self._weak: weakref.WeakKeyDictionary[Any, list[Call]] = weakref.WeakKeyDictionary()
        self._strong: dict[int, tuple[Any, list[Call]]] = {}  # owners that take no weak reference
        self._lock = threading.Lock()

    def _calls(self, owner: Any) -> list[Call] | None:
        try:
            calls = self._weak.get(owner)
        except TypeError:  # unhashable
            calls = None
        if calls is None:
            entry = self._strong.get(id(owner))
            calls = entry[1] if entry is not None and entry[0] is owner else None
        return calls

    def add(self, owner: Any, call: Call) -> None:
        with self._lock:
            calls = self._calls(owner)
            if calls is None:
                calls = []
                try:
                    self._weak[owner] = calls
                    finalizer = weakref.finalize(owner, _orphans.append, calls)
                    finalizer.atexit = False
                except TypeError:  # takes no weak reference (or no hash): kept until its end hook
                    self._strong[id(owner)] = (owner, calls)
            calls.append(call)
        if call.scope is not None:
            call.scope.track(call)

    def pop(self, owner: Any, kind: str, tool: Any = None) -> Call | None:
        """The oldest open call of ``kind`` (and ``tool``) on ``owner``, removed; None if none."""
        with self._lock:
            calls = self._calls(owner)
            if not calls:
                return None
            for index, call in enumerate(calls):
                if call.kind == kind and call.tool is tool:
                    del calls[index]
                    break
            else:
                return None
            if not calls and self._strong.get(id(owner), (None,))[0] is owner:
                del self._strong[id(owner)]
        if call.scope is not None:
            call.scope.untrack(call)
        return call


class RunScope:
    """One ``Runner`` call seen by ``instrument()``: what the hooks cannot see for themselves
    (the model named in ``RunConfig.model``), the model call in flight (for a provider request
    made underneath it, see :meth:`model_call`) and the calls still open when the run ends."""

    __slots__ = ("model", "open", "_lock")

    def __init__(self, model: str | None) -> None:
        self.model = model
        self.open: set[Call] = set()
        self._lock = threading.Lock()

    def track(self, call: Call) -> None:
        with self._lock:
            self.open.add(call)

    def untrack(self, call: Call) -> None:
        with self._lock:
            self.open.discard(call)

    def model_call(self, ctx: Any) -> CallNode | None:
        """The run's model call in flight in ``ctx`` (a run makes one model call at a time)."""
        with self._lock:
            for call in self.open:
                node = call.node
                if call.kind == "llm" and not node.settled and node.context is ctx:
                    return node
        return None

    def finish(self, exc: BaseException | None) -> None:
        """Settle what is still open. Only one call takes the blame for ``exc`` (the model call,
        else the oldest tool call), so one failure draws one retry."""
        with self._lock:
            left = sorted(self.open, key=lambda call: (call.kind != "llm", call.node.node_id))
            self.open.clear()
        for index, call in enumerate(left):
            call.settle(exc, index == 0)
        settle_orphans()


# The RunScope of the Runner call being made in this task (set by the instrumented Runner; the
# SDK's tasks inherit it, and the hooks read it from there).
current_run: ContextVar[RunScope | None] = ContextVar("veronica_openai_agents_run", default=None)
