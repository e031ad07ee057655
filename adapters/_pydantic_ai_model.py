"""The model wrapper the capability puts around every model that serves a request.

Pydantic AI asks each capability's ``get_wrapper_model`` for every *attempt* at a model request
(a retry on another model, ``ModelFallback``'s next candidate, each is its own attempt) and calls
the wrapper's ``request``/``request_stream`` once per request it sends, continuation segments
(Anthropic ``pause_turn``, OpenAI background polls) included. So one step here is one request to a
provider: it is begun before the request is sent (a refusal raises ExecutionHalted and nothing is
sent) and committed with the usage of the response that came back. Before 2.62 the capability
puts this wrapper on the request step's model itself (one attempt per step there). Not counted:
``count_tokens`` (free) and the compaction request ``OpenAICompaction`` sends from its own hook,
on the model before any wrapper. Imported only after the framework gate of
:mod:`veronica_mw.adapters.pydantic_ai`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from ._provider_estimate import limit, text_tokens
from ._pydantic_ai_steps import Owner, Step, begin_request, pricing_provider

_LOCAL_SYSTEMS = frozenset({"function", "test"})


@dataclass(init=False)
class VeronicaModel(WrapperModel):
    """Counts each request ``wrapped`` sends as one step of the owner's execution context."""

    def __init__(self, wrapped: Model, owner: Owner) -> None:
        super().__init__(wrapped)
        self._owner = owner

    def _begin(
        self, request: list[ModelMessage], settings: ModelSettings | None, parameters: ModelRequestParameters
    ) -> Step | None:
        name = self.wrapped.model_name
        provider = pricing_provider(name, self.wrapped.system) if name else None
        # The worst case, as the provider layer reserves it: the prompt (messages, tool schemas,
        # instructions) estimated, and the request's max_tokens or the configured default.
        merged = self.wrapped.settings or {}
        if settings:
            merged = {**merged, **settings}
        tools = [(t.name, t.description, t.parameters_json_schema) for t in parameters.function_tools]
        worst = (text_tokens(request, tools), limit(merged, "max_tokens"))
        # Pydantic AI's own local models (FunctionModel, TestModel) run Python, not a provider: one
        # not named after a priced model reserves nothing rather than being refused as unpriced.
        local = self.wrapped.system in _LOCAL_SYSTEMS
        return begin_request(self._owner, f"pydantic_ai.model:{name}", request, name, provider, worst, local)

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        step = self._begin(
            messages, model_settings, model_request_parameters
        )  # raises ExecutionHalted: the request is never sent
        if step is None:
            return await self.wrapped.request(messages, model_settings, model_request_parameters)
        with step.running():
            response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        await step.commit_response(response)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        step = self._begin(messages, model_settings, model_request_parameters)
        if step is None:
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream
            return
        with step.running():  # opening the stream sends the request; a failure there is the call's
            opened = self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            )
            stream = await opened.__aenter__()
        try:
            yield stream
        except BaseException as exc:
            # The consumer stopped (a break, a cancel, its own error): the request was sent and is
            # billed for what streamed so far, so that usage is committed, not a failure recorded.
            try:
                suppressed = await opened.__aexit__(type(exc), exc, exc.__traceback__)
            finally:
                step.commit_streamed(stream.get(), quiet=True)
            if not suppressed:
                raise
            return
        try:
            await opened.__aexit__(None, None, None)
        finally:
            step.commit_streamed(stream.get())
