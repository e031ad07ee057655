"""Output checks through the kernel: re-ask within the retry budget, halt, warn, and what is recorded."""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from genai_prices import Usage, calc_price

from veronica_mw import (
    CheckResult,
    Decision,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    JsonOutput,
    MaxLength,
    ModelOutput,
    Observer,
    OutputRejected,
    RetryContainer,
    WrapOptions,
)
from veronica_mw.kernel.graph import CallNode

MODEL = "gpt-4o"
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500}
PRICE = float(calc_price(Usage(input_tokens=1000, output_tokens=500), model_ref=MODEL).total_price)


def limits(retries: int = 2, **kwargs: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 10.0, "max_steps": 50, "max_retries_total": retries, **kwargs})


class FakeModel:
    """Answers from a script, in OpenAI chat-completion dict form with usage; counts calls."""

    def __init__(self, *answers: str) -> None:
        self._answers: Iterator[str] = iter(answers)
        self.calls = 0

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        text = next(self._answers)
        return {
            "model": MODEL,
            "choices": [{"message": {"role": "assistant", "content": text}}],
            "usage": USAGE,
        }


def retry() -> RetryContainer:
    return RetryContainer(max_retries=10, backoff_base=0.0, jitter=0.0)


def test_two_invalid_answers_then_a_valid_one_succeed_within_two_retries() -> None:
    model = FakeModel("not json", "{'single': 'quotes'}", '{"answer": 42}')
    ctx = ExecutionContext(limits(retries=2), checks=[JsonOutput()])
    result = retry().execute(ctx.call_llm, model)
    assert result["choices"][0]["message"]["content"] == '{"answer": 42}'
    assert model.calls == 3
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.retries_used, snap.aborted) == (3, 2, False)
    # Every call ran and is paid for, rejected or not.
    assert snap.cost_usd_accumulated == pytest.approx(3 * PRICE)
    assert [n.status for n in ctx.graph.nodes()] == ["rejected", "rejected", "ok"]
    assert [e.kind for e in ctx.get_events()] == ["check_failed", "check_failed"]
    assert ctx.get_partial_result() is result  # a rejected output never becomes the partial result


def test_with_one_retry_the_run_halts_with_retry_limit() -> None:
    model = FakeModel("not json", "still not", '{"answer": 42}')
    ctx = ExecutionContext(limits(retries=1), checks=[JsonOutput()])
    with pytest.raises(ExecutionHalted) as info:
        retry().execute(ctx.call_llm, model)
    assert info.value.reason == "retry_limit"
    assert isinstance(info.value.__cause__, OutputRejected)
    assert model.calls == 2
    assert ctx.get_partial_result() is None


def test_output_rejected_carries_the_check_and_is_no_runtime_error() -> None:
    ctx = ExecutionContext(limits(), checks=[MaxLength(3)])
    with pytest.raises(OutputRejected) as info:
        ctx.call_llm(lambda: "too long")
    exc = info.value
    assert not isinstance(exc, RuntimeError) and isinstance(exc, Exception)
    assert (exc.check, exc.message) == ("max_length", "8 characters, more than 3")
    assert "max_length" in exc.feedback and "8 characters" in exc.feedback
    assert isinstance(exc.output, ModelOutput) and exc.output.text == "too long"
    again = pickle.loads(pickle.dumps(exc))
    assert (again.check, again.message, again.feedback) == (exc.check, exc.message, exc.feedback)
    assert ctx.get_snapshot().retries_used == 1


def test_halt_mode_halts_with_verification_failed() -> None:
    model = FakeModel("not json")
    ctx = ExecutionContext(limits(), checks=[(JsonOutput(), "halt")])
    with pytest.raises(ExecutionHalted) as info:
        retry().execute(ctx.call_llm, model)  # never retried: a halt is final
    assert info.value.reason == "verification_failed"
    assert "json_output" in info.value.detail
    assert model.calls == 1
    snap = ctx.get_snapshot()
    assert snap.http_status == 502 and snap.retries_used == 0
    assert snap.cost_usd_accumulated == pytest.approx(PRICE)
    (event,) = snap.events
    assert event.kind == "check_failed" and event.data["on_fail"] == "halt"
    with pytest.raises(ExecutionHalted):
        ctx.call_tool(lambda: None)


def test_warn_mode_only_records_an_event() -> None:
    ctx = ExecutionContext(limits(), checks=[(JsonOutput(), "warn"), (MaxLength(100), "halt")])
    assert ctx.call_llm(lambda: "plain text") == "plain text"
    (event,) = ctx.get_events()
    assert (event.kind, event.data["check"], event.data["on_fail"]) == ("check_failed", "json_output", "warn")
    (node,) = ctx.graph.nodes()
    assert node.status == "ok"
    assert [(r.name, r.passed) for r in node.checks] == [("json_output", False), ("max_length", True)]


def test_every_result_is_recorded_on_the_node_and_observers_see_it() -> None:
    seen: list[tuple[str, tuple[CheckResult, ...], str]] = []

    class Watcher(Observer):
        def call_ended(self, ctx: ExecutionContext, node: CallNode, error: BaseException | None) -> None:
            seen.append((node.status, node.checks, type(error).__name__ if error else ""))

    def scored(output: ModelOutput) -> CheckResult:
        return CheckResult(len(output.text) > 2, "", "too short", score=len(output.text) / 10)

    ctx = ExecutionContext(limits(), checks=[scored], observers=[Watcher()])
    with pytest.raises(OutputRejected):
        ctx.call_llm(lambda: "no")
    ctx.call_llm(lambda: "yes!")
    assert seen == [
        ("rejected", (CheckResult(False, "scored", "too short", 0.2),), "OutputRejected"),
        ("ok", (CheckResult(True, "scored", "too short", 0.4),), ""),
    ]


