"""Which kernel step a provider request belongs to when a layer above it already counted the call.

One model call is one step however many layers see it. A request the OpenAI SDK is about to send
may run underneath a layer that already began a step for it: LiteLLM's ``completion`` (which
calls the OpenAI SDK), a LangChain chat model run, a LlamaIndex LLM event, a CrewAI LLM call.
The provider instrumentation adopts that step instead of beginning another, and settles it with
the usage the provider reported. Two ways to find it:

- an *offer*: the layer above publishes its node in a ContextVar for the duration of the call
  (:func:`offered`); the first request underneath, in the same context, takes it, and the layer
  above learns from ``Offer.taken`` that settling is no longer its job;
- the *kernel's current call*: ``ctx.call_llm(fn)`` (and adapters that run a call the same way,
  like the Pydantic AI one) publish the running node's id in ``current_node``; an open ``llm``
  node of this context with that id is the enclosing step;
- a *finder*: a framework adapter registers a function (:func:`register`) that names the step
  of the run enclosing the request, as the node itself or as the key it was begun with (the
  kernel hands back the open node for that key).

Each step is taken by one provider request only (:func:`claim`; a provider's own steps are taken
too): a second request made under the same layer-above call begins a step of its own, so requests
are never counted fewer than they were sent. An offer hands its step over explicitly. No framework
is imported here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .. import CallNode, ExecutionContext
from ..kernel.context import current_node

Finder = Callable[[ExecutionContext, str], "CallNode | Hashable | None"]  # (ctx, kind)


class Offer:
    """A step offered to the first provider request underneath (see :func:`offered`)."""

    __slots__ = ("node", "taken")

    def __init__(self, node: CallNode) -> None:
        self.node = node
        self.taken = False  # a provider request underneath took it (and sent itself)


_offer: ContextVar[Offer | None] = ContextVar("veronica_mw_provider_offer", default=None)
_finders: tuple[Finder, ...] = ()
_lock = threading.Lock()
_claimed: dict[int, CallNode] = {}  # id(node) -> node, for steps a provider request took
_SWEEP_AT = 256


@contextmanager
def offered(node: CallNode) -> Iterator[Offer]:
    """Offer ``node`` to the provider request made inside this block (in this thread or task)."""
    offer = Offer(node)
    token = _offer.set(offer)
    try:
        yield offer
    finally:
        _offer.reset(token)


def register(finder: Finder) -> None:
    """Consult ``finder(ctx, kind)`` for every provider request (``"llm"``) or MCP tool call
    (``"tool"``) made inside a context (idempotent)."""
    global _finders
    with _lock:
        if finder not in _finders:
            _finders = (*_finders, finder)


def unregister(finder: Finder) -> None:
    global _finders
    with _lock:
        _finders = tuple(f for f in _finders if f is not finder)


def offered_step(ctx: ExecutionContext) -> tuple[CallNode, bool] | None:
    """The step offered to this request, and whether an earlier request took it already (then this
    one is the layer above's retry or fallback: it draws a retry, not a step)."""
    offer = _offer.get()
    if offer is None or offer.node.context is not ctx or offer.node.kind != "llm":
        return None
    with _lock:
        again = offer.taken
        offer.taken = True
    return offer.node, again


def offered_reservation(ctx: ExecutionContext) -> float:
    """USD already reserved by a step offered to this request and not taken yet (0: none): what
    the request will adopt, so it is not counted against the budget twice (FitOutputToBudget)."""
    offer = _offer.get()
    if offer is None or offer.taken or offer.node.context is not ctx or offer.node.kind != "llm":
        return 0.0
    return offer.node.reserved_usd


def enclosing(ctx: ExecutionContext, kind: str = "llm") -> CallNode | Hashable | None:
    """The step (node or kernel key) of the layer above the call about to be sent, if any; to be
    held with :func:`claim` before it is adopted."""
    node_id = current_node.get()
    if node_id is not None:
        node = ctx.graph.get(node_id)
        if node is not None and node.kind == kind and node.context is ctx:
            return node
    for finder in _finders:
        found = finder(ctx, kind)
        if found is not None:
            return found
    return None


def claim(node: CallNode) -> bool:
    """Take ``node`` for one provider request: True once per step while it is open, so a second
    request under the same layer-above call (or a stray lookup of a request's own step) begins a
    step of its own."""
    with _lock:
        if node.settled or _claimed.get(id(node)) is node:
            return False
        if len(_claimed) >= _SWEEP_AT:  # steps settle elsewhere, unannounced: drop them now and then
            for key in [key for key, held in _claimed.items() if held.settled]:
                del _claimed[key]
        _claimed[id(node)] = node
        return True
