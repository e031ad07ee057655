"""Name the LangChain run a provider SDK request is sent for, so that request adopts the run's step.

``ChatOpenAI``, ``ChatAnthropic`` and the other LangChain integrations call the provider SDKs from
inside their ``_generate``/``_stream`` (and async twins), which LangChain hands the run's
``run_manager``. The callback handlers begin each model or tool run's step with ``key=run_id``, so
the provider instrumentation only needs that run id: this finder, registered with
:mod:`._provider_claims` when the LangChain adapter is imported, walks up from the request to the
nearest frame holding a run manager of the right kind. A step the agent middleware or a LangGraph
node wrapper began and the handler adopted (:mod:`._langchain_claims`) is returned as the node.
Should LangChain rename ``run_manager``, requests are counted as steps of their own: never fewer
calls than ran.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from types import FrameType

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    AsyncCallbackManagerForToolRun,
    CallbackManagerForLLMRun,
    CallbackManagerForToolRun,
)

from .. import CallNode, ExecutionContext
from ._langchain_claims import claimed_for

_KINDS: tuple[tuple[type, str], ...] = (
    (CallbackManagerForLLMRun, "llm"),
    (AsyncCallbackManagerForLLMRun, "llm"),
    (CallbackManagerForToolRun, "tool"),
    (AsyncCallbackManagerForToolRun, "tool"),
)
_MAX_DEPTH = 80  # from the SDK's request method to the integration's _generate: ~10 frames


def _kind(manager: object) -> str | None:
    for cls, kind in _KINDS:
        if isinstance(manager, cls):
            return kind
    return None


def enclosing_run(ctx: ExecutionContext, kind: str) -> CallNode | Hashable | None:
    """The step of the LangChain run of ``kind`` this call is made inside: the node, or its key."""
    frame: FrameType | None
    try:
        frame = sys._getframe(2)
    except ValueError:  # pragma: no cover - called from the top of a stack
        return None
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return None
        if "run_manager" in frame.f_code.co_varnames:
            manager = frame.f_locals.get("run_manager")
            if manager is not None and _kind(manager) == kind:
                run_id = manager.run_id
                node = claimed_for(ctx, kind, run_id)
                return node if node is not None else run_id
        frame = frame.f_back
    return None
