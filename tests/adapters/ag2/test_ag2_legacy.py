"""VeronicaCapability against the real AG2 0.14 (``import autogen``), run in the ``ag2-legacy`` env.

Models are AG2 custom model clients registered with ``register_model_client``; they count their own
``create`` calls, and tool bodies count their own runs, so every assertion is about what really ran.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from autogen import ConversableAgent, GroupChat, GroupChatManager, register_function
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
from veronica_mw.adapters.ag2 import VeronicaCapability
from veronica_mw.kernel.pricing import price_usage
from veronica_mw.web.asgi import VeronicaASGIMiddleware

MODEL = "gpt-4o-mini"
USAGE = TokenUsage(100, 20)
Script = Callable[[int], Any]  # call number (1-based) -> reply text, message dict or exception
_ids = itertools.count()


class ScriptedClient:
    """An AG2 ``ModelClient``: replies from ``script``, reports ``USAGE`` and counts calls in ``calls``."""

    def __init__(
        self, config: dict[str, Any], *, calls: list[Any], script: Script, cost: float = 0.0
    ) -> None:
        self.model = config["model"]
        self.calls = calls
        self.script = script
        self._cost = cost

    def create(self, params: dict[str, Any]) -> Any:
        # The context visible *inside* the model call: None on the a_initiate_chat path.
        self.calls.append(get_current_execution_context())
        reply = self.script(len(self.calls))
        if isinstance(reply, BaseException):
            raise reply
        message = reply if isinstance(reply, dict) else {"role": "assistant", "content": reply}
        return SimpleNamespace(id=f"fake-{next(_ids)}", model=self.model, message=message)

    def message_retrieval(self, response: Any) -> list[Any]:
        message = response.message
        has_call = message.get("tool_calls") or message.get("function_call")
        return [dict(message) if has_call else message["content"]]

    def cost(self, response: Any) -> float:
        return self._cost

    @staticmethod
    def get_usage(response: Any) -> dict[str, Any]:
        tokens = USAGE.input_tokens + USAGE.output_tokens
        return {
            "prompt_tokens": USAGE.input_tokens,
            "completion_tokens": USAGE.output_tokens,
            "total_tokens": tokens,
            "cost": response.cost,
            "model": response.model,
        }


def llm_agent(
    name: str, calls: list[Any], script: Script, *, cost: float = 0.0, auto_replies: int = 100
) -> ConversableAgent:
    agent = ConversableAgent(
        name,
        system_message=f"You are the {name}.",
        llm_config={"config_list": [{"model": MODEL, "model_client_cls": "ScriptedClient"}]},
        max_consecutive_auto_reply=auto_replies,
        human_input_mode="NEVER",
        code_execution_config=False,
    )
    # AG2 annotates the class parameter as a ModelClient instance, hence the ignore.
    agent.register_model_client(ScriptedClient, calls=calls, script=script, cost=cost)  # type: ignore[arg-type]
    return agent


def planner_critic(
    calls: list[Any], *, cost: float = 0.0, auto_replies: int = 100
) -> tuple[ConversableAgent, ConversableAgent]:
    """The paper's loop: a planner and a critic that would answer each other for 100 rounds."""

    def planner(n: int) -> str:
        return f"plan v{n}"

    def critic(n: int) -> str:
        return f"critique {n}: not good enough, revise"

    return (
        llm_agent("planner", calls, planner, cost=cost, auto_replies=auto_replies),
        llm_agent("critic", calls, critic, cost=cost, auto_replies=auto_replies),
    )


def tool_call(n: int) -> dict[str, Any]:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def function_call(n: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "lookup", "arguments": '{"q": "x"}'},
    }


def tool_pair(calls: list[Any], body: Callable[..., Any], script: Script = tool_call) -> tuple[Any, Any]:
    """(user proxy that executes ``lookup``, assistant whose model asks for it every time)."""
    assistant = ConversableAgent(
        "assistant",
        llm_config={"config_list": [{"model": MODEL, "model_client_cls": "ScriptedClient"}]},
        max_consecutive_auto_reply=100,
        human_input_mode="NEVER",
        code_execution_config=False,
    )
    user = ConversableAgent(
        "user",
        llm_config=False,
        max_consecutive_auto_reply=100,
        human_input_mode="NEVER",
        code_execution_config=False,
    )
    register_function(body, caller=assistant, executor=user, name="lookup", description="Look something up.")
    # register_function rebuilds the assistant's client, so the custom client comes after it.
    assistant.register_model_client(ScriptedClient, calls=calls, script=script)  # type: ignore[arg-type]
    return user, assistant


