"""Call graph of a context: one node per LLM/tool call, with bounded memory.

The most recent ``capacity`` calls are kept in a ring buffer of compact records; older ones only
survive in the per-(kind, status) aggregates, so a context making a million calls holds at most
``capacity`` records. Mutated only under the owning context's lock.
"""

from __future__ import annotations

import time
import weakref
from array import array
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
        "reported_usage",
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
        # Usage a layer underneath the one settling this call saw (a provider SDK's response under a
        # framework's model run): priced when the settling layer itself reports none.
        self.reported_usage: tuple[TokenUsage, str | None] | None = None
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
        ``max_cost_usd`` or the context has halted meanwhile. ``0`` is always granted. The node
        stays running either way."""
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


# A call in the ring without a node object: (kind, name, parent_id, cost_usd, tokens_in, tokens_out,
# status, model, reserved_usd, options, extra) -- extra is None or (key, inline, response_model,
# checks); node id, step and times live unboxed in the graph's arrays. A settled node that carries
# more than that (bodies, a fallback model, edited arguments) stays in the ring as the object itself.
_Record = tuple[Any, ...]


class ExecutionGraph:
    """The most recent ``capacity`` calls of a context, and per-(kind, status) totals of all.

    Calls are stored in a ring of compact records (a tuple of references plus node id, step and
    start/end times in ``array`` columns), about 150 bytes a call instead of a node object's ~350:
    the object of a running call, or of a settled one that carries bodies, a fallback model or
    edited arguments, is kept as it is. :meth:`nodes` rebuilds node objects from the records.
    """

    __slots__ = (
        "capacity",
        "_ids",
        "_steps",
        "_t0",
        "_t1",
        "_recs",
        "_aggregates",
        "_ok",
        "_live",
        "_owner",
        "_next_id",
        "total_nodes",
        "divergence_threshold",
        "_last_kind",
        "_last_name",
        "_repeats",
    )

    def __init__(self, capacity: int = 10_000, divergence_threshold: int = 0) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        # Grown call by call up to ``capacity``, then overwritten in place (slot = (id - 1) % capacity).
        self._ids = array("q")
        self._steps = array("q")
        self._t0 = array("d")
        self._t1 = array("d")
        self._recs: list[CallNode | _Record] = []
        self._aggregates: dict[tuple[str, str], Aggregate] = {}
        self._ok: dict[str, Aggregate] = {}  # _aggregates[(kind, "ok")], by kind: the hot path's
        # Running calls of the inline path a layer below asked for (get): until the inline path
        # takes them back (promote, or its settlement), they are settled through that node.
        self._live: dict[int, CallNode] = {}
        # Set by the context (its lock guards the ring). A weak reference: the context holds the
        # graph, and a cycle would leave every context to the garbage collector (pauses under load).
        self._owner: weakref.ref[ExecutionContext] | None = None
        self._next_id = 0
        self.total_nodes = 0
        self.divergence_threshold = divergence_threshold
        self._last_kind = ""
        self._last_name = ""
        self._repeats = 0

    def _place(self, node_id: int, step: int, started: float, rec: CallNode | _Record) -> None:
        recs = self._recs
        if len(recs) < self.capacity:
            self._ids.append(node_id)
            self._steps.append(step)
            self._t0.append(started)
            self._t1.append(0.0)
            recs.append(rec)
        else:
            i = (node_id - 1) % self.capacity
            self._ids[i] = node_id
            self._steps[i] = step
            self._t0[i] = started
            self._t1[i] = 0.0
            recs[i] = rec

    def _repeat(self, kind: str, name: str) -> int:
        if kind == self._last_kind and name == self._last_name:
            self._repeats += 1
        else:
            self._last_kind, self._last_name, self._repeats = kind, name, 1
        return self._repeats

    def add(self, kind: str, name: str, parent_id: int | None) -> tuple[CallNode, int]:
        """Append a running node; return it with how many times in a row its signature repeated."""
        self._next_id += 1
        node = CallNode(self._next_id, kind, name, parent_id)
        self._place(node.node_id, 0, node.started, node)
        self.total_nodes += 1
        return node, self._repeat(kind, name)

    def open(
        self, kind: str, name: str, parent_id: int | None, step: int, options: WrapOptions
    ) -> tuple[int, int]:
        """Append a running call without a node object (the kernel's inline fast path): its id and
        how many times in a row its signature repeated."""
        node_id = self._next_id = self._next_id + 1
        self._place(
            node_id,
            step,
            time.monotonic(),
            (
                kind,
                name,
                parent_id,
                0.0,
                0,
                0,
                "running",
                options.model,
                options.cost_estimate_hint,
                options,
                None,
            ),
        )
        self.total_nodes += 1
        return node_id, self._repeat(kind, name)

    def close(self, node_id: int, kind: str, status: str, cost: float) -> None:
        """Settle a call begun with :meth:`open` that no node object was made for."""
        i = (node_id - 1) % self.capacity
        if self._ids[i] == node_id:  # still in the ring
            rec: Any = self._recs[i]  # a record: only the inline path opens and closes by id
            self._recs[i] = (rec[0], rec[1], rec[2], cost, 0, 0, status, rec[7], rec[8], rec[9], None)
            self._t1[i] = time.monotonic()
        agg = self._aggregates.get((kind, status))
        if agg is None:
            agg = self._aggregates[(kind, status)] = Aggregate()
        agg.count += 1
        agg.cost_usd += cost

    def _ok_aggregate(self, kind: str) -> Aggregate:
        agg = self._aggregates.get((kind, "ok"))
        if agg is None:
            agg = self._aggregates[(kind, "ok")] = Aggregate()
        self._ok[kind] = agg
        return agg

    def promote(
        self, node_id: int, kind: str, name: str, parent_id: int | None, step: int, options: WrapOptions
    ) -> CallNode:
        """The node object of a running call begun with :meth:`open` (it failed, or needs the full
        settlement); from now on the ring holds the object. A call whose record has already left
        the ring (more than ``capacity`` calls since it began) gets a fresh node outside it."""
        node = self._live.pop(node_id, None) if self._live else None
        if node is not None:  # a layer below asked for it already (get): that is the node
            return node
        i = (node_id - 1) % self.capacity
        if self._ids[i] == node_id:
            node = self._recs[i] = self._build(i)
        else:
            node = CallNode(node_id, kind, name, parent_id)
            node.step, node.reserved_usd, node.model = step, options.cost_estimate_hint, options.model
        return node

    def get(self, node_id: int) -> CallNode | None:
        """The node with ``node_id`` while it is among the kept ones (None once it dropped out).

        A running call of the inline path gets its node object now (so a layer below -- a
        provider SDK's instrumentation -- can adopt it as its own step): it is settled through
        that node from then on. A settled record is rebuilt (read it; do not keep it).
        """
        node = self._live.get(node_id)
        if node is not None:
            return node
        i = (node_id - 1) % self.capacity
        if i >= len(self._ids) or self._ids[i] != node_id:
            return None
        rec = self._recs[i]
        if isinstance(rec, CallNode):
            return rec
        owner = self._owner() if self._owner is not None else None
        if rec[6] != "running" or owner is None:
            return self._build(i)
        with owner._lock:  # against the inline path settling it at this moment
            if self._ids[i] != node_id:
                return None
            rec = self._recs[i]
            if isinstance(rec, CallNode) or rec[6] != "running":
                return self._build(i)
            node = self._live[node_id] = self._recs[i] = self._build(i)
        node._ctx = owner
        return node

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
        i = (node.node_id - 1) % self.capacity
        if (
            self._recs[i] is node
            and node.io is None
            and node.fallback_model is None
            and node.edited_arguments is None
        ):
            # Settled: keep what it says, not the object (the caller may still hold that).
            extra = None
            if node.key is not None or node.inline or node.response_model is not None or node.checks:
                extra = (node.key, node.inline, node.response_model, node.checks)
            self._recs[i] = (
                node.kind, node.name, node.parent_id, node.cost_usd, node.tokens_in, node.tokens_out,
                status, node.model, node.reserved_usd, node._options, extra,
            )  # fmt: skip
            self._steps[i] = node.step
            self._t0[i] = node.started
            self._t1[i] = node.ended

    def _build(self, i: int) -> CallNode:
        rec = self._recs[i]
        if isinstance(rec, CallNode):
            return rec
        node = CallNode(self._ids[i], rec[0], rec[1], rec[2])
        node.cost_usd, node.tokens_in, node.tokens_out, node.status = rec[3], rec[4], rec[5], rec[6]
        node.model, node.reserved_usd, node._options = rec[7], rec[8], rec[9]
        if rec[10] is not None:
            node.key, node.inline, node.response_model, node.checks = rec[10]
        node.step, node.started, node.ended = self._steps[i], self._t0[i], self._t1[i]
        return node

    def nodes(self) -> list[CallNode]:
        """The most recent nodes (at most ``capacity``), oldest first. Settled ones are rebuilt
        from their records: read them, do not keep them for identity."""
        n = len(self._recs)
        start = self.total_nodes % n if self.total_nodes > n else 0
        return [self._build((start + k) % n) for k in range(n)]

    def aggregates(self) -> dict[tuple[str, str], Aggregate]:
        return {
            key: Aggregate(a.count, a.cost_usd, a.tokens_in, a.tokens_out)
            for key, a in self._aggregates.items()
        }
