"""ExecutionGraph: a context's calls, in a bounded ring of compact records, and totals of all.

Older calls than the ring's ``capacity`` survive only in per-(kind, status) aggregates, so a
million calls hold at most ``capacity`` records. Mutated only under the owning context's lock."""

from __future__ import annotations

import threading
import time
import weakref
from array import array
from dataclasses import dataclass
from typing import Any

from ._node import _UNSET, CallNode, current_node
from .config import WrapOptions

_monotonic = time.monotonic

__all__ = ["_UNSET", "Aggregate", "CallNode", "ExecutionGraph", "current_node"]


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

    A record (a tuple, plus id, step and times in ``array`` columns) is ~150 bytes a call against a
    node object's ~350; running nodes, and settled ones with bodies, a fallback model or edited
    arguments, stay objects. :meth:`nodes` rebuilds node objects from the records."""

    __slots__ = (
        "capacity", "_ids", "_steps", "_t0", "_t1", "_recs", "_aggregates", "_ok", "_live", "_owner",
        "_lock", "_next_id", "total_nodes", "divergence_threshold", "_last_kind", "_last_name", "_repeats",
    )  # fmt: skip

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
        self._owner: weakref.ref[Any] | None = None
        self._lock: threading.Lock | None = None  # the owner's ledger lock
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

    def add(self, kind: str, name: str, parent_id: int | None) -> tuple[CallNode, int]:
        """Append a running node; return it with how many times in a row its signature repeated."""
        self._next_id += 1
        node = CallNode(self._next_id, kind, name, parent_id)
        self._place(node.node_id, 0, node.started, node)
        self.total_nodes += 1
        if kind == self._last_kind and name == self._last_name:
            self._repeats += 1
        else:
            self._last_kind, self._last_name, self._repeats = kind, name, 1
        return node, self._repeats

    def open(
        self, kind: str, name: str, parent_id: int | None, step: int, options: WrapOptions
    ) -> tuple[int, int]:
        """:meth:`add` without a node object (the plain path, :meth:`_place` written out): the id."""
        node_id = self._next_id = self._next_id + 1
        hint = options.cost_estimate_hint
        rec = (kind, name, parent_id, 0.0, 0, 0, "running", options.model, hint, options, None)
        if node_id <= self.capacity:
            self._ids.append(node_id)
            self._steps.append(step)
            self._t0.append(_monotonic())
            self._t1.append(0.0)
            self._recs.append(rec)
        else:
            self._place(node_id, step, _monotonic(), rec)
        self.total_nodes += 1
        if kind == self._last_kind and name == self._last_name:
            self._repeats += 1
            return node_id, self._repeats
        self._last_kind, self._last_name, self._repeats = kind, name, 1
        return node_id, 1

    def close(self, node_id: int, kind: str, status: str, cost: float) -> None:
        """Settle a call begun with :meth:`open` that no node object was made for."""
        i = (node_id - 1) % self.capacity
        if self._ids[i] == node_id:  # still in the ring
            rec: Any = self._recs[i]  # a record: only the inline path opens and closes by id
            self._recs[i] = (rec[0], rec[1], rec[2], cost, 0, 0, status, rec[7], rec[8], rec[9], None)
            self._t1[i] = time.monotonic()
        agg = self._ok.get(kind) if status == "ok" else None
        if agg is None:
            agg = self._aggregate(kind, status)
        agg.count += 1
        agg.cost_usd += cost

    def _aggregate(self, kind: str, status: str) -> Aggregate:
        agg = self._aggregates.get((kind, status))
        if agg is None:
            agg = self._aggregates[(kind, status)] = Aggregate()
            if status == "ok":
                self._ok[kind] = agg
        return agg

    def promote(
        self, node_id: int, kind: str, name: str, parent_id: int | None, step: int, options: WrapOptions
    ) -> CallNode:
        """The node object of a running call begun with :meth:`open`, held by the ring from now on (a
        fresh one when its record has already left the ring)."""
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
        """The node with ``node_id`` while it is kept (else None). A running record becomes its node
        now, so a layer below can adopt it as its step; a settled record is rebuilt (do not keep it)."""
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
        if rec[6] != "running" or owner is None or self._lock is None:
            return self._build(i)
        with self._lock:  # against the inline path settling it at this moment
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
            agg = self._aggregate(node.kind, status)
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
