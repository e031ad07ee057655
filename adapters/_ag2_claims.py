"""Which AG2 0.14 model step a provider SDK request belongs to, so one model call is one step.

AG2 0.14 calls the model client (the OpenAI SDK, for OpenAI-compatible configs) right after the
``safeguard_llm_inputs`` hook in which :class:`VeronicaCapability` begins the call's step, in the
same thread (a worker thread on the ``a_initiate_chat`` path). The step is kept in a thread-local
from the hook until it is settled; a finder registered with :mod:`._provider_claims` hands it to
the provider instrumentation, which joins it instead of opening a second step.
"""

from __future__ import annotations

import threading

from .. import CallNode, ExecutionContext
from . import _provider_claims

_local = threading.local()


def began(node: CallNode) -> None:
    _local.node = node


def settled(node: CallNode) -> None:
    if getattr(_local, "node", None) is node:
        _local.node = None


def _enclosing(ctx: ExecutionContext, kind: str) -> CallNode | None:
    node: CallNode | None = getattr(_local, "node", None) if kind == "llm" else None
    if node is None or node.settled or node.context is not ctx:
        return None
    return node


_provider_claims.register(_enclosing)
