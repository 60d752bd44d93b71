"""The MCP client against a real SDK-built server, over stdio and over streamable HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phi_core.cancel import CancelToken
from phi_core.events import AgentEnd, ToolExecutionStart
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import McpReconnect, McpToolAdapter, ToolContext, ToolResult
from phi_core.types import ImageContent, TextContent, ToolResultMessage

from .conftest import McpTestServer, start_http_server, stop, wait_until_gone

pytestmark = pytest.mark.server


def ctx() -> ToolContext:
    return ToolContext(tool_call_id="c", tool_name="t", loop_id="l", cancel=CancelToken())


def text_of(result: ToolResult | ToolResultMessage) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def by_name(tools: list[McpToolAdapter]) -> dict[str, McpToolAdapter]:
    return {t.name: t for t in tools}


async def test_lists_tools_with_their_schemas_and_provider_safe_names(
    mcp_server: McpTestServer,
) -> None:
    async with mcp_server.client() as client:
        tools = by_name(await client.get_tools())
        assert client.server_info.name == "phi-test-server"
    assert {"echo", "add", "fail", "slow", "die", "grow"} <= set(tools)
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.parameters["type"] == "object"
    assert set(add.parameters["properties"]) == {"a", "b"}
    assert add.parameters["required"] == ["a", "b"]
    # "fs.read/file" is not a name providers accept: it is rewritten, the server name kept.
    odd = tools["fs_read_file"]
    assert odd.remote_name == "fs.read/file"


async def test_a_tool_call_inside_agent_loop_reaches_the_server(
    mcp_server: McpTestServer,
) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("add", {"a": 2, "b": 40})]), Reply("The sum is 42.")]
    )
    async with mcp_server.client() as client:
        context = AgentContext(tools=await client.get_tools())
        result = await agent_loop("Add 2 and 40.", context, AgentLoopConfig(provider=provider))
    assert result.reason == "completed" and result.text == "The sum is 42."
    sent_tools = {t.name: t for t in provider.requests[0].tools}
    assert sent_tools["add"].parameters["properties"]["a"]["type"] == "integer"
    tool_result = provider.requests[1].messages[-1]
    assert isinstance(tool_result, ToolResultMessage)
    assert text_of(tool_result) == "42" and not tool_result.is_error


async def test_an_is_error_answer_becomes_an_error_result(mcp_server: McpTestServer) -> None:
    async with mcp_server.client() as client:
        result = await by_name(await client.get_tools())["fail"].execute(
            {"message": "disk full"}, ctx()
        )
    assert result.is_error and "disk full" in text_of(result)


async def test_images_resources_and_structured_output_are_mapped(
    mcp_server: McpTestServer,
) -> None:
    async with mcp_server.client() as client:
        tools = by_name(await client.get_tools())
        picture = await tools["picture"].execute({}, ctx())
        document = await tools["document"].execute({}, ctx())
        added = await tools["add"].execute({"a": 1, "b": 2}, ctx())
    assert isinstance(picture.content[0], ImageContent)
    assert picture.content[0].mime_type == "image/png"
    assert text_of(document) == "[resource file:///notes.txt]\nthe notes"
    assert added.details["structured_content"] == {"result": 3}


async def test_a_call_past_its_timeout_is_an_error_and_is_cancelled_on_the_server(
    mcp_server: McpTestServer,
) -> None:
    async with mcp_server.client(timeout=0.5) as client:
        slow = by_name(await client.get_tools())["slow"]
        result = await slow.execute({"seconds": 30, "tag": "timeout"}, ctx())
        assert result.is_error and "did not answer" in text_of(result)
        assert await mcp_server.wait_for_mark("cancelled-timeout")
        # The session is still usable afterwards.
        echo = await by_name(await client.get_tools())["echo"].execute({"text": "hi"}, ctx())
        assert text_of(echo) == "hi"


async def test_cancelling_the_run_cancels_the_call_on_the_server(
    mcp_server: McpTestServer, strict_loop: list[Any]
) -> None:
    provider = ScriptedProvider([Reply(tool_calls=[call("slow", {"seconds": 60, "tag": "run"})])])
    token = CancelToken()
    ends: list[AgentEnd] = []

    def on_event(event: Any) -> None:
        if isinstance(event, ToolExecutionStart):
            asyncio.get_running_loop().call_later(0.3, token.cancel)
        if isinstance(event, AgentEnd):
            ends.append(event)

    async with mcp_server.client() as client:
        context = AgentContext(tools=await client.get_tools())
        result = await agent_loop(
            "wait", context, AgentLoopConfig(provider=provider), events=on_event, cancel=token
        )
        assert await mcp_server.wait_for_mark("cancelled-run")
    assert result.reason == "cancelled"
    assert len(ends) == 1


async def test_list_changed_notice_refreshes_the_tool_list(mcp_server: McpTestServer) -> None:
    async with mcp_server.client() as client:
        before = by_name(await client.get_tools())
        assert "late_tool" not in before
        assert text_of(await before["grow"].execute({}, ctx())) == "grown"
        for _ in range(250):  # the notice arrives on its own
            if client.tools_changed:
                break
            await asyncio.sleep(0.02)
        assert client.tools_changed
        after = by_name(await client.get_tools())
        assert not client.tools_changed
        assert text_of(await after["late_tool"].execute({}, ctx())) == "late"


async def test_a_stdio_server_that_dies_mid_call_gives_a_clear_error_then_restarts(
    stdio_server: McpTestServer,
) -> None:
    async with stdio_server.client(reconnect=McpReconnect(base_delay=0.05)) as client:
        tools = by_name(await client.get_tools())
        first_pid = (await client.call_tool("pid")).structured_content["result"]
        died = await tools["die"].execute({}, ctx())
        assert died.is_error
        message = text_of(died)
        assert "went away during the call to 'die'" in message
        assert "dying on purpose" in message  # the server's last stderr line
        again = await tools["echo"].execute({"text": "back"}, ctx())
        assert not again.is_error and text_of(again) == "back"
        second_pid = (await client.call_tool("pid")).structured_content["result"]
    assert second_pid != first_pid
    assert await wait_until_gone(first_pid) and await wait_until_gone(second_pid)


async def test_an_http_server_that_dies_mid_call_gives_error_results_not_exceptions(
    tmp_path: Any,
) -> None:
    process, url = start_http_server(tmp_path)
    try:
        from phi_core.tools import McpClient, McpHttpServer

        client = McpClient(
            McpHttpServer(url), reconnect=McpReconnect(max_attempts=2, base_delay=0.01)
        )
        async with client:
            tools = by_name(await client.get_tools())
            died = await tools["die"].execute({}, ctx())
            assert died.is_error and "went away during the call to 'die'" in text_of(died)
            process.wait(timeout=10)
            after = await tools["echo"].execute({"text": "anyone?"}, ctx())
        assert after.is_error
        assert "Could not connect to MCP server" in text_of(after)
        assert "gave up after 2 attempts" in text_of(after)
    finally:
        stop(process)


async def test_closing_or_cancelling_the_owner_leaves_no_server_process(
    stdio_server: McpTestServer,
) -> None:
    async with stdio_server.client() as client:
        pid = (await client.call_tool("pid")).structured_content["result"]
    assert await wait_until_gone(pid)

    started = asyncio.Event()
    pids: list[int] = []

    async def owner() -> None:
        async with stdio_server.client() as client:
            pids.append((await client.call_tool("pid")).structured_content["result"])
            started.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(owner())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_until_gone(pids[0])


async def test_a_stdio_server_gets_no_api_keys_from_our_environment(
    stdio_server: McpTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-should-not-leak-123456")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-should-not-leak-123456")
    async with stdio_server.client() as client:
        names = (await client.call_tool("env_names")).structured_content["result"]
    assert "OPENAI_API_KEY" not in names and "ANTHROPIC_API_KEY" not in names
    assert "MCP_TEST_MARKS" in names  # what the caller passed does arrive
    assert "PATH" in names


async def test_a_server_that_cannot_start_is_a_clear_connection_error(tmp_path: Any) -> None:
    from phi_core.errors import McpConnectionError
    from phi_core.tools import McpClient

    with pytest.raises(McpConnectionError, match="No such file or directory"):
        await McpClient.stdio("no-such-mcp-server-command", ["--flag"]).connect()
    crashing = tmp_path / "crash.py"
    crashing.write_text("import sys\nprint('config file missing', file=sys.stderr)\nsys.exit(1)\n")
    import sys

    with pytest.raises(McpConnectionError, match="config file missing"):
        await McpClient.stdio(sys.executable, [str(crashing)]).connect()