def limits(max_steps: int, *, max_cost_usd: float = 10.0, max_retries_total: int = 5) -> ExecutionConfig:
    return ExecutionConfig(
        max_cost_usd=max_cost_usd, max_steps=max_steps, max_retries_total=max_retries_total
    )


def with_capability(capability: VeronicaCapability, *agents: Any) -> None:
    for agent in agents:
        capability.add_to_agent(agent)


# -- the multi-agent loop ------------------------------------------------------------------------


def test_planner_critic_loop_stops_after_exactly_eight_model_calls() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls)
    with_capability(VeronicaCapability(), planner, critic)
    with ExecutionContext(limits(8)) as ctx, pytest.raises(ExecutionHalted) as halted:
        planner.initiate_chat(critic, message="Draft a launch plan.", silent=True)
    assert len(calls) == 8
    assert halted.value.reason == "step_limit"
    snapshot = ctx.get_snapshot()
    assert snapshot.step_count == 8 and snapshot.in_flight == 0
    # Custom clients report cost 0, so the client's token usage is priced with genai-prices.
    assert snapshot.cost_usd_accumulated == pytest.approx(8 * price_usage(USAGE, MODEL))
    assert halted.value.partial_result == "plan v8"


@pytest.mark.anyio
async def test_planner_critic_loop_via_a_initiate_chat_binds_the_callers_context() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls)
    with_capability(VeronicaCapability(), planner, critic)
    async with ExecutionContext(limits(8)) as ctx:
        with pytest.raises(ExecutionHalted) as halted:
            await planner.a_initiate_chat(critic, message="Draft a launch plan.", silent=True)
    assert len(calls) == 8
    assert halted.value.reason == "step_limit"
    assert ctx.get_snapshot().step_count == 8
    # AG2 ran every model call in an executor thread where the ContextVar is empty: the steps
    # were counted only because the context was captured when each reply started.
    assert calls == [None] * 8


@pytest.mark.anyio
async def test_concurrent_async_chats_sharing_one_capability_keep_their_own_contexts() -> None:
    capability = VeronicaCapability()
    calls_a: list[Any] = []
    calls_b: list[Any] = []
    pair_a, pair_b = planner_critic(calls_a), planner_critic(calls_b)
    with_capability(capability, *pair_a, *pair_b)

    async def run(pair: tuple[Any, Any], max_steps: int) -> ExecutionContext:
        async with ExecutionContext(limits(max_steps)) as ctx:
            with pytest.raises(ExecutionHalted):
                await pair[0].a_initiate_chat(pair[1], message="Plan.", silent=True)
        return ctx

    ctx_a, ctx_b = await asyncio.gather(run(pair_a, 8), run(pair_b, 5))
    assert (len(calls_a), len(calls_b)) == (8, 5)
    assert (ctx_a.get_snapshot().step_count, ctx_b.get_snapshot().step_count) == (8, 5)


@pytest.mark.parametrize("use_async", [False, True], ids=["initiate_chat", "a_initiate_chat"])
def test_terminate_ends_the_chat_at_once_with_the_partial_transcript(use_async: bool) -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls)
    capability = VeronicaCapability(config=limits(8), on_halt="terminate")
    with_capability(capability, planner, critic)
    if use_async:
        result = asyncio.run(planner.a_initiate_chat(critic, message="Draft a launch plan.", silent=True))
    else:
        result = planner.initiate_chat(critic, message="Draft a launch plan.", silent=True)
    assert len(calls) == 8
    contents = [message["content"] for message in result.chat_history]
    assert len(contents) == 9  # the opening message and the 8 model replies, nothing canned after them
    assert contents[-1] == "plan v8"
    assert not any("blocked" in str(content) for content in contents)
    owned = capability.owned_context
    assert owned is not None and owned.abort_reason == "step_limit"


def test_a_reflection_summary_is_a_model_call_and_a_step_too() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls, auto_replies=2)
    with_capability(VeronicaCapability(), planner, critic)
    with ExecutionContext(limits(10)) as ctx:
        result = planner.initiate_chat(
            critic, message="Plan.", silent=True, summary_method="reflection_with_llm"
        )
    assert len(calls) == 5  # 2 replies each, then the summary
    assert ctx.get_snapshot().step_count == 5
    assert result.summary.startswith("critique 5")  # the recipient's model wrote it


