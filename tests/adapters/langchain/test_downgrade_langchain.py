"""DowngradeAt through the LangChain v1 agent middleware: the chat model is swapped for the fallback."""

from __future__ import annotations

from typing import Any

import pytest
from genai_prices import Usage, calc_price
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from veronica_mw import DowngradeAt, ExecutionConfig, ExecutionContext, ExecutionHalted, PolicyPipeline
from veronica_mw.adapters.langchain import VeronicaAgentMiddleware

USAGE: Any = {"input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500}


def price(model: str) -> float:
    return float(calc_price(Usage(input_tokens=1000, output_tokens=500), model_ref=model).total_price)


class NamedModel(FakeMessagesListChatModel):
    """A chat model with a ``model_name`` field, like ChatOpenAI; answers as the model it was called as."""

    model_name: str = "gpt-4o"
    called_as: list[str] = []

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.called_as.append(self.model_name)
        meta = {"model_name": self.model_name}
        message = AIMessage(content="done", usage_metadata=USAGE, response_metadata=meta)
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_calls_after_the_threshold_go_to_the_fallback_model() -> None:
    model = NamedModel(responses=[AIMessage("unused")], called_as=[])
    config = ExecutionConfig(max_cost_usd=4 * price("gpt-4o"), max_steps=1000, max_retries_total=0)
    ctx = ExecutionContext(config, PolicyPipeline([DowngradeAt(0.5, "gpt-4o-mini")]))
    middleware = VeronicaAgentMiddleware(ctx, cost_estimate_hint=price("gpt-4o"))
    agent = create_agent(model, tools=[], middleware=[middleware])
    with pytest.raises(ExecutionHalted) as info:
        for _ in range(200):
            agent.invoke({"messages": [HumanMessage("hi")]})
    assert info.value.reason == "budget_exceeded"
    assert model.called_as[:2] == ["gpt-4o", "gpt-4o"]
    assert set(model.called_as[2:]) == {"gpt-4o-mini"} and len(model.called_as) > 10
    snap = ctx.get_snapshot()
    assert snap.cost_usd_accumulated <= config.max_cost_usd + 1e-9
    assert snap.cost_usd_accumulated == pytest.approx(
        2 * price("gpt-4o") + (len(model.called_as) - 2) * price("gpt-4o-mini")
    )
    kinds = [e.kind for e in snap.events]
    assert kinds.count("downgraded") == len(model.called_as) - 2 and "downgrade_unsupported" not in kinds
    assert [n.model for n in ctx.graph.nodes()] == model.called_as
    assert model.model_name == "gpt-4o"  # the user's model object itself is untouched


def test_a_model_without_a_name_field_runs_unchanged_and_says_so() -> None:
    model = FakeMessagesListChatModel(responses=[AIMessage("a"), AIMessage("b")])
    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=100, max_retries_total=0),
        PolicyPipeline([DowngradeAt(0.0, "gpt-4o-mini")]),
    )
    agent = create_agent(model, tools=[], middleware=[VeronicaAgentMiddleware(ctx)])
    agent.invoke({"messages": [HumanMessage("hi")]})
    agent.invoke({"messages": [HumanMessage("hi")]})
    assert [e.kind for e in ctx.get_events()] == ["downgrade_unsupported"]
