"""``veronica_mw.instrument("pydantic-ai")``: agents built without the capability are contained too."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.usage import UsageLimits

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason
from veronica_mw import instrumentation as registry
from veronica_mw.adapters import pydantic_ai as adapter
from veronica_mw.adapters.pydantic_ai import VeronicaCapability

from .fakes import Runaway, drive

LIMITS = ExecutionConfig(max_cost_usd=100.0, max_steps=5, max_retries_total=3)


def test_registered_and_in_the_default_set() -> None:
    assert registry.INSTRUMENTORS["pydantic-ai"].module == "pydantic_ai"
    assert "pydantic-ai" in veronica_mw.instrument()  # installed here, so part of the default set
    assert "pydantic-ai" in registry.instrumented()


def test_an_agent_built_before_instrument_is_contained_in_the_current_context() -> None:
    fake = Runaway()
    agent = fake.agent()  # no capability
    veronica_mw.instrument("pydantic-ai")
    with ExecutionContext(LIMITS) as ctx, pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("weather?")
    assert type(caught.value) is ExecutionHalted and caught.value.reason == HaltReason.STEP_LIMIT
    assert ctx.get_snapshot().step_count == fake.executions == 5


@pytest.mark.parametrize("form", ["run", "run_stream", "iter"])
def test_every_async_form_is_contained(form: str) -> None:
    fake = Runaway()
    veronica_mw.instrument("pydantic-ai")
    agent = fake.agent()

    async def main() -> int:
        async with ExecutionContext(LIMITS) as ctx:
            with pytest.raises(ExecutionHalted):
                await drive(agent, form)
            return ctx.get_snapshot().step_count

    assert asyncio.run(main()) == fake.executions == 5


def test_outside_any_context_nothing_is_counted_or_refused() -> None:
    fake = Runaway()
    veronica_mw.instrument("pydantic-ai")
    with pytest.raises(UsageLimitExceeded):
        fake.agent().run_sync("weather?", usage_limits=UsageLimits(request_limit=7))
    assert fake.model_calls == 7


def test_an_agent_with_its_own_capability_is_not_counted_twice() -> None:
    fake = Runaway()
    own = ExecutionContext(LIMITS)
    agent = fake.agent([VeronicaCapability(own)])
    veronica_mw.instrument("pydantic-ai")
    with ExecutionContext(ExecutionConfig(max_cost_usd=100.0, max_steps=50, max_retries_total=3)) as current:
        with pytest.raises(ExecutionHalted):
            agent.run_sync("weather?")
    assert own.get_snapshot().step_count == fake.executions == 5
    assert current.get_snapshot().step_count == 0


def test_uninstrument_restores_agent_iter() -> None:
    original = Agent.__dict__["iter"]
    veronica_mw.instrument("pydantic-ai")
    adapter.instrument()  # idempotent
    assert Agent.__dict__["iter"] is not original
    veronica_mw.uninstrument()
    assert Agent.__dict__["iter"] is original
    adapter.uninstrument()  # idempotent

    fake = Runaway()
    with ExecutionContext(LIMITS) as ctx:
        with pytest.raises(UsageLimitExceeded):
            fake.agent().run_sync("weather?", usage_limits=UsageLimits(request_limit=3))
    assert ctx.get_snapshot().step_count == 0
