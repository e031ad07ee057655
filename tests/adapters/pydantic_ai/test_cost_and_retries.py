"""Cost from each response's usage and model name; retries drawn from ``max_retries_total``.

Prices are checked against genai-prices itself. Every way pydantic-ai asks the model again
(output validators and output functions raising ``ModelRetry``, structured output that fails
validation, a tool's arguments that fail validation, a tool raising ``ModelRetry``) draws one
retry from the chain-wide budget; once it is spent the request that would serve the retry is
refused with ``retry_limit``. pydantic-ai's own retry limits are set far higher throughout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from genai_prices import Usage, calc_price
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason
from veronica_mw.adapters.pydantic_ai import VeronicaCapability

from .fakes import INPUT_TOKENS, MODEL, OUTPUT_TOKENS, PRICE, Answering, Runaway

MANY = 50  # pydantic-ai's own retry budgets: never the limit that stops these runs


def limits(*, cost: float = 100.0, steps: int = 100, retries: int = 3) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=cost, max_steps=steps, max_retries_total=retries)


# -- cost ------------------------------------------------------------------------------------------


def test_each_response_is_priced_with_genai_prices() -> None:
    fake = Answering()
    agent = Agent(fake.model, capabilities=[VeronicaCapability()])
    with ExecutionContext(limits()) as ctx:
        agent.run_sync("question")
    [node] = ctx.graph.nodes()
    assert (node.model, node.tokens_in, node.tokens_out) == (MODEL, INPUT_TOKENS, OUTPUT_TOKENS)
    assert node.cost_usd == pytest.approx(PRICE, rel=1e-9)
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(PRICE, rel=1e-9)


def test_cached_tokens_are_priced_as_cache_reads() -> None:
    usage = RequestUsage(input_tokens=10_000, output_tokens=100, cache_read_tokens=8_000)

    def text(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("cached answer")], usage=usage)

    agent = Agent(FunctionModel(text, model_name="claude-sonnet-4-5"), capabilities=[VeronicaCapability()])
    with ExecutionContext(limits()) as ctx:
        agent.run_sync("question")
    expected = calc_price(
        Usage(input_tokens=10_000, output_tokens=100, cache_read_tokens=8_000), model_ref="claude-sonnet-4-5"
    )
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(float(expected.total_price), rel=1e-9)


def test_max_cost_refuses_the_request_whose_worst_case_could_cross_it() -> None:
    fake = Runaway()
    agent = fake.agent([VeronicaCapability()])
    ceiling = PRICE * 2.5
    with ExecutionContext(limits(cost=ceiling)) as ctx, pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("weather?")
    assert caught.value.reason == HaltReason.BUDGET_EXCEEDED
    # each request reserved its worst case (prompt estimate + the default 4096 output tokens at the
    # model's price) before it ran, so the ceiling is never crossed, not even by the last request
    nodes = [n for n in ctx.graph.nodes() if n.kind == "llm"]
    assert fake.model_calls == len(nodes) < 3
    assert all(n.reserved_usd > n.cost_usd > 0.0 for n in nodes)
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(len(nodes) * PRICE, rel=1e-9)
    assert ctx.get_snapshot().cost_usd_accumulated <= ceiling


def test_a_cost_hint_refuses_the_request_that_could_cross_the_ceiling() -> None:
    fake = Runaway()
    agent = fake.agent([VeronicaCapability(cost_estimate_hint=PRICE)])
    with ExecutionContext(limits(cost=PRICE * 2.5)) as ctx, pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("weather?")
    assert caught.value.reason == HaltReason.BUDGET_EXCEEDED
    assert fake.model_calls == 2  # 2 * PRICE spent + PRICE reserved > 2.5 * PRICE: never sent
    assert ctx.get_snapshot().cost_usd_accumulated <= PRICE * 2.5


def test_an_unknown_model_keeps_its_hint_and_says_so() -> None:
    fake = Answering(model_name="in-house-model-7")
    agent = Agent(fake.model, capabilities=[VeronicaCapability(cost_estimate_hint=0.01)])
    with ExecutionContext(limits()) as ctx:
        agent.run_sync("question")
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.01)
    assert [event.kind for event in ctx.get_events()] == ["unpriced"]


def test_a_failing_model_request_draws_a_retry_and_raises_its_own_error() -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ConnectionError("provider down")

    agent = Agent(FunctionModel(broken), capabilities=[VeronicaCapability()])
    with ExecutionContext(limits()) as ctx, pytest.raises(ConnectionError):
        agent.run_sync("question")
    snapshot = ctx.get_snapshot()
    assert (snapshot.step_count, snapshot.retries_used, snapshot.aborted) == (1, 1, False)
    assert [node.status for node in ctx.graph.nodes()] == ["error"]


def test_a_stream_left_early_commits_what_it_used() -> None:
    async def words(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for word in ["one ", "two ", "three ", "four "]:
            yield word

    agent = Agent(FunctionModel(stream_function=words, model_name=MODEL), capabilities=[VeronicaCapability()])

    async def main() -> None:
        async with agent.run_stream("count") as stream:
            async for _ in stream.stream_text(delta=True, debounce_by=None):
                break

    with ExecutionContext(limits()) as ctx:
        asyncio.run(main())
    [node] = ctx.graph.nodes()
    assert node.status == "ok"
    assert ctx.get_snapshot().in_flight == 0


# -- retries ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [0, 1, 3])
def test_output_validator_retries_draw_from_max_retries_total(budget: int) -> None:
    fake = Answering("not good enough")
    agent = Agent(fake.model, capabilities=[VeronicaCapability()], retries=MANY)
    checked: list[str] = []

    @agent.output_validator
    def reject(output: str) -> str:
        checked.append(output)
        raise ModelRetry("try again")

    with ExecutionContext(limits(retries=budget)) as ctx, pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("question")
    assert type(caught.value) is ExecutionHalted
    assert caught.value.reason == HaltReason.RETRY_LIMIT
    assert fake.calls == len(checked) == budget + 1  # the first answer and one per retry allowed
    assert ctx.get_snapshot().retries_used == budget


def test_retries_spent_elsewhere_in_the_request_count_too() -> None:
    fake = Answering("meh")
    agent = Agent(fake.model, capabilities=[VeronicaCapability()], retries=MANY)

    @agent.output_validator
    def reject(output: str) -> str:
        raise ModelRetry("again")

    with ExecutionContext(limits(retries=3)) as ctx, pytest.raises(ExecutionHalted):
        ctx.record_retry()  # e.g. a provider call retried earlier in the same request
        ctx.record_retry()
        agent.run_sync("question")
    assert fake.calls == 2


def test_an_accepted_retry_does_not_halt() -> None:
    fake = Answering("draft")
    agent = Agent(fake.model, capabilities=[VeronicaCapability()], retries=MANY)
    seen: list[str] = []

    @agent.output_validator
    def second_time_lucky(output: str) -> str:
        seen.append(output)
        if len(seen) == 1:
            raise ModelRetry("once more")
        return output

    with ExecutionContext(limits(retries=1)) as ctx:
        assert agent.run_sync("question").output == "draft"
    assert (fake.calls, ctx.get_snapshot().retries_used, ctx.aborted) == (2, 1, False)


class Forecast(BaseModel):
    temperature: int


def test_structured_output_failing_validation_draws_retries() -> None:
    fake = Answering('{"temperature": "warm"}')
    agent = Agent(fake.model, output_type=Forecast, capabilities=[VeronicaCapability()], retries=MANY)
    with ExecutionContext(limits(retries=2)) as ctx, pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("forecast")
    assert caught.value.reason == HaltReason.RETRY_LIMIT
    assert fake.calls == 3
    assert ctx.get_snapshot().retries_used == 2


def test_output_function_raising_model_retry_draws_retries() -> None:
    fake = Answering('{"temperature": 12}')
    calls: list[int] = []

    def publish(forecast: Forecast) -> str:
        calls.append(forecast.temperature)
        raise ModelRetry("the publisher is full, ask again")

    agent = Agent(fake.model, output_type=publish, capabilities=[VeronicaCapability()], retries=MANY)
    with ExecutionContext(limits(retries=1)), pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("forecast")
    assert caught.value.reason == HaltReason.RETRY_LIMIT
    assert fake.calls == len(calls) == 2


def test_a_tool_raising_model_retry_is_a_failed_step_that_draws_a_retry() -> None:
    fake = Runaway()
    agent = Agent(fake.model, capabilities=[VeronicaCapability()], retries=MANY)

    @agent.tool_plain
    def weather(city: str) -> str:
        fake.tool_calls += 1
        raise ModelRetry("station offline, try another city")

    with ExecutionContext(limits(retries=2)) as ctx, pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("weather?")
    assert caught.value.reason == HaltReason.RETRY_LIMIT
    # the third failing tool call spent the budget: the model is not asked again
    assert (fake.model_calls, fake.tool_calls) == (3, 3)
    statuses = [(node.kind, node.status) for node in ctx.graph.nodes()]
    assert statuses == [("llm", "ok"), ("tool", "error")] * 3


def test_tool_arguments_failing_validation_draw_retries() -> None:
    requests: list[int] = []

    def bad_arguments(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(len(messages))
        return ModelResponse(parts=[ToolCallPart("weather", {"city": 42, "days": "many"})])

    ran: list[str] = []
    agent = Agent(FunctionModel(bad_arguments), capabilities=[VeronicaCapability()], retries=MANY)

    @agent.tool_plain
    def weather(city: str, days: int) -> str:
        ran.append(city)
        return "sun"

    with ExecutionContext(limits(retries=2)) as ctx, pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("weather?")
    assert caught.value.reason == HaltReason.RETRY_LIMIT
    assert (len(requests), ran) == (3, [])
    assert ctx.get_snapshot().step_count == 3  # the tool never ran: only the model requests


def test_a_failed_final_validation_in_run_stream_is_no_retry() -> None:
    # run_stream() cannot retry its final output: pydantic-ai raises, and no retry was spent.
    fake = Answering("streamed answer")
    agent = Agent(fake.model, capabilities=[VeronicaCapability()], retries=MANY)

    @agent.output_validator
    def reject(output: str) -> str:
        if "answer" in output:
            raise ModelRetry("no")
        return output

    async def main() -> None:
        async with agent.run_stream("question") as stream:
            await stream.get_output()

    with ExecutionContext(limits(retries=0)) as ctx, pytest.raises(UnexpectedModelBehavior):
        asyncio.run(main())
    assert ctx.get_snapshot().retries_used == 0
    assert not ctx.aborted


def test_a_cancelled_request_keeps_its_reservation_as_spent() -> None:
    started = asyncio.Event()

    async def hangs(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        started.set()
        await asyncio.Event().wait()  # never answers
        raise AssertionError("unreachable")

    agent = Agent(FunctionModel(hangs), capabilities=[VeronicaCapability(cost_estimate_hint=0.02)])

    async def main() -> None:
        task = asyncio.create_task(agent.run("question"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with ExecutionContext(limits()) as ctx:
        asyncio.run(main())
    snapshot = ctx.get_snapshot()
    assert (snapshot.step_count, snapshot.in_flight, snapshot.retries_used) == (1, 0, 0)
    assert snapshot.cost_usd_accumulated == pytest.approx(0.02)  # may have been billed: not given back
