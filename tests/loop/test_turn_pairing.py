"""Every ``turn_start`` gets exactly one ``turn_end`` and every ``message_start`` one
``message_end``, whenever the run stops: cancelled or failing while the request is being built
(``transform_context``, compaction after an overflow) included."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from phi_core.cancel import CancelToken
from phi_core.errors import ContextOverflowError
from phi_core.events import TurnEnd
from phi_core.loop import AgentContext, AgentLoopConfig, LoopHooks, agent_loop
from phi_core.testing import Fail, Reply, ScriptedProvider
from phi_core.types import AssistantMessage, TextContent, UserMessage


def assert_paired(events: list[Any]) -> None:
    kinds = Counter(e.type for e in events)
    assert kinds["turn_start"] == kinds["turn_end"] >= 1, kinds
    assert kinds["message_start"] == kinds["message_end"], kinds
    assert kinds["agent_end"] == 1
    order = [e.type for e in events]
    assert order.index("turn_end") < order.index("agent_end")


def the_turn_end(events: list[Any]) -> TurnEnd:
    (end,) = [e for e in events if isinstance(e, TurnEnd)]
    return end


async def test_transform_context_raising_ends_the_turn_before_the_run(strict_loop):
    events: list[Any] = []

    def broken(messages: list[Any]) -> list[Any]:
        raise ValueError("transform broke")

    config = AgentLoopConfig(provider=ScriptedProvider(["never"]), transform_context=broken)
    with pytest.raises(ValueError, match="transform broke"):
        await agent_loop("q", AgentContext(), config, events=events.append)
    assert_paired(events)
    end = the_turn_end(events)
    assert end.message.stop_reason == "error" and "transform broke" in (
        end.message.error_message or ""
    )


async def test_a_token_cancel_while_transform_context_runs_ends_the_turn(strict_loop):
    events: list[Any] = []
    token = CancelToken()

    async def slow(messages: list[Any]) -> list[Any]:
        token.cancel("stop")
        await asyncio.sleep(5)
        return messages

    config = AgentLoopConfig(provider=ScriptedProvider(["never"]), transform_context=slow)
    result = await agent_loop("q", AgentContext(), config, events=events.append, cancel=token)
    assert result.reason == "cancelled"
    assert_paired(events)
    assert the_turn_end(events).message.stop_reason == "aborted"


async def test_a_task_cancel_while_transform_context_runs_ends_the_turn(strict_loop):
    events: list[Any] = []
    started = asyncio.Event()

    async def slow(messages: list[Any]) -> list[Any]:
        started.set()
        await asyncio.sleep(5)
        return messages

    config = AgentLoopConfig(provider=ScriptedProvider(["never"]), transform_context=slow)
    task = asyncio.create_task(agent_loop("q", AgentContext(), config, events=events.append))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_paired(events)


async def test_a_cancel_while_compacting_after_an_overflow_ends_the_message_and_turn(strict_loop):
    events: list[Any] = []
    token = CancelToken()
    overflow = Fail(ContextOverflowError("prompt is too long: 250000 tokens > 200000 maximum"))
    provider = ScriptedProvider([overflow, Reply("never")])

    async def before_compaction(tokens: int, count: int) -> bool:
        token.cancel("stop")
        await asyncio.sleep(5)
        return True

    history: list[Any] = []
    for i in range(20):
        history.append(UserMessage.text(f"question {i} " + "x" * 400))
        history.append(AssistantMessage(content=[TextContent(text=f"answer {i} " + "y" * 400)]))
    config = AgentLoopConfig(
        provider=provider, hooks=LoopHooks(before_compaction_start=before_compaction)
    )
    result = await agent_loop(
        "latest", AgentContext(messages=history), config, events=events.append, cancel=token
    )
    assert result.reason == "cancelled" and provider.calls == 1
    assert_paired(events)
