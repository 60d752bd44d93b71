"""The book's config forms: ``[context]``, ``file_read`` / ``file_write`` / ``prun``, cache modes."""

from __future__ import annotations

import textwrap

import pytest

from phi_core.config import AgentConfig, agent_from_config, parse_config
from phi_core.errors import ConfigError
from phi_core.providers import CacheConfig, ManualCache


def toml(text: str) -> AgentConfig:
    return parse_config(textwrap.dedent(text), "toml")


def test_the_context_form_is_the_same_as_a_compaction_table() -> None:
    config = toml(
        """
        [provider]
        model = "scripted:x"
        [context]
        max_context_tokens = 200000
        [context.compaction]
        compact_at_pct = 0.85
        keep_recent_turns = 4
        focus_message = "Retain key decisions."
        [[context.compaction.instances]]
        id = "{{%coding%}}"
        focus_message = "Focus on file paths."
        [agent.profile]
        compaction = "{{compaction.coding}}"
        """
    )
    compaction = agent_from_config(config).compaction
    assert compaction is not None
    assert (
        compaction.max_context_tokens,
        compaction.compact_at_pct,
        compaction.keep_recent_turns,
    ) == (
        200000,
        0.85,
        4,
    )
    assert compaction.focus_message == "Focus on file paths."


def test_both_forms_at_once_are_refused_naming_the_forms() -> None:
    config = toml(
        """
        [provider]
        model = "scripted:x"
        [compaction]
        max_context_tokens = 1000
        [context]
        max_context_tokens = 2000
        """
    )
    with pytest.raises(
        ConfigError, match=r"both `\[compaction\]` and `\[context\]` are set; use one form"
    ):
        agent_from_config(config)


def test_message_counted_keys_are_refused_with_the_turn_key_to_use() -> None:
    config = toml('[provider]\nmodel = "scripted:x"\n[context]\nkeep_recent = 4\n')
    with pytest.raises(
        ConfigError,
        match=r"set `keep_recent_turns` \(counted in turns\) under `\[context.compaction\]`",
    ) as info:
        agent_from_config(config)
    assert info.value.key == "context.keep_recent"


def test_the_book_tool_names_are_accepted() -> None:
    config = toml(
        """
        [provider]
        model = "scripted:x"
        [tools]
        enabled = ["file_read", "file_write", "prun"]
        [[sub_agents.instances]]
        name = "reader"
        tools = ["file_read"]
        """
    )
    agent = agent_from_config(config)
    assert [t.name for t in agent.tools] == [
        "read_file",
        "write_file",
        "prun",
        "prun_with_memo",
        "reader",
    ]
    assert [t.name for t in agent.tools[-1].tools] == ["read_file"]  # type: ignore[attr-defined]


def test_manual_cache_mode_from_config() -> None:
    config = toml(
        """
        [provider]
        model = "scripted:x"
        [execution.cache]
        strategy = "manual"
        cache_messages = false
        """
    )
    cache = agent_from_config(config).build_config().cache
    assert cache == CacheConfig(strategy=ManualCache(system=True, tools=True, messages=False))
    disabled = toml('[provider]\nmodel = "scripted:x"\n[execution.cache]\nstrategy = "disabled"\n')
    assert CacheConfig.of(agent_from_config(disabled).build_config().cache).targets() == (
        False,
        False,
        False,
    )
