"""Output checks through the LlamaIndex handler: a rejected answer raises out of the LLM call."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    JsonOutput,
    ModelOutput,
    OutputRejected,
    RetryContainer,
)
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler

from .fakes import MODEL, USAGE


class ScriptedLLM(CustomLLM):
    """A custom LLM answering from a script, with OpenAI-style usage; ``calls`` counts real runs."""

    answers: list[str] = []
    calls: int = 0

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=MODEL)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.calls += 1
        return CompletionResponse(text=self.answers.pop(0), raw={"model": MODEL, "usage": dict(USAGE)})

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError


def config(retries: int) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=100.0, max_steps=100, max_retries_total=retries)


def retry() -> RetryContainer:
    return RetryContainer(max_retries=10, backoff_base=0.0, jitter=0.0)


@pytest.mark.parametrize("form", ["complete", "chat", "acomplete"])
def test_invalid_answers_are_reasked_within_the_retry_budget(form: str) -> None:
    llm = ScriptedLLM(answers=["no json", "{nope", '{"ok": true}'])
    ctx = ExecutionContext(config(retries=2), checks=[JsonOutput()])

    def ask() -> str:
        if form == "complete":
            return str(llm.complete("json please").text)
        if form == "chat":  # CustomLLM.chat calls complete: nested LLM events, still one step each
            return str(llm.chat([ChatMessage(role="user", content="json please")]).message.content)
        return str(asyncio.run(llm.acomplete("json please")).text)

    with VeronicaLlamaIndexHandler(ctx):
        assert retry().execute(ask) == '{"ok": true}'
    assert llm.calls == 3
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.retries_used) == (3, 2)
    assert [n.status for n in ctx.graph.nodes()] == ["rejected", "rejected", "ok"]


def test_the_retry_budget_bounds_the_reasks() -> None:
    llm = ScriptedLLM(answers=["no", "no", '{"ok": true}'])
    ctx = ExecutionContext(config(retries=1), checks=[JsonOutput()])
    with VeronicaLlamaIndexHandler(ctx), pytest.raises(ExecutionHalted) as info:
        retry().execute(llm.complete, "json please")
    assert info.value.reason == "retry_limit" and llm.calls == 2


def test_halt_mode_and_the_text_checks_see() -> None:
    seen: list[str] = []
    llm = ScriptedLLM(answers=["prose"])
    ctx = ExecutionContext(config(retries=5), checks=[lambda o: seen.append(o.text), (JsonOutput(), "halt")])
    with VeronicaLlamaIndexHandler(ctx), pytest.raises(ExecutionHalted) as info:
        llm.complete("json please")
    assert info.value.reason == "verification_failed" and seen == ["prose"]
    with VeronicaLlamaIndexHandler(ExecutionContext(config(1), checks=[JsonOutput()])):
        with pytest.raises(OutputRejected):
            ScriptedLLM(answers=["x"]).complete("again")


def test_text_of_llamaindex_responses() -> None:
    chat = ChatResponse(message=ChatMessage(role="assistant", content="chat answer"))
    assert ModelOutput(chat).text == "chat answer"
    assert ModelOutput(CompletionResponse(text="completion answer")).text == "completion answer"
