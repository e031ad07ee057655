"""Kernel steps for Pydantic AI model requests and tool executions, and the retries between them.

Shared by the capability (tools, output retries) and the model wrapper (requests). Each step is
begun in the context the owner's :class:`~veronica_mw.ContextBinding` resolves to when the call
starts, before it runs, and settled exactly once. Imported only after the framework gate of
:mod:`veronica_mw.adapters.pydantic_ai`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from pydantic import ValidationError
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipToolExecution,
    ToolRetryError,
)
from pydantic_ai.messages import ModelResponse
from pydantic_ai.usage import RequestUsage

from .. import CallNode, ContextBinding, ExecutionContext, ExecutionHalted, TokenUsage, WrapOptions
from ..kernel.context import current_node
from ..kernel.pricing import price_usage

# What a tool step can end with besides a result: the tool never ran (skipped or deferred by a
# hook inside ours), or pydantic-ai will ask the model again (a retry, drawn from the budget).
NOT_RUN: tuple[type[BaseException], ...] = (SkipToolExecution, CallDeferred, ApprovalRequired)
RETRY_SIGNALS: tuple[type[BaseException], ...] = (ModelRetry, ToolRetryError, ValidationError)


class Owner(Protocol):
    binding: ContextBinding
    cost_estimate_hint: float


class Step:
    """One begun model request or tool execution: the kernel node and its context."""

    __slots__ = ("ctx", "node")

    def __init__(self, ctx: ExecutionContext, node: CallNode) -> None:
        self.ctx = ctx
        self.node = node

    @contextmanager
    def running(self) -> Iterator[None]:
        """Calls made inside (a provider SDK's instrumentation, a sub-agent) record this node as
        their parent; an exception settles the step (see :meth:`failed`)."""
        token = current_node.set(self.node.node_id)
        try:
            yield
        except BaseException as exc:
            self.failed(exc)
            raise
        finally:
            current_node.reset(token)

    def failed(self, exc: BaseException) -> None:
        """Settle after ``exc``; raise the halt instead when it ends a retry the budget cannot pay."""
        if isinstance(exc, NOT_RUN):
            self.node.release()  # the tool never ran: its step is given back
        elif isinstance(exc, RETRY_SIGNALS):
            # pydantic-ai would ask the model again: one retry from the chain-wide budget, and no
            # further model call when that budget is spent.
            self.node.fail(exc)
            if self.ctx.aborted:
                raise self.ctx.halted_error() from exc
        elif isinstance(exc, Exception):
            self.node.fail(exc)  # draws one retry, like any failed call
        else:
            # Cancelled or interrupted mid-call: it may have cost money, so the reservation stays spent.
            self.node.commit(cost_usd=self.node.reserved_usd)

    def commit_response(self, response: ModelResponse) -> None:
        """Commit a model response: its usage priced for the model that answered."""
        tokens = _tokens(response.usage)
        model = response.model_name or self.node.model
        if tokens is None or not model:
            self.node.commit(response, model=model)
            return
        cost = _price(tokens, model, response.provider_name)
        if cost is None:  # the kernel records the model as unpriced and keeps the reserved hint
            self.node.commit(response, usage=tokens, model=model)
        else:
            self.node.commit(response, cost_usd=cost, usage=tokens, model=model)


def begin(owner: Owner, kind: str, name: str, model: str | None = None) -> Step | None:
    """Begin a step in the owner's context (None: the call runs uncontained). Raises
    :class:`~veronica_mw.ExecutionHalted` at any limit, so the call never runs."""
    ctx = owner.binding.resolve()
    if ctx is None:
        return None
    options = WrapOptions(
        operation_name=name,
        cost_estimate_hint=owner.cost_estimate_hint if kind == "llm" else 0.0,
        model=model or None,
    )
    return Step(ctx, ctx.begin_call(kind, options))


def draw_retry(owner: Owner, exc: BaseException) -> None:
    """pydantic-ai is about to ask the model again (output validation failed, a validator or a
    tool's arguments said retry): draw one retry, and raise the halt when the budget is spent."""
    ctx = owner.binding.resolve()
    if ctx is not None and not ctx.record_retry(exc):
        raise ctx.halted_error() from exc


def unwrap_halt(exc: BaseException) -> ExecutionHalted | None:
    """The ExecutionHalted behind ``exc``, when something re-raised a halt as another exception."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ExecutionHalted):
            return current
        group = getattr(current, "exceptions", None)  # an exception group (3.11+ builtin)
        if isinstance(group, tuple):
            todo.extend(inner for inner in group if isinstance(inner, BaseException))
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                todo.append(linked)
    return None


def _tokens(usage: RequestUsage | Any) -> TokenUsage | None:
    """pydantic-ai's usage in the kernel's terms (both count cache reads and writes inside input)."""
    if not isinstance(usage, RequestUsage) or not (usage.input_tokens or usage.output_tokens):
        return None  # the response reported no usage: the reserved hint is kept as its cost
    return TokenUsage(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)


def _price(tokens: TokenUsage, model: str, provider: str | None) -> float | None:
    """Price with genai-prices under the provider that answered, else by the model name alone
    (pydantic-ai's provider names are not always genai-prices' ids); None when unknown."""
    for candidate in (provider, None) if provider else (None,):
        try:
            return price_usage(tokens, model, candidate)
        except LookupError:
            continue
    return None
