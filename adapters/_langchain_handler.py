"""``VeronicaCallbackHandler``: one kernel step per LangChain model or tool run (its async twin,
:class:`~veronica_mw.adapters.langchain.VeronicaAsyncCallbackHandler`, shares :class:`HandlerCore`).

Kept apart from :mod:`veronica_mw.adapters.langchain` (which imports it after the gated
framework import) so that module holds only the wiring: zero-config hook, opt-outs, lazy agent
middleware.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult

from .. import CallNode, ContextBinding, ExecutionConfig, ExecutionContext, WrapOptions
from ._langchain_claims import adopt
from ._provider_estimate import OUTPUT_LIMITS, limit, reservation, text_tokens

__all__ = ["COST_HINT_METADATA_KEY", "HandlerCore", "VeronicaCallbackHandler"]

_OPTIONS: dict[tuple[str, float, str | None], WrapOptions] = {}

COST_HINT_METADATA_KEY = "veronica_cost_estimate_hint"
"""Run metadata key (``model.with_config(metadata={...})``) giving a per-call cost hint in USD."""


def _hint(value: Any, default: float | None) -> float | None:
    # A bad hint in user metadata must not break the run (the handler raises errors on purpose).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    value = float(value)
    return value if math.isfinite(value) and value >= 0.0 else default


def _llm_outcome(response: LLMResult) -> tuple[Any, Any, str | None]:
    """(message, usage, model) of a finished model run; chat usage lives on the message."""
    message: Any = None
    usage: Any = None
    model: Any = None
    if response.generations and response.generations[0]:
        message = getattr(response.generations[0][0], "message", None)
    if message is not None:
        usage = getattr(message, "usage_metadata", None)
        meta = getattr(message, "response_metadata", None) or {}
        model = meta.get("model_name") or meta.get("model")
    output = response.llm_output or {}
    if usage is None:  # text LLMs report OpenAI-style usage in llm_output
        usage = output.get("token_usage") or output.get("usage")
    if not model:
        model = output.get("model_name") or output.get("model")
    return message, usage, model if isinstance(model, str) and model else None


def llm_result(response: LLMResult) -> tuple[Any, Any, str | None]:
    """What a finished model run commits: (result, usage, model); the result is the chat message,
    or a text LLM's Generation (what output checks read), or _UNSET-like None when there is none."""
    message, usage, model = _llm_outcome(response)
    if message is None and response.generations and response.generations[0]:
        message = response.generations[0][0]
    return message, usage, model


class HandlerCore:
    """What the sync and the async handler share: binding, per-run options and settling.

    Beginning a step is the only part that differs (the async twin awaits the kernel's
    ``abegin_call``, so an async budget parent never blocks the event loop); settling is the same.
    """

    def _setup(
        self, context: ExecutionContext | None, config: ExecutionConfig | None, hint: float | None,
        on_limit: Any = None,
    ) -> None:  # fmt: skip
        self._binding = ContextBinding(context, config, on_limit)
        # None: each model run reserves its worst case (the provider layer's estimator).
        self._hint = None if hint is None else WrapOptions(cost_estimate_hint=hint).cost_estimate_hint
        # Open steps by LangChain run id; entries live from start to end/error only.
        self._open: dict[UUID, CallNode] = {}

    @property
    def owned_context(self) -> ExecutionContext | None:
        """The context this handler built from ``config`` (None until first needed)."""
        return self._binding.owned_context

    def _resolve(self) -> ExecutionContext | None:
        return self._binding.resolve()

    def _options(
        self,
        kind: str,
        serialized: Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        extra: Mapping[str, Any],
        ctx: ExecutionContext | None = None,
        prompt: Any = None,
    ) -> WrapOptions:
        meta = metadata or {}
        params = extra.get("invocation_params") or {}
        name = extra.get("name") or (serialized or {}).get("name") or kind
        model = meta.get("ls_model_name") or params.get("model") or params.get("model_name")
        model = model if isinstance(model, str) and model else None
        name = name if isinstance(name, str) else kind
        hint = 0.0
        if kind == "llm":
            given = _hint(meta.get(COST_HINT_METADATA_KEY), self._hint)
            if given is None and ctx is not None:
                # The worst case, as the provider layer reserves it: the prompt estimated, the
                # run's max tokens (LangChain's invocation params) or the configured default.
                worst = (
                    text_tokens(prompt, params.get("tools")),
                    limit(
                        {**params, "ls_max_tokens": meta.get("ls_max_tokens")},
                        *OUTPUT_LIMITS,
                        "ls_max_tokens",
                    ),
                )
                provider = meta.get("ls_provider")
                provider = provider if isinstance(provider, str) else None
                given = reservation(ctx, model, provider, worst[0], worst[1], name)
            hint = given or 0.0
        key = (name, hint, model)
        # Options are frozen: one per (name, hint, model), not one per run (a run's own cost).
        options = _OPTIONS.get(key)
        if options is None:
            if len(_OPTIONS) >= 1024:
                _OPTIONS.clear()
            options = _OPTIONS[key] = WrapOptions(
                operation_name=key[0], cost_estimate_hint=key[1], model=key[2]
            )
        return options

    def _end_llm(self, run_id: UUID, response: LLMResult) -> None:
        node = self._open.pop(run_id, None)
        if node is None:
            return
        message, usage, model = llm_result(response)
        if message is not None:
            node.commit(message, usage=usage, model=model)
        else:
            node.commit(usage=usage, model=model)

    def _end_tool(self, run_id: UUID, output: Any) -> None:
        node = self._open.pop(run_id, None)
        if node is not None:
            node.commit(output)

    def _fail(self, run_id: UUID, error: BaseException) -> None:
        node = self._open.pop(run_id, None)
        if node is None:
            return
        if isinstance(error, Exception):
            node.fail(error)
        else:
            # Cancelled mid-call (CancelledError, KeyboardInterrupt): not a failure that draws a
            # retry, but the call may have cost money, so the reservation is kept as spent.
            node.commit(cost_usd=node.reserved_usd)


