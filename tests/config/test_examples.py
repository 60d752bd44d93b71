"""The example config files under examples/config load and run against the scripted provider."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phi_core.agent import BasicAgent
from phi_core.config import ScaledRetryPolicy, agents_from_config, load_config
from phi_core.loop import Batched
from phi_core.sessions import JsonFileSessionStore, SqliteSessionStore
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import ToolRegistry, tool

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "config"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def registry() -> ToolRegistry:
    tools = ToolRegistry()
    tools.register("add", add)
    return tools


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PHI_EXAMPLE_STATE", str(tmp_path))
    return tmp_path


async def _run_tool_exchange(agent: BasicAgent, provider: ScriptedProvider) -> None:
    provider.push(Reply(tool_calls=[call("add", {"a": 2, "b": 3})]), "2 + 3 = 5")
    result = await agent.prompt("What is 2 + 3?")
    assert result.ok and result.text == "2 + 3 = 5"
    assert [m.role for m in agent.messages] == ["user", "assistant", "tool_result", "assistant"]
    assert provider.requests[-1].messages[2].content[0].text == "5"  # type: ignore[union-attr]


async def test_toml_example_builds_both_agents_and_runs(state_dir: Path) -> None:
    audited: list[str] = []
    provider = ScriptedProvider()
    agents = agents_from_config(
        EXAMPLES / "agent.toml",
        tools=registry(),
        callbacks={"audit": lambda name, _id, _args: audited.append(name) or True},
        provider=provider,
    )
    assert list(agents) == ["calculator", "reviewer"]
    calc, reviewer = agents["calculator"], agents["reviewer"]
    assert calc.system_prompt is not None
    assert calc.system_prompt.startswith("You are a careful arithmetic assistant.\n\nAnswer in")
    assert "<name>code-review</name>" in (calc.effective_system_prompt() or "")
    config = calc.build_config()
    assert config.temperature == 0.2 and config.max_tokens == 512
    assert config.tool_execution == "sequential"
    assert config.limits is not None and config.limits.max_turns == 8
    assert config.limits.max_cost == 1.0
    assert isinstance(config.retry, ScaledRetryPolicy) and config.retry.multiplier == 3.0
    assert config.model_config().pricing.input == 3.0
    assert calc.compaction is not None and calc.compaction.max_context_tokens == 100000
    assert isinstance(calc.store, SqliteSessionStore)
    # the reviewer: profile instance overrides, its compaction instance and provider instance
    rconfig = reviewer.build_config()
    assert rconfig.temperature == 0.0 and rconfig.segment() == "reviewer"
    assert rconfig.model_config().id == "careful"
    assert reviewer.compaction is not None
    assert reviewer.compaction.max_context_tokens == 4000
    assert reviewer.compaction.focus_message == "Keep the numbers."
    await _run_tool_exchange(calc, provider)
    assert audited == ["add"]
    assert calc.store is not None
    saved = await calc.store.load(calc.session_id)
    assert saved.scope == "persistent" and len(saved.loops) == 1


async def test_json_example_runs_with_its_limits_and_batched_tools(state_dir: Path) -> None:
    provider = ScriptedProvider()
    [agent] = agents_from_config(
        EXAMPLES / "agent.json", tools=registry(), provider=provider
    ).values()
    config = agent.build_config()
    assert config.thinking == "low" and config.segment() == "concise"
    assert config.tool_execution == Batched(2)
    assert config.limits is not None and config.limits.max_total_tokens == 20000
    await _run_tool_exchange(agent, provider)
    assert isinstance(agent.store, JsonFileSessionStore)
    assert (await agent.store.list_ids()) == [agent.session_id]


async def test_yaml_example_builds_two_agents_from_one_profile() -> None:
    provider = ScriptedProvider()
    agents = agents_from_config(EXAMPLES / "agent.yaml", tools=registry(), provider=provider)
    chatty, terse = agents["chatty"], agents["terse"]
    assert chatty.system_prompt == "You are a helpful assistant."
    assert terse.system_prompt == "Answer in one word."
    assert terse.build_config().temperature == 0.1
    assert terse.build_config().model_config().id == "second"
    assert chatty.store is None and chatty.recorder is not None
    await _run_tool_exchange(chatty, provider)
    session = chatty.recorder.get_session(chatty.session_id)
    assert session is not None and session.scope == "ephemeral"


def test_every_example_parses_without_a_provider_override() -> None:
    for path in sorted(EXAMPLES.glob("agent.*")):
        config = load_config(path)
        assert config.provider.model == "scripted:demo", path
        built: dict[str, Any] = agents_from_config(
            config, tools=registry(), callbacks={"audit": print}
        )
        assert built
