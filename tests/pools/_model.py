"""Shared helpers of the budget tests: building Ops and a reference model of the bucket rules."""

from __future__ import annotations

from dataclasses import dataclass, field

from veronica_mw.pools._backend import BucketState, LeaseReply, LeaseSync, Op

RTTL = 1_000  # reservation TTL (ms) used by the model tests


def op(now_ms: int, win: int = 1, bucket: str = "t:1000ms:{abc}", ttl_ms: int = 60_000) -> Op:
    return Op(bucket, win, now_ms, ttl_ms, RTTL)


@dataclass
class Model:
    """The documented bucket rules, written as plainly as possible."""

    limit: int
    limit_steps: int = -1
    win: int = 0
    spent: int = 0
    steps: int = 0
    holds: dict[str, int] = field(default_factory=dict)  # open, not reclaimed
    expiry: dict[str, int] = field(default_factory=dict)
    reclaimed: dict[str, int] = field(default_factory=dict)  # id -> when it is forgotten
    seqs: dict[str, int] = field(default_factory=dict)  # lease id -> last applied sync

    @property
    def reserved(self) -> int:
        return sum(self.holds.values())

    def _touch(self, o: Op) -> None:
        if o.win > self.win:
            self.win, self.spent, self.steps = o.win, 0, 0
        for rid, when in list(self.expiry.items()):
            if when <= o.now_ms:
                del self.expiry[rid]
                del self.holds[rid]
                self.reclaimed[rid] = o.now_ms + o.reservation_ttl_ms
        for rid, when in list(self.reclaimed.items()):
            if when <= o.now_ms:
                del self.reclaimed[rid]
                self.seqs.pop(rid, None)

    def view(self, ok: bool) -> BucketState:
        return BucketState(ok, self.win, self.spent, self.reserved, self.steps)

    def state(self, o: Op) -> BucketState:
        self._touch(o)
        return self.view(True)

    def reserve(self, o: Op, rid: str, amount: int) -> BucketState:
        self._touch(o)
        if self.limit_steps >= 0 and self.steps >= self.limit_steps:
            ok = False
        elif amount == 0:
            ok = self.spent < self.limit
        else:
            ok = self.spent + self.reserved + amount <= self.limit
        if ok:
            self.holds[rid] = amount
            self.expiry[rid] = o.now_ms + o.reservation_ttl_ms
            self.steps += 1
        return self.view(ok)

    def settle(self, o: Op, rid: str, actual: int) -> bool:
        self._touch(o)
        if rid in self.holds:
            del self.holds[rid]
            del self.expiry[rid]
        elif rid in self.reclaimed:
            del self.reclaimed[rid]
        else:
            return False
        self.spent += actual
        return True

    def lease(self, o: Op, s: LeaseSync, limit: int) -> LeaseReply:
        """A lease is a hold whose amount each sync replaces; see pools/_lease.py."""
        self._touch(o)
        held = self.holds.get(s.lease_id, 0)
        if s.seq <= self.seqs.get(s.lease_id, 0):
            return LeaseReply(held, self.view(True))
        self.holds.pop(s.lease_id, None)
        self.expiry.pop(s.lease_id, None)
        self.reclaimed.pop(s.lease_id, None)
        self.spent += s.booked
        self.steps += s.steps
        hold = s.keep
        if not held:  # nothing held (first sync or reclaimed): only in-flight calls are owed
            room = limit - self.spent - self.reserved - s.inflight
            hold = s.inflight + max(0, min(s.keep - s.inflight, room))
        if s.ask > 0 and self.spent + self.reserved + hold + s.ask <= limit:
            hold += s.ask
        room = limit - self.spent - self.reserved - hold
        if s.extra > 0 and room >= 2:
            hold += min(s.extra, room // 2)
        self.seqs[s.lease_id] = s.seq
        if hold > 0:
            self.holds[s.lease_id] = hold
            self.expiry[s.lease_id] = o.now_ms + o.reservation_ttl_ms
        return LeaseReply(hold, self.view(True))
