"""A secret of every kind given to a real ``litellm.completion`` call (keyword arguments, headers,
nested dicts, key-shaped values in the prompt) never reaches a byte of the audit log directory."""

from __future__ import annotations

from pathlib import Path

import litellm
import pytest

from veronica_mw import AuditLog, ExecutionConfig, ExecutionContext

from ...observe._secrets import BY_NAME, HEADERS, assert_absent, nested, shaped_text
from ...observe.conftest import read_records
from ...support.fake_provider import FakeProvider

pytestmark = [
    pytest.mark.filterwarnings("ignore:Item.*using the `ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]


def test_litellm_completion_secrets_never_reach_the_log(
    tmp_path: Path, server: FakeProvider, instrumented: None
) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", record_bodies=True)
    secrets = {k: v for k, v in BY_NAME.items() if k != "api_key"}
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0), audit=log):
        reply = litellm.completion(
            model="openai/gpt-4o-mini",
            messages=[{"role": "user", "content": shaped_text()}],
            api_base=server.openai_url,
            api_key=BY_NAME["api_key"],
            extra_headers=dict(HEADERS),
            metadata=nested(),
            **secrets,
        )
    assert reply.choices[0].message.content
    assert server.count() == 1
    assert log.close()
    calls = [r for r in read_records(tmp_path) if r["type"] == "call"]
    assert len(calls) == 1 and calls[0]["request"]["messages"]  # the body was recorded...
    assert_absent(tmp_path)  # ...without one secret
