from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest

import veronica_mw

from ...support.fake_bedrock import FakeBedrock


@pytest.fixture
def server() -> Iterator[FakeBedrock]:
    with FakeBedrock() as fake:
        yield fake


@pytest.fixture
def instrumented() -> Iterator[None]:
    assert veronica_mw.instrument("bedrock") == ("bedrock",)
    yield
    veronica_mw.uninstrument()


@pytest.fixture
def make_client() -> Callable[[str], Any]:
    def make(url: str) -> Any:
        return boto3.client(
            "bedrock-runtime",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )

    return make


@pytest.fixture
def client(server: FakeBedrock, instrumented: None, make_client: Callable[[str], Any]) -> Any:
    return make_client(server.url)
