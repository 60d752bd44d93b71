"""MCP servers on a BasicAgent: lazy start, lifetime, name clashes, races, config files, CLI."""

from __future__ import annotations

import gc
import json
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core import BasicAgent
from phi_core.cli import app
from phi_core.config import agent_from_config, parse_config
from phi_core.errors import ConfigError, UserError
from phi_core.loop import AgentLoopConfig
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.types import TextContent, ToolResultMessage

from .conftest import SERVER, McpTestServer, process_gone, wait_until_gone

pytestmark = pytest.mark.server


def pid_script(answer: str = "done") -> ScriptedProvider:
    return ScriptedProvider([Reply(tool_calls=[call("pid")]), Reply(answer)])


def tool_texts(messages: list[Any]) -> list[str]:
    return [
        "".join(c.text for c in m.content if isinstance(c, TextContent))
        for m in messages
        if isinstance(m, ToolResultMessage)
    ]


async def test_agent_starts_its_server_on_the_first_run_and_stops_it_on_close(
    stdio_server: McpTestServer,
) -> None:
    spec = stdio_server.spec
    async with BasicAgent(provider=pid_script()).with_mcp_server_stdio(
        spec.command, spec.args, dict(spec.env or {})
    ) as agent:
        assert not agent.toolsets[0].connected  # nothing started yet
        result = await agent.prompt("Which process are you?")
        pid = int(tool_texts(agent.messages)[0])
        assert result.reason == "completed" and not process_gone(pid)
    assert await wait_until_gone(pid)


async def test_a_garbage_collected_agent_stops_its_server(stdio_server: McpTestServer) -> None:
    spec = stdio_server.spec
    agent = BasicAgent(provider=pid_script()).with_mcp_server_stdio(
        spec.command, spec.args, dict(spec.env or {})
    )
    await agent.prompt("Which process are you?")
    pid = int(tool_texts(agent.messages)[0])
    collected = weakref.ref(agent)
    del agent
    gc.collect()
    assert collected() is None
    assert await wait_until_gone(pid)


async def test_two_servers_with_one_tool_name_are_refused_until_one_has_a_prefix(
    stdio_server: McpTestServer,
) -> None:
    spec = stdio_server.spec
    env = dict(spec.env or {})
    clashing = (
        BasicAgent(provider=ScriptedProvider([Reply("hi")]))
        .with_mcp_server_stdio(spec.command, spec.args, env, name="first")
        .with_mcp_server_stdio(spec.command, spec.args, env, name="second")
    )
    async with clashing:
        with pytest.raises(UserError, match=r"from 'second' is already taken by 'first'.*prefix="):
            await clashing.get_tools()

    fixed = (
        BasicAgent(
            provider=ScriptedProvider(
                [Reply(tool_calls=[call("b__add", {"a": 1, "b": 1})]), Reply("2")]
            )
        )
        .with_mcp_server_stdio(spec.command, spec.args, env, name="first")
        .with_mcp_server_stdio(spec.command, spec.args, env, name="second", prefix="b")
    )
    async with fixed:
        names = [t.name for t in await fixed.get_tools()]
        assert "add" in names and "b__add" in names
        await fixed.prompt("one plus one")
        assert tool_texts(fixed.messages) == ["2"]


async def test_race_branches_each_get_their_own_server_session(
    stdio_server: McpTestServer,
) -> None:
    spec = stdio_server.spec
    agent = BasicAgent(provider=ScriptedProvider([Reply("unused")])).with_mcp_server_stdio(
        spec.command, spec.args, dict(spec.env or {})
    )
    async with agent:
        configs = [AgentLoopConfig(provider=pid_script(f"branch {i}")) for i in range(2)]
        configs.append(AgentLoopConfig(provider=ScriptedProvider([Reply("no tools needed")])))
        race = await agent.prompt_parallel("Which process are you?", configs, "pick-first")
        assert all(o.ok for o in race.outcomes)
        pids = [int(tool_texts(o.new_messages)[0]) for o in race.outcomes[:2]]
        assert len(set(pids)) == 2  # one server process per branch that called it
        assert all([await wait_until_gone(pid) for pid in pids])  # closed when the race ended
    # The agent's own listing session and the two calling branches; the third branch never
    # called a tool, so no server was started for it.
    assert len(list(stdio_server.marks.glob("started-*"))) == 3


async def test_http_server_on_the_agent_sends_the_headers_but_never_shows_them(
    http_server: McpTestServer,
) -> None:
    secret = "sk-header-secret-0123456789"
    provider = ScriptedProvider([Reply(tool_calls=[call("echo", {"text": "hi"})]), Reply("ok")])
    agent = BasicAgent(provider=provider).with_mcp_server_http(
        http_server.spec.url,  # type: ignore[union-attr]
        headers={"Authorization": f"Bearer {secret}"},
    )
    async with agent:
        await agent.prompt("say hi")
        assert tool_texts(agent.messages) == ["hi"]
        assert secret not in repr(agent.toolsets[0])
    dead = BasicAgent(provider=provider).with_mcp_server_http(
        "http://127.0.0.1:9/mcp", headers={"Authorization": f"Bearer {secret}"}
    )
    with pytest.raises(Exception) as failure:
        await dead.get_tools()
    assert type(failure.value).__name__ == "McpConnectionError"
    assert secret not in str(failure.value)


def test_config_file_tools_instances_add_mcp_servers(tmp_path: Path) -> None:
    config = parse_config(
        f"""
[[tools.instances]]
name = "tests"
type = "mcp"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SERVER))}]
env = {{ MCP_TEST_MARKS = {json.dumps(str(tmp_path))} }}
prefix = "t"
timeout = 5

[[tools.instances]]
name = "remote"
url = "http://127.0.0.1:8931/mcp"
headers = {{ Authorization = "Bearer abc123456789" }}
""",
        "toml",
    )
    agent = agent_from_config(config)
    first, second = agent.toolsets
    assert first.name == "tests" and first.prefix == "t" and first.timeout == 5  # type: ignore[attr-defined]
    assert second.server.url == "http://127.0.0.1:8931/mcp"  # type: ignore[attr-defined]


def test_config_file_tools_instance_needs_a_command_or_a_url() -> None:
    config = parse_config('[[tools.instances]]\nname = "x"\n', "toml")
    with pytest.raises(ConfigError, match=r"key `tools\.instances\[0\]`: .*either `command`"):
        agent_from_config(config)


def test_phi_run_mcp_gives_the_agent_the_servers_tools(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "scripted:a": [
                    {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 40}}]},
                    "The sum is 42.",
                ]
            }
        )
    )
    server = f"{sys.executable} {SERVER}"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "Add 2 and 40",
            "-m",
            "scripted:a",
            "--script",
            str(script),
            "--mcp",
            server,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    ends = [e for e in events if e.get("type") == "tool_execution_end"]
    assert ends and ends[0]["tool_name"] == "add" and not ends[0]["is_error"]
    assert ends[0]["result"]["content"][0]["text"] == "42"
    assert events[-1]["text"] == "The sum is 42."


def test_phi_run_mcp_with_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripted:a": ["hi"]}))
    result = CliRunner().invoke(
        app,
        ["run", "hi", "-m", "scripted:a", "--script", str(script), "--mcp", "no-such-server-xyz"],
    )
    assert result.exit_code == 2
    assert "Could not connect to MCP server 'no-such-server-xyz'" in result.output
