"""VeronicaMiddleware against the real AG2 1.x (``import ag2``), run in the ``ag2`` env.

Models are ``ag2.testing.TestConfig`` scripts wrapped in ``TrackingConfig``, whose mock records
every call that reaches the model; tool bodies count their own runs.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest
from ag2 import Agent, tool
from ag2.events import ModelMessage, ModelResponse, ToolCallEvent
from ag2.events.types import Usage
from ag2.middleware import BaseMiddleware
from ag2.testing import TestConfig, TrackingConfig
from fastapi import FastAPI

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    MissingFrameworkError,
    TokenUsage,
    get_current_execution_context,
)
from veronica_mw.adapters import ag2 as ag2_adapter
from veronica_mw.adapters.ag2 import VeronicaMiddleware
from veronica_mw.kernel.pricing import price_usage
from veronica_mw.web.asgi import VeronicaASGIMiddleware


def limits(max_steps: int, *, max_cost_usd: float = 10.0, max_retries_total: int = 5) -> ExecutionConfig:
    return ExecutionConfig(
        max_cost_usd=max_cost_usd, max_steps=max_steps, max_retries_total=max_retries_total
    )


# ag2 1.0's TestConfig always re-raises tool errors; later ones can behave like a real provider.
_TOOL_ERRORS_FLAG = "raise_tool_errors" in inspect.signature(TestConfig.__init__).parameters


def always_calls_tool(turns: int = 50, *, raise_tool_errors: bool = False) -> TrackingConfig:
    script = [ToolCallEvent("lookup", arguments='{"q": "x"}') for _ in range(turns)]
    options: dict[str, Any] = {"raise_tool_errors": raise_tool_errors} if _TOOL_ERRORS_FLAG else {}
    return TrackingConfig(TestConfig(*script, **options))


def lookup_tool(runs: list[str]) -> Any:
    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        return f"found {q}"

    return lookup


@pytest.mark.anyio
@pytest.mark.parametrize("raise_tool_errors", [False, True], ids=["real_provider", "test_default"])
async def test_agent_whose_model_always_calls_a_tool_stops_at_the_limit(raise_tool_errors: bool) -> None:
    runs: list[str] = []
    model = always_calls_tool(raise_tool_errors=raise_tool_errors)
    middleware = VeronicaMiddleware(config=limits(5))
    agent = Agent("researcher", config=model, tools=[lookup_tool(runs)], middleware=[middleware])
    with pytest.raises(ExecutionHalted) as halted:
        await agent.ask("Find x.")
    assert halted.value.reason == "step_limit"
    # model, tool, model, tool, model = 5 steps; the third tool call is refused and, with
    # raise_tool_errors=False, the model is *not* handed the refusal as a tool error.
    assert (model.mock.call_count, len(runs)) == (3, 2)
    owned = middleware.owned_context
    assert owned is not None and owned.get_snapshot().step_count == 5


@pytest.mark.anyio
async def test_model_calls_are_refused_before_they_reach_the_model() -> None:
    model = TrackingConfig(TestConfig("reply"))  # each ask builds a fresh client from the script
    agent = Agent("writer", config=model, middleware=[VeronicaMiddleware()])
    async with ExecutionContext(limits(2)) as ctx:
        assert (await agent.ask("a")).body == "reply"
        assert (await agent.ask("b")).body == "reply"
        with pytest.raises(ExecutionHalted) as halted:
            await agent.ask("c")
    assert halted.value.reason == "step_limit"
    assert model.mock.call_count == 2
    assert ctx.get_snapshot().step_count == 2


@pytest.mark.anyio
async def test_usage_of_the_model_response_is_priced() -> None:
    usage = Usage(prompt_tokens=1000, completion_tokens=200)
    reply = ModelResponse(ModelMessage("priced"), usage=usage, model="gpt-4o")
    agent = Agent("writer", config=TestConfig(reply), middleware=[VeronicaMiddleware()])
    async with ExecutionContext(limits(5)) as ctx:
        await agent.ask("hi")
    snapshot = ctx.get_snapshot()
    assert snapshot.cost_usd_accumulated == pytest.approx(price_usage(TokenUsage(1000, 200), "gpt-4o"))
    assert snapshot.cost_usd_accumulated > 0


@pytest.mark.anyio
async def test_a_failing_model_call_is_recorded_and_draws_one_retry() -> None:
    model = TrackingConfig(TestConfig(ConnectionError("provider down")))
    agent = Agent("writer", config=model, middleware=[VeronicaMiddleware()])
    async with ExecutionContext(limits(5)) as ctx:
        with pytest.raises(ConnectionError):
            await agent.ask("hi")
    snapshot = ctx.get_snapshot()
    assert model.mock.call_count == 1
    assert (snapshot.step_count, snapshot.retries_used, snapshot.in_flight) == (1, 1, 0)


@pytest.mark.anyio
async def test_failing_tools_draw_from_the_retry_budget() -> None:
    runs: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        raise ValueError("index offline")

    model = always_calls_tool()
    middleware = VeronicaMiddleware(config=limits(100, max_retries_total=1))
    agent = Agent("researcher", config=model, tools=[lookup], middleware=[middleware])
    with pytest.raises(ExecutionHalted) as halted:
        await agent.ask("Find x.")
    # AG2 feeds "index offline" back to the model; the second failure spends the last retry.
    assert halted.value.reason == "retry_limit"
    assert (model.mock.call_count, len(runs)) == (2, 2)


@pytest.mark.anyio
async def test_a_halt_inside_a_tool_stops_the_run_instead_of_becoming_a_tool_error() -> None:
    runs: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        ctx = get_current_execution_context()
        assert ctx is not None
        for _ in range(3):  # nested contained calls; the limit is reached inside the tool
            ctx.call_tool(lambda: None)
        return "unreachable"

    model = always_calls_tool()
    agent = Agent("researcher", config=model, tools=[lookup], middleware=[VeronicaMiddleware()])
    async with ExecutionContext(limits(4)) as ctx:
        with pytest.raises(ExecutionHalted) as halted:
            await agent.ask("Find x.")
    assert halted.value.reason == "step_limit"
    assert (model.mock.call_count, len(runs)) == (1, 1)
    assert ctx.get_snapshot().step_count == 4


class SwallowErrors(BaseMiddleware):
    """A middleware outside ours that turns any model error into a canned reply."""

    async def on_llm_call(self, call_next: Any, events: Sequence[Any], context: Any) -> Any:
        try:
            return await call_next(events, context)
        except Exception:
            return ModelResponse(ModelMessage("something went wrong"))


@pytest.mark.anyio
async def test_the_halt_escapes_even_when_an_outer_middleware_swallows_errors() -> None:
    runs: list[str] = []
    model = always_calls_tool()
    middleware = VeronicaMiddleware(config=limits(3))
    agent = Agent(
        "researcher", config=model, tools=[lookup_tool(runs)], middleware=[SwallowErrors, middleware]
    )
    with pytest.raises(ExecutionHalted) as halted:
        await agent.ask("Find x.")
    assert halted.value.reason == "step_limit"
    assert (model.mock.call_count, len(runs)) == (2, 1)


@pytest.mark.anyio
async def test_one_instance_shared_by_two_agents_shares_the_budget() -> None:
    middleware = VeronicaMiddleware(config=limits(3))
    planner_model = TrackingConfig(TestConfig("a plan"))
    critic_model = TrackingConfig(TestConfig("a critique"))
    planner = Agent("planner", config=planner_model, middleware=[middleware])
    critic = Agent("critic", config=critic_model, middleware=[middleware])
    message = "Draft a plan."
    with pytest.raises(ExecutionHalted):
        for _ in range(10):
            message = str((await planner.ask(message)).body)
            message = str((await critic.ask(message)).body)
    assert (planner_model.mock.call_count, critic_model.mock.call_count) == (2, 1)


@pytest.mark.anyio
async def test_explicit_context_wins_and_no_context_means_uncontained() -> None:
    explicit = ExecutionContext(limits(1))
    model = TrackingConfig(TestConfig("reply"))
    agent = Agent("writer", config=model, middleware=[VeronicaMiddleware(explicit)])
    async with ExecutionContext(limits(10)) as current:
        await agent.ask("a")
        with pytest.raises(ExecutionHalted):
            await agent.ask("b")
    assert (explicit.get_snapshot().step_count, current.get_snapshot().step_count) == (1, 0)
    assert model.mock.call_count == 1
    free_model = TrackingConfig(TestConfig("free"))
    free = Agent("writer", config=free_model, middleware=[VeronicaMiddleware()])
    for _ in range(3):
        assert (await free.ask("a")).body == "free"
    assert free_model.mock.call_count == 3


@pytest.mark.anyio
async def test_a_halted_context_starts_no_turn() -> None:
    model = TrackingConfig(TestConfig("never"))
    agent = Agent("writer", config=model, middleware=[VeronicaMiddleware()])
    async with ExecutionContext(limits(5)) as ctx:
        ctx.cancel("client went away")
        with pytest.raises(ExecutionHalted) as halted:
            await agent.ask("hi")
    assert halted.value.reason == "cancelled"
    assert model.mock.call_count == 0


def test_describe_and_reset() -> None:
    middleware = VeronicaMiddleware(config=limits(7))
    description = middleware.describe()
    assert description.kind == "VeronicaMiddleware" and description.config["max_steps"] == 7
    assert middleware.owned_context is None
    middleware.reset()


def test_the_014_capability_is_not_offered_with_ag2_1x() -> None:
    assert ag2_adapter.GENERATION == "1.x"
    with pytest.raises(MissingFrameworkError, match=r"ag2>=0\.14,<0\.15") as missing:
        ag2_adapter.VeronicaCapability  # noqa: B018
    assert 'pip install "veronica-mw[ag2]"' in str(missing.value)


# -- inside a FastAPI request under the ASGI middleware -------------------------------------------


def test_agent_inside_fastapi_requests_halts_with_429(serve: Callable[[Any], str]) -> None:
    runs: list[str] = []
    model = always_calls_tool()
    agent = Agent("researcher", config=model, tools=[lookup_tool(runs)], middleware=[VeronicaMiddleware()])
    app = FastAPI()

    @app.post("/research")
    async def research() -> dict[str, Any]:
        reply = await agent.ask("Find x.")  # the model never stops calling the tool
        return {"answer": str(reply.body)}

    app.add_middleware(VeronicaASGIMiddleware, config=limits(5))
    with httpx.Client(base_url=serve(app), timeout=20.0) as client:
        responses = [client.post("/research"), client.post("/research")]
    for response in responses:
        assert response.status_code == 429
        body = response.json()
        assert (body["reason"], body["steps_used"]) == ("step_limit", 5)
    assert (model.mock.call_count, len(runs)) == (6, 4)  # 3 model calls and 2 tool runs per request


# -- the multi-agent scenario of `veronica-mw demo` ------------------------------------------------


def test_multi_agent_demo_scenario() -> None:
    from veronica_mw.adapters._ag2_demo import MODEL, USAGE, run_multi_agent_scenario

    result = run_multi_agent_scenario()
    assert json.loads(json.dumps(result)) == result
    assert (result["baseline_llm_calls"], result["contained_llm_calls"]) == (60, 8)
    assert result["reduction_pct"] == 86.7
    assert (result["halted"], result["halt_reason"], result["steps_used"]) == (True, "step_limit", 8)
    assert result["contained_cost_usd"] == pytest.approx(8 * price_usage(USAGE, MODEL))
    # Each agent has its own share (5 steps), and the coordinator (8) still bounds their sum.
    children = result["contexts"]["children"]
    assert [(c["name"], c["steps_used"], c["reason"]) for c in children] == [
        ("planner", 4, "step_limit"),
        ("critic", 4, "step_limit"),
    ]
    assert "ancestor 'coordinator'" in result["halt_detail"]
    lines = result["tree"].splitlines()
    assert lines[0].startswith("coordinator  steps 8/8") and lines[0].endswith("halted: step_limit")
    assert lines[1].startswith("├── planner  steps 4/5") and lines[2].startswith("└── critic  steps 4/5")
