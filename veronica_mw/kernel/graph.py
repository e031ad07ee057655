"""Call graph of a context: one node per LLM/tool call, with bounded memory.

The most recent ``capacity`` nodes are kept in a ring buffer; older ones only survive in the
per-(kind, status) aggregates, so a context making a million calls holds at most ``capacity``
node objects. Mutated only under the owning context's lock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._io import jsonable
from .config import DEFAULT_OPTIONS, WrapOptions
from .reasons import Decision

if TYPE_CHECKING:
    from .execution import ExecutionContext
    from .pricing import TokenUsage

_UNSET: Any = object()


class CallNode:
    """One call in the graph, and the handle of the two-phase API.

    ``ctx.begin_call(...)`` returns it; exactly one of :meth:`commit`, :meth:`fail` or
    :meth:`release` settles it (later ones are no-ops, so several hooks may report one call).

    For observers: ``step`` is the call's 1-based step number in its context, ``options`` the
    :class:`~veronica_mw.WrapOptions` it was admitted with, ``response_model`` the model its
    settlement reported (None when none was), and ``inline`` says the kernel itself runs the call
    (the ``wrap_*``/``call_*`` forms), so it ends on the thread and ``contextvars`` context it
    started in; a ``begin_call`` node may be settled anywhere.
    """

    __slots__ = (
        "node_id",
        "kind",
        "name",
        "parent_id",
        "started",
        "ended",
        "cost_usd",
        "tokens_in",
        "tokens_out",
        "status",
        "model",
        "reserved_usd",
        "key",
        "step",
        "inline",
        "response_model",
        "fallback_model",
        "edited_arguments",
        "checks",
        "io",
        "_ctx",
        "_options",
        "_probe",
        "_held",
        "_seen",
        "_downgraded",
        "_gates",
    )

    def __init__(self, node_id: int, kind: str, name: str, parent_id: int | None) -> None:
        self.node_id = node_id
        self.kind = kind
        self.name = name
        self.parent_id = parent_id
        self.started = time.monotonic()
        self.ended = 0.0
        self.cost_usd = 0.0
        self.tokens_in = 0
        self.tokens_out = 0
        self.status = "running"
        self.model: str | None = None
        self.reserved_usd = 0.0
        self.key: Any = None
        self.step = 0
        self.inline = False
        self.response_model: str | None = None
        # Set by a policy that modifies the call: the model to call instead (see ``downgraded``).
        self.fallback_model: str | None = None
        # Set when an approver edited a tool call's arguments: run the tool with these.
        self.edited_arguments: Any = None
        # What the output checks said about a model call (``CheckResult`` objects).
        self.checks: tuple[Any, ...] = ()
        # Request/response bodies, a dict only when an observer asked for them (see record_io).
        self.io: dict[str, Any] | None = None
        self._ctx: ExecutionContext | None = None
        self._options: Any = None
        self._probe = False
        self._held = 0  # the parent budget's hold (see _ledger: FREE, HELD, AWAITED, OWED)
        self._seen = False  # observers were told it started, so they are told it ended
        self._downgraded = False
        self._gates: tuple[Any, ...] = ()  # approval gates still to ask (tool calls)

    @property
    def options(self) -> WrapOptions:
        return self._options or DEFAULT_OPTIONS

    @property
    def settled(self) -> bool:
        return self.status != "running"

    @property
    def context(self) -> ExecutionContext | None:
        """The context this call runs in, until it is settled."""
        return self._ctx

    @property
    def duration_ms(self) -> float:
        return ((self.ended or time.monotonic()) - self.started) * 1000.0

    def commit(
        self,
        result: Any = _UNSET,
        *,
        cost_usd: float | None = None,
        usage: TokenUsage | Any = None,
        model: str | None = None,
    ) -> Decision:
        """The call succeeded: commit its actual cost (explicit, from ``usage``, from ``result``,
        else the reserved hint). Returns HALT when this cost took the context past a limit."""
        ctx = self._ctx
        if ctx is None:
            return Decision.ALLOW
        return ctx._commit(self, result, cost_usd, usage, model)

    async def acommit(
        self,
        result: Any = _UNSET,
        *,
        cost_usd: float | None = None,
        usage: TokenUsage | Any = None,
        model: str | None = None,
    ) -> Decision:
        """:meth:`commit` for async callers: async output checks and an async parent budget's
        ``asettle`` are awaited (never run on a side loop, never blocking the event loop)."""
        ctx = self._ctx
        if ctx is None:
            return Decision.ALLOW
        return await ctx._acommit(self, result, cost_usd, usage, model)

    def downgraded(self, requested: str | None = None) -> None:
        """Tell the kernel this call was sent with :attr:`fallback_model` instead of ``requested``.

        Adapters that control the request call it after swapping the model; a call settled with a
        fallback nobody applied records one ``downgrade_unsupported`` event instead.
        """
        ctx = self._ctx
        if ctx is not None and self.fallback_model is not None and not self._downgraded:
            ctx._downgraded(self, requested)

    async def afail(self, exc: BaseException | None = None) -> None:
        """Like :meth:`fail`, awaiting the parent budget."""
        ctx = self._ctx
        if ctx is not None:
            await ctx._afail(self, exc)

    async def arelease(self) -> None:
        """Like :meth:`release`, awaiting the parent budget."""
        ctx = self._ctx
        if ctx is not None:
            await ctx._arelease(self, "released")

    def fail(self, exc: BaseException | None = None) -> None:
        """The call raised: record it and draw one retry from the chain-wide budget."""
        ctx = self._ctx
        if ctx is not None:
            ctx._fail(self, exc)

    def release(self) -> None:
        """The call never ran: give back its step and reservation."""
        ctx = self._ctx
        if ctx is not None:
            ctx._release(self, "released")

    @property
    def wants_io(self) -> bool:
        """Whether an observer keeps call bodies: adapters may skip building them when not."""
        return self.io is not None

    def record_io(
        self, *, request: Mapping[str, Any] | None = None, response_text: str | None = None
    ) -> None:
        """Attach what was sent (``messages``, ``model``, ``parameters``) and the response text.

        Kept only when an observer asked for bodies (the audit log's ``record_bodies=True``);
        otherwise a no-op. The request is copied now, JSON-ready, with API keys and auth headers
        removed at every level. A later call replaces what an earlier one gave.
        """
        io = self.io
        if io is None:
            return
        if request is not None:
            io["request"] = jsonable(request)
        if response_text is not None:
            io["response_text"] = response_text if isinstance(response_text, str) else str(response_text)

    def add_reservation(self, usd: float) -> None:
        """Reserve ``usd`` more for this running call before it is sent (a layer underneath the
        one that began it learned its worst case); raise ExecutionHalted when that would cross
        ``max_cost_usd`` or the context has halted. The node stays running either way."""
        ctx = self._ctx
        if ctx is not None:
            ctx._add_reservation(self, usd)

    def __repr__(self) -> str:
        return f"<CallNode {self.node_id} {self.kind}:{self.name} {self.status} ${self.cost_usd:.6f}>"


@dataclass(slots=True)
class Aggregate:
    count: int = 0
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0


class ExecutionGraph:
    __slots__ = (
        "capacity",
        "_nodes",
        "_aggregates",
        "_next_id",
        "total_nodes",
        "divergence_threshold",
        "_last_signature",
        "_repeats",
    )

    def __init__(self, capacity: int = 10_000, divergence_threshold: int = 0) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._nodes: deque[CallNode] = deque(maxlen=capacity)
        self._aggregates: dict[tuple[str, str], Aggregate] = {}
        self._next_id = 0
        self.total_nodes = 0
        self.divergence_threshold = divergence_threshold
        self._last_signature: tuple[str, str] | None = None
        self._repeats = 0

    def add(self, kind: str, name: str, parent_id: int | None) -> tuple[CallNode, int]:
        """Append a running node; return it with how many times in a row its signature repeated."""
        self._next_id += 1
        node = CallNode(self._next_id, kind, name, parent_id)
        self._nodes.append(node)
        self.total_nodes += 1
        signature = (kind, name)
        if signature == self._last_signature:
            self._repeats += 1
        else:
            self._last_signature = signature
            self._repeats = 1
        return node, self._repeats

    def get(self, node_id: int) -> CallNode | None:
        """The node with ``node_id`` while it is among the kept ones (None once it dropped out).
        Safe without the context's lock: a node that moved meanwhile is simply not found."""
        nodes = self._nodes
        index = node_id - (self._next_id - len(nodes)) - 1
        if 0 <= index < len(nodes):
            try:
                node = nodes[index]
            except IndexError:
                return None
            if node.node_id == node_id:
                return node
        return None

    def finish(self, node: CallNode, status: str) -> None:
        node.status = status
        node.ended = time.monotonic()
        agg = self._aggregates.get((node.kind, status))
        if agg is None:
            agg = self._aggregates[(node.kind, status)] = Aggregate()
        agg.count += 1
        agg.cost_usd += node.cost_usd
        agg.tokens_in += node.tokens_in
        agg.tokens_out += node.tokens_out

    def nodes(self) -> list[CallNode]:
        """The most recent nodes (at most ``capacity``), oldest first."""
        return list(self._nodes)

    def aggregates(self) -> dict[tuple[str, str], Aggregate]:
        return {
            key: Aggregate(a.count, a.cost_usd, a.tokens_in, a.tokens_out)
            for key, a in self._aggregates.items()
        }