class VeronicaCallbackHandler(HandlerCore, BaseCallbackHandler):
    """Contain LangChain runs: one kernel step per model or tool run, halts raised before the call.

    Binding: ``context`` if given; else the context current at call time (request middleware or an
    entered ``ExecutionContext``); else one context owned by this handler, built from ``config``;
    else runs are not contained. Before each model call its worst case is reserved (the prompt
    estimated, the run's ``max_tokens`` or the configured default out, priced for its model) so
    ``max_cost_usd`` stops the call that could cross it; ``cost_estimate_hint`` (USD) reserves that
    instead, and run metadata ``{"veronica_cost_estimate_hint": x}`` overrides it per runnable. A
    named model that cannot be priced is refused (``unpriced``) under a cost limit.

    Sync, so it contains sync and async runs alike: LangChain runs a sync handler in async runs
    too (in its executor, with a copy of the caller's context, and awaits it before the model is
    called) -- one thread-pool hop per event. For async-only code,
    :class:`VeronicaAsyncCallbackHandler` is awaited inline instead (the zero-config hook picks
    the right one by itself). ``raise_error`` makes LangChain propagate
    :class:`~veronica_mw.ExecutionHalted` instead of logging it. Not ``run_inline``: LangChain
    leaves the other handlers' start coroutines un-awaited when an inline handler raises.
    """

    raise_error = True

    def __init__(
        self,
        context: ExecutionContext | None = None,
        *,
        config: ExecutionConfig | None = None,
        cost_estimate_hint: float | None = None,
        on_limit: Any = None,
    ) -> None:
        super().__init__()
        self._setup(context, config, cost_estimate_hint, on_limit)

    # Chain/retriever/custom events carry no model or tool call: skip them cheaply.
    @property
    def ignore_chain(self) -> bool:
        return True

    @property
    def ignore_retriever(self) -> bool:
        return True

    @property
    def ignore_retry(self) -> bool:
        return True

    @property
    def ignore_custom_event(self) -> bool:
        return True

    def _begin(
        self,
        kind: str,
        run_id: UUID,
        serialized: Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        extra: Mapping[str, Any],
        arguments: Any = None,
    ) -> None:
        ctx = self._resolve()
        if ctx is None:
            return
        node = adopt(ctx, kind, run_id)
        if node is None:
            # Raises ExecutionHalted (or ToolCallRejected): the call never runs. A tool an approval
            # policy gates waits here for the approver, who sees its arguments (no edits: a
            # callback cannot change what the tool runs with). A model run's arguments: its prompt.
            options = self._options(kind, serialized, metadata, extra, ctx, arguments)
            node = ctx.begin_call(kind, options, key=run_id, arguments=arguments if kind == "tool" else None)
        self._open[run_id] = node

    # -- model runs ---------------------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._begin("llm", run_id, serialized, metadata, kwargs, messages)

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._begin("llm", run_id, serialized, metadata, kwargs, prompts)

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._end_llm(run_id, response)

    def on_llm_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._fail(run_id, error)

    # -- tool runs ----------------------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._begin("tool", run_id, serialized, metadata, kwargs, inputs if inputs is not None else input_str)

    def on_tool_end(
        self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._end_tool(run_id, output)

    def on_tool_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._fail(run_id, error)
