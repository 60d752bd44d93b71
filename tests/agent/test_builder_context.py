"""The builder methods for context management: strategy, counter, workspace, switching off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phi_core.agent import BasicAgent
from phi_core.context import CallableTokenCounter, CompactionConfig
from phi_core.errors import UserError
from phi_core.events import CompactionStarted
from phi_core.providers import ModelConfig
from phi_core.testing import ScriptedProvider
from phi_core.types import AgentMessage, AssistantMessage, TextContent, UserMessage


def long_history(turns: int = 30) -> list[AgentMessage]:
    out: list[AgentMessage] = []
    for n in range(turns):
        out += [
            UserMessage.text(f"q{n} " + "x" * 400),
            AssistantMessage(content=[TextContent(text="y" * 400)]),
        ]
    return out


SMALL = ModelConfig(provider="scripted", id="small", api="scripted", context_window=3_000)


def test_context_management_is_on_by_default_and_can_be_switched_off() -> None:
    agent = BasicAgent("scripted:m")
    assert agent.compaction == CompactionConfig() and agent.config.limits is not None
    agent.without_context_management()
    assert agent.compaction is None and agent.config.limits is None


async def test_a_custom_compaction_strategy_replaces_the_tiers() -> None:
    seen: list[int] = []

    def keep_last_two(messages: list[AgentMessage], config: CompactionConfig) -> list[AgentMessage]:
        seen.append(config.target())
        return messages[-2:]

    provider = ScriptedProvider(["ok"])
    agent = BasicAgent(SMALL, provider=provider).with_messages(long_history())
    agent.with_compaction_strategy(keep_last_two)
    await agent.prompt("now")
    assert len(provider.requests[0].messages) == 2 and seen and 0 < seen[0] < 3_000
    with pytest.raises(UserError, match="compact"):
        agent.with_compaction_strategy(42)  # type: ignore[arg-type]


async def test_a_custom_token_counter_decides_when_to_compact() -> None:
    events: list[Any] = []
    provider = ScriptedProvider(["a", "b"])
    agent = BasicAgent(
        ModelConfig(provider="scripted", id="m", api="scripted", context_window=50_000),
        provider=provider,
    )
    agent.with_messages(long_history(10)).subscribe(events.append)
    await agent.prompt("heuristic")
    assert not any(isinstance(e, CompactionStarted) for e in events)  # ~2,100 tokens: fits
    agent.with_token_counter(CallableTokenCounter(lambda text: len(text) * 10, "x10"))
    await agent.prompt("ten times heavier")
    assert any(isinstance(e, CompactionStarted) for e in events)


def test_the_workspace_must_exist(tmp_path: Path) -> None:
    agent = BasicAgent("scripted:m").with_workspace(tmp_path)
    assert agent.workspace == str(tmp_path.resolve())
    with pytest.raises(UserError, match=r"is not a directory"):
        agent.with_workspace(tmp_path / "missing")
