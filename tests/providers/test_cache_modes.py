"""Prompt-cache modes: auto, disabled and manual, with the old bool still accepted."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("anthropic")

from phi_core.agent import BasicAgent
from phi_core.errors import UserError
from phi_core.providers import CacheConfig, ManualCache, ModelConfig
from phi_core.providers.anthropic import build_anthropic_params
from phi_core.providers.base import StreamRequest
from phi_core.testing import ScriptedProvider
from phi_core.types import AssistantMessage, TextContent, ToolDefinition, UserMessage


def request(cache: Any) -> StreamRequest:
    return StreamRequest(
        model=ModelConfig(provider="anthropic", id="claude-haiku-4-5", api="anthropic_messages"),
        messages=[
            UserMessage.text("first"),
            AssistantMessage(content=[TextContent(text="reply")]),
            UserMessage.text("second"),
        ],
        system_prompt="Be brief.",
        tools=[ToolDefinition(name="t")],
        cache=cache,
    )


def marked(params: dict[str, Any]) -> tuple[bool, bool, bool]:
    return (
        "cache_control" in params["system"][0],
        "cache_control" in params["tools"][-1],
        "cache_control" in params["messages"][-1]["content"][-1],
    )


@pytest.mark.parametrize(
    ("cache", "expected"),
    [
        (True, (True, True, True)),
        (False, (False, False, False)),
        ("auto", (True, True, True)),
        ("disabled", (False, False, False)),
        (CacheConfig(enabled=False), (False, False, False)),
        (
            CacheConfig(strategy=ManualCache(system=True, tools=False, messages=False)),
            (True, False, False),
        ),
        (ManualCache(system=False, tools=True, messages=True), (False, True, True)),
    ],
)
def test_each_mode_marks_exactly_its_parts(cache: Any, expected: tuple[bool, bool, bool]) -> None:
    assert marked(build_anthropic_params(request(CacheConfig.of(cache)))) == expected
    if isinstance(cache, bool):  # the old bool path, straight into the request
        assert marked(build_anthropic_params(request(cache))) == expected


async def test_the_agent_setting_reaches_the_request() -> None:
    provider = ScriptedProvider(["ok"])
    agent = BasicAgent(provider=provider).with_cache(ManualCache(messages=False))
    await agent.prompt("hi")
    sent = provider.requests[0].cache
    assert isinstance(sent, CacheConfig) and sent.targets() == (True, True, False)


def test_an_unknown_strategy_names_the_accepted_ones() -> None:
    with pytest.raises(
        UserError, match=r"Unknown prompt-cache strategy 'sometimes'.*'auto', 'disabled'"
    ):
        CacheConfig.of("sometimes")