def test_check_return_values_and_failures_fail_closed() -> None:
    def boom(output: ModelOutput) -> None:
        raise KeyError("bug in check")

    cases: list[tuple[Callable[[ModelOutput], Any], str]] = [
        (lambda o: False, "check failed"),
        (lambda o: "yes", "check returned str, not CheckResult/bool/None"),
        (boom, "check raised KeyError: 'bug in check'"),
    ]
    for check, message in cases:
        ctx = ExecutionContext(limits(), checks=[check])
        with pytest.raises(OutputRejected) as info:
            ctx.call_llm(lambda: "x")
        assert info.value.message == message
    for passing in (lambda o: None, lambda o: True, lambda o: CheckResult(True, "ok")):
        assert ExecutionContext(limits(), checks=[passing]).call_llm(lambda: "x") == "x"


def test_tool_calls_are_not_checked() -> None:
    ctx = ExecutionContext(limits(), checks=[(JsonOutput(), "halt")])
    assert ctx.call_tool(lambda: "not json") == "not json"


def test_wrap_forms_return_halt_and_keep_no_rejected_partial() -> None:
    ctx = ExecutionContext(limits(), checks=[(JsonOutput(), "halt")])
    assert ctx.wrap_llm_call(lambda: "[1]") is Decision.ALLOW
    assert ctx.wrap_llm_call(lambda: "nope") is Decision.HALT
    assert ctx.get_partial_result() == "[1]"
    retrying = ExecutionContext(limits(), checks=[JsonOutput()])
    with pytest.raises(OutputRejected):
        retrying.wrap_llm_call(lambda: "nope")


def test_two_phase_commit_raises_and_later_settles_are_no_ops() -> None:
    ctx = ExecutionContext(limits(), checks=[JsonOutput()])
    node = ctx.begin_call("llm", WrapOptions(operation_name="chat", model=MODEL))
    with pytest.raises(OutputRejected):
        node.commit({"choices": [{"message": {"content": "no"}}], "usage": USAGE})
    assert node.status == "rejected" and node.cost_usd == pytest.approx(PRICE)
    assert node.commit("{}") is Decision.ALLOW  # a second hook reporting the same call
    node.fail(ValueError("late"))
    assert ctx.get_snapshot().retries_used == 1 and ctx.get_snapshot().step_count == 1
    bare = ctx.begin_call("llm")
    assert bare.commit(usage=USAGE) is Decision.ALLOW  # nothing to check without a result


def test_async_checks_run_in_async_calls() -> None:
    seen: list[str] = []

    async def slow_check(output: ModelOutput) -> CheckResult:
        await asyncio.sleep(0)
        seen.append(output.text)
        return CheckResult(output.text.startswith("{"), "starts_with_brace", "must start with {")

    async def model(text: str) -> str:
        return text

    async def run() -> None:
        ctx = ExecutionContext(limits(retries=5), checks=[slow_check])
        with pytest.raises(OutputRejected):
            await ctx.acall_llm(model, "no")
        assert await ctx.acall_llm(model, "{}") == "{}"
        # awrap and acommit await them too
        assert await ctx.awrap_llm_call(lambda: model("{1}")) is Decision.ALLOW
        node = ctx.begin_call("llm")
        with pytest.raises(OutputRejected):
            await node.acommit("nope")
        # A sync call on the loop's thread cannot run an async check: it fails, with a message.
        with pytest.raises(OutputRejected) as info:
            ctx.call_llm(lambda: "{}")
        assert "async check in a sync call" in info.value.message

    asyncio.run(run())
    assert seen == ["no", "{}", "{1}", "nope"]
    # A sync call on a thread without a loop runs the async check to completion.
    ctx = ExecutionContext(limits(), checks=[slow_check])
    assert ctx.call_llm(lambda: "{sync}") == "{sync}"
    assert seen[-1] == "{sync}"


def test_model_output_fields() -> None:
    outputs: list[ModelOutput] = []
    ctx = ExecutionContext(limits(), checks=[outputs.append])
    result = FakeModel("hello")()
    ctx.call_llm(lambda: result, options=WrapOptions(operation_name="summarise"))
    (output,) = outputs
    assert (output.text, output.raw, output.model) == ("hello", result, MODEL)
    assert (output.call_name, output.chain_id) == ("summarise", ctx.chain_id)


def test_the_retry_budget_is_exact_under_threads() -> None:
    ctx = ExecutionContext(limits(retries=7, max_steps=1000), checks=[JsonOutput()])
    rejected: list[int] = []
    halted: list[int] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(5):
            try:
                ctx.call_llm(lambda: "never json")
            except OutputRejected:
                rejected.append(1)
            except ExecutionHalted:
                halted.append(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(rejected) == 7  # exactly the budget, then every call halts
    assert len(rejected) + len(halted) == 40
    assert ctx.abort_reason == "retry_limit" and ctx.get_snapshot().retries_used == 7


def test_bad_check_configuration_is_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="on_fail"):
        ExecutionContext(limits(), checks=[(JsonOutput(), "explode")])
    with pytest.raises(TypeError, match="callable"):
        ExecutionContext(limits(), checks=["json"])
    with pytest.raises(TypeError, match="list of checks"):
        ExecutionContext(limits(), checks="json")
    with pytest.raises(ValueError, match=r"check or \(check, on_fail\)"):
        ExecutionContext(limits(), checks=[(JsonOutput(), "halt", "extra")])