def test_after_a_terminate_the_reflection_summary_is_refused_too() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls)
    with_capability(VeronicaCapability(config=limits(8), on_halt="terminate"), planner, critic)
    with pytest.warns(
        UserWarning, match="Cannot extract summary using reflection_with_llm: execution halted"
    ):
        result = planner.initiate_chat(
            critic, message="Plan.", silent=True, summary_method="reflection_with_llm"
        )
    assert len(calls) == 8
    assert result.summary == ""


@pytest.mark.parametrize("on_halt", ["raise", "terminate"])
@pytest.mark.parametrize("use_async", [False, True], ids=["initiate_chat", "a_initiate_chat"])
def test_group_chat_of_three_agents_stops_at_the_limit(use_async: bool, on_halt: str) -> None:
    calls: list[Any] = []
    agents: list[Any] = [
        llm_agent(name, calls, lambda n: f"message {n}") for name in ("planner", "critic", "writer")
    ]
    chat = GroupChat(agents=agents, messages=[], max_round=50, speaker_selection_method="round_robin")
    manager = GroupChatManager(chat, llm_config=False)
    capability = VeronicaCapability(config=limits(8), on_halt=on_halt)  # type: ignore[arg-type]
    with_capability(capability, *agents)
    start = agents[0].a_initiate_chat(manager, message="Go.", silent=True) if use_async else None
    try:
        asyncio.run(start) if start else agents[0].initiate_chat(manager, message="Go.", silent=True)
    except ExecutionHalted as halted:
        assert on_halt == "raise" and halted.reason == "step_limit"
    else:
        assert on_halt == "terminate"
    assert len(calls) == 8


# -- cost ----------------------------------------------------------------------------------------


def test_cost_reported_by_the_model_client_is_committed_and_bounds_the_chat() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls, cost=0.4)
    capability = VeronicaCapability(config=limits(100, max_cost_usd=1.0))
    with_capability(capability, planner, critic)
    with pytest.raises(ExecutionHalted) as halted:
        planner.initiate_chat(critic, message="Plan.", silent=True)
    # 0.4 + 0.4 + 0.4 = 1.2 > 1.0: the third call's actual cost trips the ceiling, the fourth never runs.
    assert len(calls) == 3
    assert halted.value.reason == "budget_exceeded"
    owned = capability.owned_context
    assert owned is not None and owned.get_snapshot().cost_usd_accumulated == pytest.approx(1.2)


def test_a_failing_model_call_is_recorded_and_draws_one_retry() -> None:
    calls: list[Any] = []
    agent = llm_agent("planner", calls, lambda n: ConnectionError("provider down"))
    other = llm_agent("critic", calls, lambda n: "ok")
    with_capability(VeronicaCapability(), agent, other)
    with ExecutionContext(limits(10)) as ctx, pytest.raises(ConnectionError):
        other.initiate_chat(agent, message="Plan.", silent=True)
    snapshot = ctx.get_snapshot()
    assert len(calls) == 1
    assert (snapshot.step_count, snapshot.retries_used, snapshot.in_flight) == (1, 1, 0)


# -- tools ---------------------------------------------------------------------------------------


def _lookup(runs: list[str]) -> Callable[[str], str]:
    def lookup(q: str) -> str:
        runs.append(q)
        return f"found {q}"

    return lookup


def _alookup(runs: list[str]) -> Callable[..., Any]:
    async def lookup(q: str) -> str:
        runs.append(q)
        return f"found {q}"

    return lookup


