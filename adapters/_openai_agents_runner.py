"""``instrument()`` for the Agents SDK: every ``Runner`` call inside a current context is contained.

The SDK has no process-wide hook registry, so the three entry points of ``AgentRunner`` (the
class behind ``Runner.run``, ``run_sync`` and ``run_streamed``) are wrapped, with an undo. Each
call made while an execution context is current gets a :class:`VeronicaRunHooks` bound to that
context, chained in front of the caller's own hooks; a call that already carries one is left as it
is. Outside any context a call passes straight through. Runs started from inside a run (agents
used as tools) go through ``Runner.run`` too, so they are contained as well.

Each contained call also publishes a :class:`RunScope` for its hooks: the model a ``RunConfig``
forces (the hooks cannot see the run config) and, when the run ends, the calls whose end hook
never ran, settled knowing how the run ended.

One operation is one step however many layers see it. An MCP server tool's ``tools/call``, which
``veronica_mw.instrument("mcp")`` contains, joins the tool step begun by ``on_tool_start`` (see
:mod:`._openai_agents_mcp`). And a model call: the SDK's OpenAI models send their
requests through the OpenAI SDK, which ``veronica_mw.instrument("openai")`` contains too. The
request runs in the run's own task, where the scope is visible (our hooks run in tasks of their
own, so no ContextVar of theirs could reach it), so the provider instrumentation is told, through
a finder, which step the request belongs to: the model call in flight, begun by ``on_llm_start``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

from agents import RunHooks
from agents.lifecycle import RunHooksBase
from agents.run import AgentRunner

from .. import CallNode, ExecutionContext, get_current_execution_context
from . import _openai_agents_mcp, _provider_claims
from ._openai_agents_calls import RunScope, current_run
from ._openai_agents_hooks import VeronicaRunHooks, model_and_provider

__all__ = ["ChainedRunHooks", "instrument", "instrumented", "uninstrument"]


class ChainedRunHooks(RunHooks[Any]):
    """Our hooks first (a refusal comes before the caller's hooks see the call), then theirs, for
    every hook the installed SDK defines (also ones added after this was written)."""

    def __init__(self, first: VeronicaRunHooks, then: RunHooksBase[Any, Any]) -> None:
        super().__init__()
        self.first = first
        self.then = then


def _chained(name: str) -> Callable[..., Any]:
    async def hook(self: ChainedRunHooks, *args: Any, **kwargs: Any) -> None:
        await getattr(self.first, name)(*args, **kwargs)
        await getattr(self.then, name)(*args, **kwargs)

    hook.__name__ = hook.__qualname__ = name
    return hook


for _name in dir(RunHooksBase):
    if _name.startswith("on_") and inspect.iscoroutinefunction(getattr(RunHooksBase, _name)):
        setattr(ChainedRunHooks, _name, _chained(_name))


def _has_ours(hooks: Any) -> bool:
    return isinstance(hooks, VeronicaRunHooks) or (
        isinstance(hooks, ChainedRunHooks) and isinstance(hooks.first, VeronicaRunHooks)
    )


def _forced_model(run_config: Any) -> str | None:
    model = run_config.get("model") if isinstance(run_config, Mapping) else getattr(run_config, "model", None)
    if model is None:
        return None
    name, provider = model_and_provider(model)
    return f"{provider}/{name}" if provider and name else name


def _prepare(kwargs: dict[str, Any]) -> RunScope | None:
    """Add our hooks to a Runner call's keyword arguments; None: leave the call alone."""
    hooks = kwargs.get("hooks")
    if not _has_ours(hooks):
        ctx = get_current_execution_context()
        if ctx is None:
            return None
        if hooks is None:
            kwargs["hooks"] = VeronicaRunHooks(ctx)
        elif isinstance(hooks, RunHooksBase):
            kwargs["hooks"] = ChainedRunHooks(VeronicaRunHooks(ctx), hooks)
        else:
            return None  # not run hooks at all: the SDK itself rejects them
    return RunScope(_forced_model(kwargs.get("run_config")))


def _wrap_run(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def run(self: AgentRunner, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        scope = _prepare(kwargs)
        if scope is None:
            return await original(self, starting_agent, input, **kwargs)
        token = current_run.set(scope)
        try:
            result = await original(self, starting_agent, input, **kwargs)
        except BaseException as exc:
            scope.finish(exc)
            raise
        finally:
            current_run.reset(token)
        scope.finish(None)
        return result

    return run


def _wrap_run_sync(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run_sync(self: AgentRunner, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        scope = _prepare(kwargs)
        if scope is None:
            return original(self, starting_agent, input, **kwargs)
        token = current_run.set(scope)
        try:
            result = original(self, starting_agent, input, **kwargs)
        except BaseException as exc:
            scope.finish(exc)
            raise
        finally:
            current_run.reset(token)
        scope.finish(None)
        return result

    return run_sync


def _wrap_run_streamed(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run_streamed(self: AgentRunner, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        scope = _prepare(kwargs)
        if scope is None:
            return original(self, starting_agent, input, **kwargs)
        # The SDK starts the run's task in here: it inherits the scope set now.
        token = current_run.set(scope)
        try:
            result = original(self, starting_agent, input, **kwargs)
        except BaseException as exc:
            scope.finish(exc)
            raise
        finally:
            current_run.reset(token)
        task = getattr(result, "run_loop_task", None)
        if isinstance(task, asyncio.Future):
            task.add_done_callback(lambda done: scope.finish(_outcome(done)))
        # else (API drift): calls left open are settled when their run's objects are collected
        return result

    return run_streamed


def _outcome(task: asyncio.Future[Any]) -> BaseException | None:
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception()


def _enclosing_model_call(ctx: ExecutionContext, kind: str = "llm") -> CallNode | None:
    """For the provider instrumentation: the model call a request made here belongs to (model
    requests only: an MCP call finds its tool step through ``_openai_agents_mcp.enclosing_tool``)."""
    if kind != "llm":
        return None
    scope = current_run.get()
    return scope.model_call(ctx) if scope is not None else None


_WRAPPERS = {"run": _wrap_run, "run_sync": _wrap_run_sync, "run_streamed": _wrap_run_streamed}
_originals: dict[str, Any] = {}
_lock = threading.Lock()


def instrument() -> None:
    """Contain every Runner call made inside a current execution context (idempotent)."""
    with _lock:
        if _originals:
            return
        for name, wrap in _WRAPPERS.items():
            original = AgentRunner.__dict__.get(name)
            if callable(original):  # hasattr-style guard against API drift
                _originals[name] = original
                setattr(AgentRunner, name, wrap(original))
        _provider_claims.register(_enclosing_model_call)
        _openai_agents_mcp.install()


def uninstrument() -> None:
    """Restore ``AgentRunner`` (idempotent). Runs already started keep their hooks."""
    with _lock:
        for name, original in _originals.items():
            setattr(AgentRunner, name, original)
        _originals.clear()
        _provider_claims.unregister(_enclosing_model_call)
        _openai_agents_mcp.remove()


def instrumented() -> bool:
    return bool(_originals)
