"""Stop a runaway Pydantic AI agent, offline (FunctionModel): ``python examples/pydantic_ai_agent.py``.

1. The model asks for the same tool on every turn, so the agent would loop until pydantic-ai's own
   request limit. With ``VeronicaCapability`` every model request and every tool execution is one
   step, checked before it runs: at ``max_steps=6`` the run ends with ``ExecutionHalted`` raised
   out of ``run_sync`` (``run``, ``run_stream`` and ``iter`` behave the same).
2. A model that reports gpt-4o usage is priced with genai-prices; an output validator that keeps
   rejecting the answer draws from ``max_retries_total`` and the run stops when it is spent.
3. ``veronica_mw.instrument("pydantic-ai")`` contains an agent built without the capability,
   inside whatever execution context is current (here an entered one; in a web app, the
   request's context from the middleware).
"""

from __future__ import annotations

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.pydantic_ai import VeronicaCapability


def always_the_weather_tool(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The fake model's reply: call the weather tool again, whatever it was told."""
    call = ToolCallPart("weather", {"city": "Oslo"}, tool_call_id=f"call-{len(messages)}")
    return ModelResponse(parts=[call])


def weather(city: str) -> str:
    """Current weather in a city."""
    print(f"  tool ran: weather({city!r})")
    return f"rain in {city}"


def gpt_4o_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """An answer with the usage a gpt-4o call would report (2,000 tokens in, 400 out)."""
    return ModelResponse(
        parts=[TextPart("a long answer")], usage=RequestUsage(input_tokens=2_000, output_tokens=400)
    )


def runaway_agent() -> None:
    limits = ExecutionConfig(max_cost_usd=1.0, max_steps=6, max_retries_total=2)
    capability = VeronicaCapability(config=limits)
    agent = Agent(FunctionModel(always_the_weather_tool), tools=[weather], capabilities=[capability])
    try:
        agent.run_sync("What is the weather in Oslo?")
    except ExecutionHalted as halt:
        print(f"agent halted: {halt.reason} ({halt.detail})")
    ctx = capability.owned_context
    assert ctx is not None
    print("  steps:", " ".join(node.kind for node in ctx.graph.nodes()))


def priced_and_retried() -> None:
    limits = ExecutionConfig(max_cost_usd=1.0, max_steps=20, max_retries_total=2)
    capability = VeronicaCapability(config=limits)
    agent = Agent(FunctionModel(gpt_4o_answer, model_name="gpt-4o"), capabilities=[capability], retries=10)

    @agent.output_validator
    def never_satisfied(output: str) -> str:
        raise ModelRetry("make it shorter")

    try:
        agent.run_sync("Summarise the report.")
    except ExecutionHalted as halt:
        print(f"agent halted: {halt.reason} ({halt.detail})")
    ctx = capability.owned_context
    assert ctx is not None
    spent = ctx.get_snapshot()
    cost, retries = spent.cost_usd_accumulated, spent.retries_used
    print(f"  {spent.step_count} model requests, ${cost:.4f}, {retries} retries")


def instrumented_agent() -> None:
    veronica_mw.instrument("pydantic-ai")
    try:
        agent = Agent(FunctionModel(always_the_weather_tool), tools=[weather])  # no capability
        with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=2)) as ctx:
            try:
                agent.run_sync("What is the weather in Bergen?")
            except ExecutionHalted as halt:
                print(f"agent halted: {halt.reason} after {ctx.get_snapshot().step_count} steps")
    finally:
        veronica_mw.uninstrument()


if __name__ == "__main__":
    print("1) an agent looping on a tool, max_steps=6")
    runaway_agent()
    print("2) a gpt-4o answer its validator keeps rejecting, max_retries_total=2")
    priced_and_retried()
    print("3) veronica_mw.instrument('pydantic-ai'), max_steps=3")
    instrumented_agent()
