"""An OpenAI Agents SDK agent contained by veronica-mw, offline (a fake model: no API key, no network).

Run:  python examples/openai_agents_app.py
or:   uvicorn examples.openai_agents_app:app   then   curl -i -X POST http://127.0.0.1:8000/research

The researcher's model asks for the ``lookup`` tool on every turn and would loop until the SDK's
``max_turns``. With ``max_steps=5`` the run stops after model, tool, model, tool, model: the third
tool call is refused and ``Runner.run`` raises ExecutionHalted. A second run with a cost ceiling
stops on the token usage the model reports, priced offline for gpt-4o-mini with genai-prices.
Behind FastAPI, ``veronica_mw.instrument()`` contains every run inside a request without a hooks
argument, and the middleware answers the halt with HTTP 429.

Replace ``ArchiveModel()`` with ``"gpt-4o-mini"`` (and set OPENAI_API_KEY) to run the real thing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from fastapi import FastAPI
from openai.types.responses import ResponseFunctionToolCall

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionHalted, VeronicaASGIMiddleware
from veronica_mw.adapters.openai_agents import VeronicaRunHooks

set_tracing_disabled(True)  # the SDK would export traces to OpenAI


class ArchiveModel(Model):
    """A model that always wants one more lookup, and reports 1000 + 100 tokens per call."""

    model = "gpt-4o-mini"  # the name the SDK's own models carry; veronica-mw prices by it
    calls = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        ArchiveModel.calls += 1
        n = ArchiveModel.calls
        ask = ResponseFunctionToolCall(
            type="function_call",
            call_id=f"call_{n}",
            id=f"fc_{n}",
            name="lookup",
            arguments=f'{{"query": "source {n}"}}',
        )
        usage = Usage(requests=1, input_tokens=1000, output_tokens=100, total_tokens=1100)
        return ModelResponse(output=[ask], usage=usage, response_id=f"resp_{n}")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this example does not stream")


lookups = 0


@function_tool
def lookup(query: str) -> str:
    """Look a query up in the archive."""
    global lookups
    lookups += 1
    return f"archive entry for {query}"


def researcher() -> Agent[Any]:
    return Agent(name="researcher", instructions="Collect sources.", model=ArchiveModel(), tools=[lookup])


async def contained_run(title: str, config: ExecutionConfig) -> None:
    hooks = VeronicaRunHooks(config=config)  # one context owned by these hooks, built from config
    calls_before, lookups_before = ArchiveModel.calls, lookups
    try:
        await Runner.run(researcher(), "Collect sources on containment.", hooks=hooks, max_turns=100)
        outcome = "finished"
    except ExecutionHalted as halted:
        outcome = f"halted: {halted.reason}"
    snap = hooks.owned_context.get_snapshot()  # type: ignore[union-attr]
    print(
        f"{title}: {outcome}; model calls {ArchiveModel.calls - calls_before}, "
        f"tool runs {lookups - lookups_before}, steps {snap.step_count}, "
        f"cost ${snap.cost_usd_accumulated:.6f}"
    )


# -- the same agent behind FastAPI: each request gets its own budget --------------------------------

veronica_mw.instrument("openai-agents")  # every Runner call inside a request is contained
api = FastAPI(title="veronica-mw + OpenAI Agents SDK")


@api.post("/research")
async def research() -> dict[str, Any]:
    result = await Runner.run(researcher(), "Collect sources on containment.", max_turns=100)
    return {"answer": result.final_output}


app = VeronicaASGIMiddleware(api, config=ExecutionConfig(max_cost_usd=0.05, max_steps=5, max_retries_total=2))


async def over_http() -> None:
    import httpx

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://example") as client:
        response = await client.post("/research")
    print(f"POST /research -> {response.status_code} {response.json()['reason']}")


async def main() -> None:
    await contained_run("step limit", ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=2))
    # gpt-4o-mini prices 1000 + 100 tokens at $0.00021: the 5th model call takes the total past $0.001.
    await contained_run(
        "cost ceiling", ExecutionConfig(max_cost_usd=0.001, max_steps=100, max_retries_total=2)
    )
    await over_http()


if __name__ == "__main__":
    asyncio.run(main())
