"""LlamaIndex adapter: every model and tool call becomes a kernel step, checked before it runs.

Which LlamaIndex hook can stop a call (verified on llama-index-core 0.14):

- instrumentation event and span handlers cannot: the dispatcher swallows their exceptions. A span
  handler is used only to *observe*: which LLM is about to run, and tool calls outside agents;
- the legacy ``CallbackManager`` can: an exception raised by a handler's ``on_event_start`` for an
  ``LLM`` event ends that call before the model runs, in all eight forms (``chat``/``complete``,
  sync/async, plain/streaming). Every LLM has its own manager, so the span handler attaches our
  gate to the manager of each LLM it sees run, however and whenever that LLM was built;
- nothing public can stop a tool: agents turn every tool exception into an error result fed back
  to the model. So ``install()`` wraps the agents' tool dispatch (``BaseWorkflowAgent._call_tool``
  and ``AgentWorkflow._call_tool``; ``uninstall()`` restores them) and raises a halt outside the
  agent's ``try``: ``await handler`` then raises :class:`~veronica_mw.ExecutionHalted` and
  ``stream_events()`` ends with a ``WorkflowFailedEvent``. Tool calls elsewhere (``predict_and_call``,
  direct ``tool.call``) are counted through instrumentation but cannot be refused; the next model
  call is.
"""

from __future__ import annotations

from .. import MissingFrameworkError

try:
    from llama_index.core.agent.workflow import AgentWorkflow  # noqa: F401  (the framework is present)
except ImportError as exc:
    raise MissingFrameworkError("llama-index-core", "llamaindex", exc) from exc

import threading
from types import TracebackType
from typing import Any

from .. import ContextBinding, ExecutionConfig, ExecutionContext, WrapOptions
from . import _llamaindex_hooks as _hooks
from ._provider_estimate import reservation

__all__ = ["VeronicaLlamaIndexHandler"]

_lock = threading.Lock()


class VeronicaLlamaIndexHandler:
    """Bounds every LlamaIndex model and tool call by an :class:`~veronica_mw.ExecutionContext`.

    Install it process-wide with ``with VeronicaLlamaIndexHandler(...):`` or ``install()`` /
    ``uninstall()``. A call binds, when it starts, to ``context``; else to the current context
    (request middleware, an entered ``ExecutionContext``); else to one context this handler builds
    from ``config`` (shared by every agent it serves); with none of these it runs uncontained.
    Before each model call its worst case is reserved (the prompt estimated, the LLM's
    ``max_tokens`` or the configured default out, priced for its model), replaced by the price of
    the usage the response reports (``raw["usage"]`` and the model name); ``cost_estimate_hint``
    (USD) reserves that instead. Without it, a model that cannot be priced is refused
    (``unpriced``) under a cost limit.
    """

    def __init__(
        self,
        context: ExecutionContext | None = None,
        *,
        config: ExecutionConfig | None = None,
        on_limit: Any = None,
        cost_estimate_hint: float | None = None,
    ) -> None:
        self._binding = ContextBinding(context, config, on_limit)
        self._hint = (  # validated
            None
            if cost_estimate_hint is None
            else WrapOptions(cost_estimate_hint=cost_estimate_hint).cost_estimate_hint
        )
        self._installs = 0

    def resolve_context(self) -> ExecutionContext | None:
        """The context a call starting now is counted in (None: it runs uncontained)."""
        return self._binding.resolve()

    @property
    def owned_context(self) -> ExecutionContext | None:
        """The context built from ``config``, once a call needed it."""
        return self._binding.owned_context

    def reset(self) -> None:
        """Start a fresh owned context, e.g. for a new run with the same ``config``."""
        self._binding.reset_owned()

    @property
    def installed(self) -> bool:
        return self._installs > 0

    def install(self) -> VeronicaLlamaIndexHandler:
        """Start bounding LlamaIndex calls. Nested installs need as many ``uninstall()`` calls."""
        with _lock:
            self._installs += 1
            if self._installs == 1:
                if not _hooks.installed:
                    _hooks.hook()
                _hooks.installed.append(self)
        return self

    def uninstall(self) -> None:
        """Stop. The last handler out removes the hooks, the tool wrapper and the attached gates."""
        with _lock:
            if self._installs == 0:
                return
            self._installs -= 1
            if self._installs == 0:
                _hooks.installed.remove(self)
                if not _hooks.installed:
                    _hooks.unhook()

    def __enter__(self) -> VeronicaLlamaIndexHandler:
        return self.install()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.uninstall()

    def llm_options(
        self, name: str, model: str | None, ctx: ExecutionContext, worst: tuple[int, int] = (0, 0)
    ) -> WrapOptions:
        """How a model call is named, priced and reserved in ``ctx`` (``worst``: its estimated
        input tokens and output limit); raises ExecutionHalted ``unpriced`` (see the class doc)."""
        hint = reservation(ctx, model, None, worst[0], worst[1], name, self._hint)
        return WrapOptions(operation_name=name, cost_estimate_hint=hint, model=model)
