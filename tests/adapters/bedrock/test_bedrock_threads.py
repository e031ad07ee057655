"""Eight threads sharing one boto3 ``bedrock-runtime`` client at ``max_steps=3``: exactly three
requests reach the runtime (the admitted ones all send, whether streamed or not); the five others
are refused before sending, and no reservation is left behind."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from ...support.fake_bedrock import REPLY, FakeBedrock
from ...support.fake_provider import cost_of

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
ARGS: dict[str, Any] = {
    "modelId": MODEL,
    "messages": [{"role": "user", "content": [{"text": "Say hello."}]}],
    "inferenceConfig": {"maxTokens": 64},
}


@pytest.mark.parametrize("operation", ["converse", "converse_stream"])
def test_eight_threads_at_max_steps_three_send_exactly_three(
    client: Any, server: FakeBedrock, operation: str
) -> None:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=0))
    start = threading.Barrier(8, timeout=60)
    lock = threading.Lock()
    halts: list[str] = []
    texts: list[str] = []

    def work() -> None:
        start.wait()
        try:
            response = getattr(client, operation)(**ARGS)
        except ExecutionHalted as refused:
            with lock:
                halts.append(refused.reason)
            return
        if operation == "converse":
            text = response["output"]["message"]["content"][0]["text"]
        else:
            deltas = (e.get("contentBlockDelta", {}).get("delta", {}) for e in response["stream"])
            text = "".join(d.get("text", "") for d in deltas)
        with lock:
            texts.append(text)

    with ctx:
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(work,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert server.count() == 3 and texts == [REPLY] * 3
    assert halts == ["step_limit"] * 5
    snap = ctx.get_snapshot()
    assert snap.step_count == 3 and snap.cost_usd_reserved == pytest.approx(0, abs=1e-15)
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, "aws"))
