"""Hand a kernel step from an outer wrapper to the LangChain run it wraps, so one call counts once.

An agent middleware (``wrap_model_call``) or a LangGraph node wrapper begins its step *before*
LangChain assigns a run id to the model or tool run inside it, so the callback handlers cannot
find that step by key. Instead the wrapper publishes it here, in a ContextVar, for the duration
of the call; the first LangChain run of the same kind that starts underneath, in the same
execution context, adopts the step instead of beginning a new one. Further runs (a second model
call inside the same node, say) are counted as usual.

No framework is imported here: both the LangChain and the LangGraph adapter use this module.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .. import CallNode, ExecutionContext


class _Claim:
    __slots__ = ("ctx", "node", "run_id")

    def __init__(self, ctx: ExecutionContext, node: CallNode) -> None:
        self.ctx = ctx
        self.node = node
        self.run_id: Hashable | None = None


_current: ContextVar[_Claim | None] = ContextVar("veronica_mw_langchain_claim", default=None)
# Several handlers (explicit + zero-config) may race to bind one claim from different threads.
_bind_lock = threading.Lock()


@contextmanager
def claimed(ctx: ExecutionContext, node: CallNode) -> Iterator[None]:
    """Offer ``node`` to the first LangChain run of its kind started inside this block."""
    token = _current.set(_Claim(ctx, node))
    try:
        yield
    finally:
        _current.reset(token)


def adopt(ctx: ExecutionContext, kind: str, run_id: Hashable) -> CallNode | None:
    """The claimed step for run ``run_id``, or None when the run must begin its own step.

    Every handler that sees the same run id gets the same node; a different run id (a second
    call under the same wrapper) gets None.
    """
    claim = _current.get()
    if claim is None or claim.ctx is not ctx or claim.node.kind != kind or claim.node.settled:
        return None
    with _bind_lock:
        if claim.run_id is None:
            claim.run_id = run_id
        elif claim.run_id != run_id:
            return None
    return claim.node


def claimed_for(ctx: ExecutionContext, kind: str, run_id: Hashable) -> CallNode | None:
    """The claimed step already bound to LangChain run ``run_id`` (for the provider instrumentation
    underneath that run), if any."""
    claim = _current.get()
    if claim is None or claim.ctx is not ctx or claim.node.kind != kind or claim.node.settled:
        return None
    return claim.node if claim.run_id == run_id else None
