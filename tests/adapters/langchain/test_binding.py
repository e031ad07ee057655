"""VeronicaCallbackHandler: failures and retries, tool runs, binding, dedupe and opt-outs."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from langchain_core.tools import tool

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters import langchain as vlc
from veronica_mw.adapters.langchain import VeronicaCallbackHandler

from .fakes import PRICE, CountingChatModel, priced_message


def model(**kwargs: Any) -> CountingChatModel:
    return CountingChatModel(responses=[priced_message()], **kwargs)


def limits(**kwargs: Any) -> ExecutionConfig:
    base: dict[str, Any] = {"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 0}
    return ExecutionConfig(**{**base, **kwargs})


# -- failures and retries -----------------------------------------------------------------------------


def test_with_retry_attempts_draw_from_the_chain_retry_budget() -> None:
    m = model(fail=True)
    retrying = m.with_retry(stop_after_attempt=10, wait_exponential_jitter=False)
    ctx = ExecutionContext(limits(max_retries_total=2))
    with ctx, pytest.raises(ExecutionHalted) as info:
        retrying.invoke("hi")
    assert info.value.reason == "retry_limit"
    assert m.calls == 3  # first attempt + 2 retries; later attempts were refused before the call
    assert ctx.get_snapshot().retries_used == 2


def test_model_error_propagates_unchanged_and_is_recorded() -> None:
    m = model(fail=True)
    ctx = ExecutionContext(limits(max_retries_total=5))
    with ctx, pytest.raises(ConnectionError):
        m.invoke("hi")
    snap = ctx.get_snapshot()
    assert (snap.retries_used, snap.step_count, snap.aborted) == (1, 1, False)


# -- tools ----------------------------------------------------------------------------------------------

tool_runs: list[str] = []


@tool
def lookup(city: str) -> str:
    """Look up the weather."""
    tool_runs.append(city)
    if city == "nowhere":
        raise ConnectionError("no such city")
    return f"sunny in {city}"


def test_tool_runs_are_steps() -> None:
    tool_runs.clear()
    ctx = ExecutionContext(limits(max_steps=2, max_retries_total=1))
    with ctx:
        assert lookup.invoke({"city": "Oslo"}) == "sunny in Oslo"
        with pytest.raises(ConnectionError):
            lookup.invoke({"city": "nowhere"})
        with pytest.raises(ExecutionHalted) as info:
            lookup.invoke({"city": "Rome"})
    assert info.value.reason == "step_limit"
    assert tool_runs == ["Oslo", "nowhere"]
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.retries_used) == (2, 1)
    assert [n.kind for n in ctx.graph.nodes()] == ["tool", "tool"]


# -- binding, dedupe, opt-out -----------------------------------------------------------------------------


def test_explicit_handler_and_hook_count_a_call_once() -> None:
    m = model()
    ctx = ExecutionContext(limits())
    with ctx:
        m.invoke("hi", config={"callbacks": [VeronicaCallbackHandler(), VeronicaCallbackHandler(ctx)]})
        lookup.invoke({"city": "Oslo"}, config={"callbacks": [VeronicaCallbackHandler()]})
    snap = ctx.get_snapshot()
    assert (m.calls, snap.step_count) == (1, 2)
    assert snap.cost_usd_accumulated == pytest.approx(PRICE)


def test_explicit_context_wins_over_the_current_one() -> None:
    m = model()
    mine = ExecutionContext(limits())
    request = ExecutionContext(limits())
    with request:
        m.invoke("hi", config={"callbacks": [VeronicaCallbackHandler(mine)]})
    # Both contexts bound the call: the handler's own and (zero-config) the request's.
    assert mine.get_snapshot().step_count == 1
    assert request.get_snapshot().step_count == 1


def test_owned_context_from_config() -> None:
    m = model()
    handler = VeronicaCallbackHandler(config=limits(max_steps=2))
    assert handler.owned_context is None
    with pytest.raises(ExecutionHalted):
        for _ in range(5):
            m.invoke("hi", config={"callbacks": [handler]})
    assert m.calls == 2
    assert handler.owned_context is not None
    assert handler.owned_context.get_snapshot().step_count == 2


def test_uncontained_without_context_or_config() -> None:
    m = model()
    for _ in range(5):
        m.invoke("hi", config={"callbacks": [VeronicaCallbackHandler()]})
    assert m.calls == 5


def test_disable_auto_instrumentation() -> None:
    m = model()
    ctx = ExecutionContext(limits(max_steps=1))
    vlc.disable_auto_instrumentation()
    try:
        assert not vlc.auto_instrumentation_enabled()
        with ctx:
            for _ in range(3):
                m.invoke("hi")
    finally:
        vlc.enable_auto_instrumentation()
    assert m.calls == 3
    assert ctx.get_snapshot().step_count == 0
    with ctx, pytest.raises(ExecutionHalted):
        for _ in range(3):
            m.invoke("hi")
    assert m.calls == 4


def test_env_var_starts_with_auto_instrumentation_off() -> None:
    code = (
        "import veronica_mw.adapters.langchain as v, sys; "
        "sys.exit(0 if v.auto_instrumentation_enabled() is False else 3)"
    )
    env = {**os.environ, "VERONICA_MW_LANGCHAIN_AUTO": "0"}
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0


def test_halt_is_not_logged_as_a_callback_error(caplog: pytest.LogCaptureFixture) -> None:
    ctx = ExecutionContext(limits(max_steps=0))
    with ctx, pytest.raises(ExecutionHalted):
        model().invoke("hi")
    assert "ExecutionHalted" not in caplog.text