@pytest.mark.parametrize("on_halt", ["raise", "terminate"])
@pytest.mark.parametrize("use_async", [False, True], ids=["initiate_chat", "a_initiate_chat"])
@pytest.mark.parametrize("make_body", [_lookup, _alookup], ids=["sync_tool", "async_tool"])
@pytest.mark.parametrize("script", [tool_call, function_call], ids=["tool_calls", "function_call"])
def test_tool_executions_are_steps_and_a_refused_one_never_runs(
    script: Script, make_body: Callable[[list[str]], Any], use_async: bool, on_halt: str
) -> None:
    calls: list[Any] = []
    runs: list[str] = []
    user, assistant = tool_pair(calls, make_body(runs), script)
    capability = VeronicaCapability(config=limits(5), on_halt=on_halt)  # type: ignore[arg-type]
    with_capability(capability, user, assistant)
    chat = user.a_initiate_chat(assistant, message="Find x.", silent=True) if use_async else None
    if on_halt == "raise":
        with pytest.raises(ExecutionHalted) as halted:
            asyncio.run(chat) if chat else user.initiate_chat(assistant, message="Find x.", silent=True)
        assert halted.value.reason == "step_limit"
    else:
        result = asyncio.run(chat) if chat else user.initiate_chat(assistant, message="Find x.", silent=True)
        # opening message, then call / result / call / result / call: the third call is never answered
        assert len(result.chat_history) == 6
    # model, tool, model, tool, model = 5 steps; the third tool call is refused before it runs.
    assert (len(calls), len(runs)) == (3, 2)
    owned = capability.owned_context
    assert owned is not None and owned.get_snapshot().step_count == 5


def test_failing_tools_draw_from_the_retry_budget() -> None:
    calls: list[Any] = []
    runs: list[str] = []

    def lookup(q: str) -> str:
        runs.append(q)
        raise ValueError("index offline")

    user, assistant = tool_pair(calls, lookup)
    capability = VeronicaCapability(config=limits(100, max_retries_total=1))
    with_capability(capability, user, assistant)
    with pytest.raises(ExecutionHalted) as halted:
        user.initiate_chat(assistant, message="Find x.", silent=True)
    # AG2 hands "Error: index offline" back to the model; the second failure spends the last retry.
    assert halted.value.reason == "retry_limit"
    assert (len(calls), len(runs)) == (2, 2)


def test_a_halt_inside_a_tool_stops_the_chat_instead_of_becoming_a_tool_error() -> None:
    calls: list[Any] = []
    runs: list[str] = []

    def lookup(q: str) -> str:
        runs.append(q)
        ctx = get_current_execution_context()
        assert ctx is not None
        for _ in range(3):  # nested contained calls; the limit is reached inside the tool
            ctx.call_tool(lambda: None)
        return "unreachable"

    user, assistant = tool_pair(calls, lookup)
    with_capability(VeronicaCapability(), user, assistant)
    with ExecutionContext(limits(4)) as ctx, pytest.raises(ExecutionHalted) as halted:
        user.initiate_chat(assistant, message="Find x.", silent=True)
    assert halted.value.reason == "step_limit"
    assert (len(calls), len(runs)) == (1, 1)  # AG2 never showed the model the "Error: execution halted"
    assert ctx.get_snapshot().step_count == 4


# -- binding -------------------------------------------------------------------------------------


def test_explicit_context_wins_over_the_current_one() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls)
    explicit = ExecutionContext(limits(3))
    with_capability(VeronicaCapability(explicit), planner, critic)
    with ExecutionContext(limits(50)) as current, pytest.raises(ExecutionHalted):
        planner.initiate_chat(critic, message="Plan.", silent=True)
    assert len(calls) == 3
    assert (explicit.get_snapshot().step_count, current.get_snapshot().step_count) == (3, 0)


def test_owned_context_is_shared_by_agents_and_reset_starts_a_new_one() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls)
    capability = VeronicaCapability(config=limits(4))
    with_capability(capability, planner, critic)
    with pytest.raises(ExecutionHalted):
        planner.initiate_chat(critic, message="Plan.", silent=True)
    first = capability.owned_context
    with pytest.raises(ExecutionHalted) as halted:  # a halt is terminal for that context
        planner.initiate_chat(critic, message="Again.", silent=True)
    assert halted.value.reason == "step_limit" and len(calls) == 4
    capability.reset()
    with pytest.raises(ExecutionHalted):
        planner.initiate_chat(critic, message="Fresh run.", silent=True)
    assert len(calls) == 8
    assert capability.owned_context is not first


def test_without_any_context_the_agents_run_uncontained() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls, auto_replies=3)
    with_capability(VeronicaCapability(), planner, critic)
    planner.initiate_chat(critic, message="Plan.", silent=True)
    assert len(calls) == 6  # 3 replies each: AG2's own max_consecutive_auto_reply ended it


