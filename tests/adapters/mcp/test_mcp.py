"""MCP tool calls through real clients (``mcp.Client``, ``ClientSession``, ``ClientSessionGroup``
machinery underneath, ``fastmcp.Client``) against a real in-process ``MCPServer``: one tool step per
call, refused before the request reaches the server, arguments passed through unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fastmcp
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0)


@pytest.fixture
def server() -> tuple[MCPServer, list[Any]]:
    app = MCPServer("veronica-test")
    received: list[Any] = []

    @app.tool()
    def echo(text: str, times: int = 1, tags: list[str] | None = None) -> str:
        received.append((text, times, tags))
        return text * times

    return app, received


@pytest.fixture(autouse=True)
def instrumented() -> Iterator[None]:
    assert veronica_mw.instrument("mcp") == ("mcp",)
    yield
    veronica_mw.uninstrument()


@pytest.mark.anyio
async def test_mcp_client_calls_are_tool_steps(server: tuple[MCPServer, list[Any]]) -> None:
    app, received = server
    async with Client(app) as client:
        async with ExecutionContext(LIMITS) as ctx:
            result = await client.call_tool("echo", {"text": "hi", "times": 2, "tags": ["a", "b"]})
            assert result.content[0].text == "hihi"  # type: ignore[union-attr]
            await client.session.call_tool("echo", {"text": "direct"})
            with pytest.raises(ExecutionHalted):
                await client.call_tool("echo", {"text": "refused"})
    assert received == [("hi", 2, ["a", "b"]), ("direct", 1, None)]  # the third never reached the server
    assert [(n.kind, n.name, n.status) for n in ctx.graph.nodes()] == [("tool", "mcp:echo", "ok")] * 2


@pytest.mark.anyio
async def test_fastmcp_client_calls_are_tool_steps(server: tuple[MCPServer, list[Any]]) -> None:
    app, received = server
    async with fastmcp.Client(app) as client:
        async with ExecutionContext(LIMITS) as ctx:
            await client.call_tool("echo", {"text": "one"})
            await client.call_tool("echo", {"text": "two"})
            with pytest.raises(ExecutionHalted):
                await client.call_tool("echo", {"text": "three"})
    assert [r[0] for r in received] == ["one", "two"] and ctx.get_snapshot().step_count == 2


@pytest.mark.anyio
async def test_a_tool_step_begun_above_is_adopted(server: tuple[MCPServer, list[Any]]) -> None:
    app, received = server
    async with Client(app) as client:
        async with ExecutionContext(LIMITS) as ctx:
            await ctx.acall_tool(client.call_tool, "echo", {"text": "wrapped"})
    assert ctx.get_snapshot().step_count == 1 and len(received) == 1


@pytest.mark.anyio
async def test_outside_a_context_and_after_uninstrument(server: tuple[MCPServer, list[Any]]) -> None:
    app, received = server
    async with Client(app) as client:
        await client.call_tool("echo", {"text": "free"})
        veronica_mw.uninstrument()
        async with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=0, max_retries_total=0)):
            await client.call_tool("echo", {"text": "not contained"})
    assert len(received) == 2


@pytest.mark.anyio
async def test_a_tool_error_result_draws_a_retry(server: tuple[MCPServer, list[Any]]) -> None:
    app, _ = server
    async with Client(app) as client:
        async with ExecutionContext(
            ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=1)
        ) as ctx:
            result = await client.session.call_tool("no_such_tool", {})
            assert result.is_error  # returned unchanged
            await client.session.call_tool("no_such_tool", {})  # the retry budget is spent now
            with pytest.raises(ExecutionHalted, match="retry_limit"):
                await client.call_tool("echo", {"text": "after"})
    assert [n.status for n in ctx.graph.nodes()] == ["error", "error"]
