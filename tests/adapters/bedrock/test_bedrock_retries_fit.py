"""botocore's own retries draw from ``max_retries_total`` (a refused retry is not sent), and
FitOutputToBudget lowers a Bedrock request's output limit -- the fake runtime sees the value."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.config import Config  # type: ignore[import-untyped]

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, FitOutputToBudget, PolicyPipeline
from veronica_mw.adapters._provider_estimate import text_tokens, worst_case

from ...support.fake_bedrock import FakeBedrock

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
MESSAGES: list[Any] = [{"role": "user", "content": [{"text": "Write a long story."}]}]
ARGS: dict[str, Any] = {"modelId": MODEL, "messages": MESSAGES, "inferenceConfig": {"maxTokens": 8000}}


def _retrying(url: str) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"mode": "standard", "max_attempts": 3}),
    )


def _config(**limits: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 1.0, "max_steps": 5, "max_retries_total": 0, **limits})


@pytest.mark.parametrize("operation", ["converse", "converse_stream"])
def test_botocore_retries_draw_from_max_retries_total(
    server: FakeBedrock, instrumented: None, operation: str
) -> None:
    client = _retrying(server.url)
    call = getattr(client, operation)
    server.fail_next(1, 500)
    with ExecutionContext(_config(max_retries_total=1)) as ctx:
        response = call(**ARGS)
        if operation == "converse_stream":
            list(response["stream"])
        assert server.count() == 2  # the failed attempt and its retry
        assert ctx.get_snapshot().retries_used == 1
        server.fail_next(1, 429)
        with pytest.raises(ExecutionHalted) as halted:  # no retry left: it is not sent
            call(**ARGS)
    assert server.count() == 3
    assert halted.value.reason == "retry_limit"
    ok, refused = ctx.graph.nodes()
    assert ok.cost_usd > 0 and refused.cost_usd == 0  # attempts that all failed cost nothing


def test_without_a_context_botocore_retries_as_usual(server: FakeBedrock, instrumented: None) -> None:
    server.fail_next(2, 500)
    _retrying(server.url).converse(**ARGS)
    assert server.count() == 3


def _ceiling(output: int) -> float:
    full = worst_case(MODEL, "aws", text_tokens(MESSAGES), output)
    assert full is not None
    return full / 4


@pytest.mark.parametrize("operation", ["converse", "converse_stream"])
def test_fit_lowers_max_tokens_of_converse(client: Any, server: FakeBedrock, operation: str) -> None:
    ceiling = _ceiling(8000)
    config = ExecutionConfig(max_cost_usd=ceiling, max_steps=5, max_retries_total=0)
    with ExecutionContext(config, PolicyPipeline([FitOutputToBudget()])) as ctx:
        response = getattr(client, operation)(**ARGS)
        if operation == "converse_stream":
            list(response["stream"])
    sent = server.bodies[0]["inferenceConfig"]["maxTokens"]
    assert 256 <= sent < 2000 and ARGS["inferenceConfig"]["maxTokens"] == 8000  # the caller's dict untouched
    reserved = worst_case(MODEL, "aws", text_tokens(MESSAGES), sent)
    over = worst_case(MODEL, "aws", text_tokens(MESSAGES), sent + 2)
    assert reserved is not None and over is not None and reserved <= ceiling < over
    assert [e.data["fitted"] for e in ctx.get_events() if e.kind == "modified"] == [sent]
    (node,) = ctx.graph.nodes()
    assert node.reserved_usd == pytest.approx(reserved)


def test_fit_lowers_max_tokens_of_an_anthropic_invoke_body(client: Any, server: FakeBedrock) -> None:
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8000, "messages": MESSAGES}
    ceiling = _ceiling(8000)
    config = ExecutionConfig(max_cost_usd=ceiling, max_steps=5, max_retries_total=0)
    with ExecutionContext(config, PolicyPipeline([FitOutputToBudget()])) as ctx:
        client.invoke_model(modelId=MODEL, body=json.dumps(body))
    sent = server.bodies[0]["max_tokens"]
    assert 256 <= sent < 2000 and server.bodies[0]["messages"] == MESSAGES
    assert [e.data["field"] for e in ctx.get_events() if e.kind == "modified"] == ["max_tokens"]


def test_without_the_policy_the_request_is_unchanged_and_refused(
    client: Any, server: FakeBedrock, make_client: Callable[[str], Any]
) -> None:
    config = ExecutionConfig(max_cost_usd=_ceiling(8000), max_steps=5, max_retries_total=0)
    with ExecutionContext(config), pytest.raises(ExecutionHalted, match="budget"):
        client.converse(**ARGS)
    assert server.count() == 0
    with ExecutionContext(_config()):
        client.converse(**ARGS)
    assert server.bodies[0]["inferenceConfig"]["maxTokens"] == 8000


def test_a_request_botocore_rejects_before_sending_is_no_step(client: Any, server: FakeBedrock) -> None:
    from botocore.exceptions import ParamValidationError  # type: ignore[import-untyped]

    with ExecutionContext(_config(max_steps=1)) as ctx:
        with pytest.raises(ParamValidationError):
            client.converse(modelId=MODEL, messages=[{"content": [{"text": "no role"}]}])
        client.converse(**{**ARGS, "inferenceConfig": {"maxTokens": 16}})  # the one step allowed
    assert server.count() == 1 and len(ctx.graph.nodes()) == 1
    assert ctx.get_snapshot().cost_usd_reserved == 0
