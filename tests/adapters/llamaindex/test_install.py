"""Installing and uninstalling: what is hooked, that it is all undone, several handlers at once."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, BaseWorkflowAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler

from .fakes import UsageLLM

MESSAGES = [ChatMessage(role="user", content="hello")]
def _call_tools() -> tuple[object, object]:
    return BaseWorkflowAgent.__dict__["_call_tool"], AgentWorkflow.__dict__["_call_tool"]


ORIGINAL_CALL_TOOL = _call_tools()


def _config(**limits: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 5, **limits})


def _hooked() -> tuple[bool, bool]:
    watching = any(type(h).__name__ == "_Watcher" for h in get_dispatcher().span_handlers)
    return watching, _call_tools() != ORIGINAL_CALL_TOOL


def test_context_manager_hooks_and_fully_unhooks() -> None:
    llm = UsageLLM()  # built before the handler exists: still gated once installed
    ctx = ExecutionContext(_config(max_steps=1))
    assert _hooked() == (False, False)
    with VeronicaLlamaIndexHandler(ctx) as handler:
        assert handler.installed and _hooked() == (True, True)
        llm.chat(MESSAGES)
        assert any(type(h).__name__ == "_LLMGate" for h in llm.callback_manager.handlers)
        with pytest.raises(ExecutionHalted):
            llm.chat(MESSAGES)
    assert not handler.installed and _hooked() == (False, False)
    assert not any(type(h).__name__ == "_LLMGate" for h in llm.callback_manager.handlers)
    llm.chat(MESSAGES)  # uninstalled: the halted context no longer applies
    assert llm.calls == 2


def test_install_uninstall_are_counted() -> None:
    handler = VeronicaLlamaIndexHandler(config=_config())
    assert handler.install() is handler
    handler.install()
    handler.uninstall()
    assert handler.installed and _hooked() == (True, True)
    handler.uninstall()
    handler.uninstall()  # one too many: harmless
    assert not handler.installed and _hooked() == (False, False)


def test_llm_with_its_own_callback_manager_is_gated() -> None:
    llm = UsageLLM(callback_manager=CallbackManager([]))
    ctx = ExecutionContext(_config(max_steps=0))
    with VeronicaLlamaIndexHandler(ctx), pytest.raises(ExecutionHalted):
        llm.complete("hello")
    assert llm.calls == 0


def test_handlers_bound_to_one_context_count_a_call_once() -> None:
    llm = UsageLLM()
    ctx = ExecutionContext(_config())
    with VeronicaLlamaIndexHandler(), VeronicaLlamaIndexHandler(ctx), ctx:
        llm.chat(MESSAGES)
        llm.complete("hello")
    assert ctx.get_snapshot().step_count == 2
    assert llm.calls == 2


def test_one_context_refusing_gives_back_the_step_taken_in_the_other() -> None:
    llm = UsageLLM()
    roomy, full = ExecutionContext(_config()), ExecutionContext(_config(max_steps=0))
    with VeronicaLlamaIndexHandler(roomy), VeronicaLlamaIndexHandler(full), pytest.raises(ExecutionHalted):
        llm.chat(MESSAGES)
    assert llm.calls == 0
    assert (roomy.get_snapshot().step_count, roomy.aborted) == (0, False)
    assert full.abort_reason == "step_limit"


def test_arguments_are_validated() -> None:
    with pytest.raises(ValueError):
        VeronicaLlamaIndexHandler(cost_estimate_hint=-1.0)
    with pytest.raises(TypeError):
        VeronicaLlamaIndexHandler(context=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        VeronicaLlamaIndexHandler(config={"max_steps": 1})  # type: ignore[arg-type]