def test_a_cancelled_context_refuses_before_any_model_call() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls)
    with_capability(VeronicaCapability(), planner, critic)
    with ExecutionContext(limits(8)) as ctx, pytest.raises(ExecutionHalted) as halted:
        ctx.cancel("client went away")
        planner.initiate_chat(critic, message="Plan.", silent=True)
    assert halted.value.reason == "cancelled"
    assert calls == []


def test_remove_from_agent_undoes_everything() -> None:
    calls: list[Any] = []
    planner, critic = planner_critic(calls, auto_replies=3)
    capability = VeronicaCapability()
    with_capability(capability, planner, critic)
    for agent in (planner, critic):
        capability.remove_from_agent(agent)
        shadowed = ("execute_function", "a_execute_function", "_generate_oai_reply_from_client")
        assert not [name for name in shadowed if name in vars(agent)]
        assert (
            agent.hook_lists["safeguard_llm_inputs"] == [] and agent.hook_lists["safeguard_llm_outputs"] == []
        )
    with ExecutionContext(limits(2)) as ctx:
        planner.initiate_chat(critic, message="Plan.", silent=True)
    assert len(calls) == 6 and ctx.get_snapshot().step_count == 0
    capability.add_to_agent(planner)  # and it can be added again


def test_a_long_lived_capability_does_not_keep_per_request_agents_alive() -> None:
    capability = VeronicaCapability()  # e.g. module-level, while agents are built per request
    calls: list[Any] = []
    planner, critic = planner_critic(calls)
    with_capability(capability, planner, critic)
    with ExecutionContext(limits(4)), pytest.raises(ExecutionHalted):
        planner.initiate_chat(critic, message="Plan.", silent=True)
    refs = [weakref.ref(planner), weakref.ref(critic)]
    del planner, critic
    gc.collect()
    assert [ref() for ref in refs] == [None, None]


def test_misuse_is_rejected() -> None:
    calls: list[Any] = []
    planner, _ = planner_critic(calls)
    capability = VeronicaCapability()
    capability.add_to_agent(planner)
    with pytest.raises(ValueError, match="already has"):
        VeronicaCapability().add_to_agent(planner)
    with pytest.raises(TypeError):
        capability.add_to_agent(object())
    with pytest.raises(ValueError, match="on_halt"):
        VeronicaCapability(on_halt="ignore")  # type: ignore[arg-type]


def test_the_1x_middleware_is_not_offered_with_ag2_014() -> None:
    assert ag2_adapter.GENERATION == "0.14"
    with pytest.raises(MissingFrameworkError, match=r"ag2>=1\.0") as missing:
        ag2_adapter.VeronicaMiddleware  # noqa: B018
    assert 'pip install "veronica-mw[ag2]"' in str(missing.value)
    assert isinstance(missing.value, ImportError)


# -- inside a FastAPI request under the ASGI middleware -------------------------------------------


def test_chats_inside_fastapi_requests_halt_with_429(serve: Callable[[Any], str]) -> None:
    capability = VeronicaCapability()  # no context of its own: each request's context applies
    per_request: list[list[Any]] = []
    app = FastAPI()

    def start_pair() -> tuple[ConversableAgent, ConversableAgent]:
        calls: list[Any] = []
        per_request.append(calls)
        pair = planner_critic(calls)
        with_capability(capability, *pair)
        return pair

    @app.post("/plan")
    async def plan_async() -> dict[str, Any]:
        planner, critic = start_pair()
        result = await planner.a_initiate_chat(critic, message="Draft a launch plan.", silent=True)
        return {"summary": result.summary}  # unreachable: the critic never accepts a plan

    @app.post("/plan-sync")
    def plan_sync() -> dict[str, Any]:  # FastAPI runs sync endpoints in a worker thread
        planner, critic = start_pair()
        result = planner.initiate_chat(critic, message="Draft a launch plan.", silent=True)
        return {"summary": result.summary}

    app.add_middleware(VeronicaASGIMiddleware, config=limits(8))
    with httpx.Client(base_url=serve(app), timeout=20.0) as client:
        responses = [client.post("/plan"), client.post("/plan"), client.post("/plan-sync")]
    for response in responses:
        assert response.status_code == 429
        body = response.json()
        assert (body["reason"], body["steps_used"]) == ("step_limit", 8)
    assert [len(calls) for calls in per_request] == [8, 8, 8]  # a fresh budget per request


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
