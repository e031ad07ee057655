"""AG2 1.x (``import ag2``): :class:`VeronicaMiddleware`.

AG2 1.x builds one middleware object per turn from each factory in ``Agent(middleware=[...])``
and chains their ``on_turn``, ``on_llm_call`` and ``on_tool_execution``. Here:

* ``on_llm_call`` begins an LLM step before ``call_next`` (raising
  :class:`~veronica_mw.ExecutionHalted` on HALT, so the model is not called) and commits the
  ``ModelResponse``'s ``usage`` priced for its ``model``; a model error is recorded with ``fail``.
* ``on_tool_execution`` does the same for each tool call. AG2 turns *any* ``Exception`` raised
  while a tool runs, middleware included, into a ``ToolErrorEvent`` and goes on with the next
  model call. So a refused or halted tool call is remembered on the turn, the next model call is
  refused (the context has halted), and ``on_turn`` raises the halt out of ``Agent.ask`` even if
  another middleware swallowed it on the way: the model never sees the halt as a tool error.
"""

from __future__ import annotations

try:
    from ag2.events import ModelResponse, ToolErrorEvent  # type: ignore[import-not-found, unused-ignore]
    from ag2.middleware import BaseMiddleware  # type: ignore[import-not-found, unused-ignore]
except ImportError as _exc:
    from .. import MissingFrameworkError

    raise MissingFrameworkError("ag2>=1.0 (import ag2)", "ag2", _exc) from None

from typing import Any

from .. import CallNode, ContextBinding, ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from . import _provider_claims

__all__ = ["VeronicaMiddleware"]

try:  # not in every 1.x release; describe() falls back to a dict without it
    from ag2.middleware import describe as _describe  # type: ignore[import-not-found, unused-ignore]

    _Description: Any = _describe.MiddlewareDescription
except (ImportError, AttributeError):
    _Description = None


class _ToolFailed(RuntimeError):
    """A tool call that AG2 reported as a ``ToolErrorEvent`` without an exception object."""


class VeronicaMiddleware:
    """Middleware factory for AG2 1.x agents: ``Agent(..., middleware=[VeronicaMiddleware(...)])``.

    One instance may be given to several agents, which then share one budget. ``context`` /
    ``config`` follow :class:`~veronica_mw.ContextBinding` (explicit context, else the current one
    at call time, else one owned context built from ``config``, else uncontained).
    ``cost_estimate_hint`` (USD) is reserved before each model call. Put it *last* in the list
    (innermost) so each model attempt a retry middleware makes counts as a step.
    """

    def __init__(
        self,
        context: ExecutionContext | None = None,
        *,
        config: ExecutionConfig | None = None,
        on_limit: Any = None,
        cost_estimate_hint: float = 0.0,
    ) -> None:
        self._binding = ContextBinding(context, config, on_limit)
        self._config = context.config if context is not None else config
        self._llm_options = WrapOptions(operation_name="ag2.llm", cost_estimate_hint=cost_estimate_hint)

    def __call__(self, event: Any, context: Any) -> BaseMiddleware:
        return _VeronicaTurn(event, context, self._binding, self._llm_options)

    @property
    def owned_context(self) -> ExecutionContext | None:
        """The context built from ``config`` (None until first needed, or with an explicit one)."""
        return self._binding.owned_context

    def reset(self) -> None:
        """Start a fresh owned context for the next run (no effect on explicit contexts)."""
        self._binding.reset_owned()

    def describe(self) -> Any:
        """What AG2 (>= 1.1) shows in ``agent.middleware``: the configured limits, if known up front."""
        kind = type(self).__qualname__
        config = {} if self._config is None else self._config.as_dict()
        if _Description is None:
            return {"kind": kind, "config": config}
        return _Description(kind=kind, config=config)


class _VeronicaTurn(BaseMiddleware):  # type: ignore[misc, unused-ignore]
    """The per-turn middleware object; ``_stopped`` is the halt a tool call met during the turn."""

    def __init__(self, event: Any, context: Any, binding: ContextBinding, llm_options: WrapOptions) -> None:
        super().__init__(event, context)
        self._binding = binding
        self._llm_options = llm_options
        self._stopped: ExecutionHalted | None = None

    async def on_turn(self, call_next: Any, event: Any, context: Any) -> Any:
        ctx = self._binding.resolve()
        if ctx is not None:
            ctx.check()  # a halted context starts no turn
        try:
            reply = await call_next(event, context)
        except ExecutionHalted:
            raise
        except Exception as exc:
            if self._stopped is not None:
                raise self._stopped from exc
            raise
        if self._stopped is not None:
            raise self._stopped
        return reply

    async def on_llm_call(self, call_next: Any, events: Any, context: Any) -> Any:
        ctx = self._binding.resolve()
        if ctx is None:
            return await call_next(events, context)
        node = await ctx.abegin_call("llm", self._llm_options)  # raises: the model is not called
        try:
            with _provider_claims.offered(node):  # the provider SDK request underneath is this step
                response = await call_next(events, context)
        except Exception as exc:
            await node.afail(exc)
            raise
        except BaseException:
            node.commit()  # cancelled mid-call: it may have cost, keep the reservation
            raise
        if isinstance(response, ModelResponse):
            await node.acommit(response, usage=response.usage or None, model=response.model)
        else:
            await node.acommit(response)
        return response

    async def on_tool_execution(self, call_next: Any, event: Any, context: Any) -> Any:
        ctx = self._binding.resolve()
        if ctx is None:
            return await call_next(event, context)
        options = WrapOptions(operation_name=str(getattr(event, "name", "tool")))
        try:
            key = ("ag2-tool", getattr(event, "id", None) or id(event))
            node = await ctx.abegin_call("tool", options, key=key)
        except ExecutionHalted as halted:
            self._stopped = halted
            raise
        try:
            result = await call_next(event, context)
        except Exception as exc:
            self._fail(ctx, node, exc)
            raise
        except BaseException:
            node.commit()
            raise
        if isinstance(result, ToolErrorEvent):
            error = getattr(result, "error", None)
            self._fail(ctx, node, error if isinstance(error, Exception) else _ToolFailed(str(result)))
        else:
            await node.acommit(result)
        if ctx.aborted:
            self._stopped = self._stopped or ctx.halted_error()
            raise self._stopped
        return result

    def _fail(self, ctx: ExecutionContext, node: CallNode, error: Exception) -> None:
        if isinstance(error, ExecutionHalted) or ctx.aborted:
            # Halted inside the tool (a nested contained call): stop the run, not a tool error.
            self._stopped = self._stopped or ctx.halted_error()
            node.fail(self._stopped)
        else:
            node.fail(error)
