"""CallNode: one model or tool call, the handle of the two-phase API (commit / fail / release).

A node settles through its context's ``_commit``/``_fail``/... (:mod:`._api`): this module sits below it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from ._io import jsonable
from .config import DEFAULT_OPTIONS, WrapOptions
from .pricing import TokenUsage
from .reasons import Decision

_UNSET: Any = object()
# The graph node of the wrapped call running now, so nested calls record their parent.
current_node: ContextVar[int | None] = ContextVar("veronica_mw_node", default=None)
# node._held: no budget parent holds a reservation for it / one does, settled by whoever settles
# the node / one does, and an async caller awaits its settle after the sync step it runs.
FREE, HELD, DEFERRED = 0, 1, 2


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
        "node_id", "kind", "name", "parent_id", "started", "ended", "cost_usd", "tokens_in", "tokens_out",
        "status", "model", "reserved_usd", "key", "step", "inline", "response_model", "fallback_model",
        "edited_arguments", "checks", "reported_usage", "io", "_ctx", "_options", "_probe", "_held",
        "_seen", "_downgraded", "_gates",
    )  # fmt: skip

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
        self._ctx: Any = None  # the context, until settled
        self._options: Any = None
        self._probe = False
        self._held = FREE  # see FREE, HELD, DEFERRED
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
    def context(self) -> Any:
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
        return ctx._commit(self, result, cost_usd, usage, model)  # type: ignore[no-any-return]

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
        return await ctx._acommit(self, result, cost_usd, usage, model)  # type: ignore[no-any-return]

    def downgraded(self, requested: str | None = None) -> None:
        """Tell the kernel this call was sent with :attr:`fallback_model` instead of ``requested`` (a
        call settled with a fallback nobody applied records one ``downgrade_unsupported`` event)."""
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
        """Attach what was sent (``messages``, ``model``, ``parameters``) and the response text, when
        an observer asked for bodies (else a no-op): a JSON-ready copy taken now, without credentials."""
        io = self.io
        if io is None:
            return
        if request is not None:
            io["request"] = jsonable(request)
        if response_text is not None:
            io["response_text"] = response_text if isinstance(response_text, str) else str(response_text)

    def add_reservation(self, usd: float) -> None:
        """Reserve ``usd`` more for this running call before it is sent (a layer below learned its worst
        case); raise ExecutionHalted when a limit would be crossed or the context halted meanwhile."""
        ctx = self._ctx
        if ctx is not None:
            ctx._add_reservation(self, usd)

    def __repr__(self) -> str:
        return f"<CallNode {self.node_id} {self.kind}:{self.name} {self.status} ${self.cost_usd:.6f}>"
