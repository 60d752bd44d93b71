"""Compaction that fails: every CompactionStarted gets its CompactionEnded, and a strategy that
raises, returns no usable messages or is cancelled leaves the conversation as it was."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from phi_core.cancel import CancelToken
from phi_core.context import CompactionConfig
from phi_core.context.compaction import CompactionReport, ContextCompactor
from phi_core.errors import ContextOverflowError
from phi_core.events import CompactionEnded, CompactionStarted, Warning
from phi_core.loop import AgentContext, AgentLoopConfig, LoopHooks, agent_loop
from phi_core.providers import RetryPolicy
from phi_core.testing import Fail, ScriptedProvider
from phi_core.types import AgentMessage, ExtensionMessage, UserMessage, message_text

PROMPT = "hello " * 300  # well over a 200-token window: compaction runs on the first turn


class Returns:
    def __init__(self, value: Any) -> None:
        self.value = value

    def compact(self, messages: list[AgentMessage], config: CompactionConfig) -> Any:
        return self.value


class Raises:
    def compact(self, messages: list[AgentMessage], config: CompactionConfig) -> Any:
        raise RuntimeError("strategy bug")


def compaction_events(events: list[Any]) -> Counter[str]:
    return Counter(e.type for e in events if isinstance(e, CompactionStarted | CompactionEnded))


async def run(strategy: Any, **changes: Any) -> tuple[Any, list[Any], ScriptedProvider]:
    provider = ScriptedProvider(["ok"])
    events: list[Any] = []
    config = AgentLoopConfig(
        provider=provider,
        retry=RetryPolicy.none(),
        compaction=CompactionConfig(max_context_tokens=200, strategy=strategy),
        **changes,
    )
    result = await asyncio.wait_for(
        agent_loop(PROMPT, AgentContext(), config, events=events.append), 20
    )
    return result, events, provider


@pytest.mark.parametrize(
    "strategy",
    [
        Raises(),
        Returns(["not a message"]),
        Returns(None),
        Returns([]),
        Returns([ExtensionMessage(kind="note", data={})]),
    ],
    ids=["raises", "non-messages", "none", "empty", "nothing-a-model-reads"],
)
async def test_a_failed_compaction_ends_and_the_conversation_is_sent_as_it_was(
    strategy: Any,
) -> None:
    result, events, provider = await run(strategy)

    assert result.ok
    assert compaction_events(events) == {"compaction_started": 1, "compaction_ended": 1}
    [ended] = [e for e in events if isinstance(e, CompactionEnded)]
    assert ended.messages_after == ended.messages_before == 1
    assert ended.error is not None  # the event says it failed, and why
    if isinstance(strategy, Raises):
        assert ended.error == "RuntimeError: strategy bug"
    assert ended.estimated_tokens_after == ended.estimated_tokens_before
    assert [message_text(m) for m in provider.requests[0].messages] == [PROMPT]
    assert any(isinstance(e, Warning) and "Context management failed" in e.message for e in events)


async def test_the_after_compaction_end_hook_hears_of_a_failed_compaction() -> None:
    heard: list[tuple[int, int, int, int]] = []
    hooks = LoopHooks(after_compaction_end=lambda *report: heard.append(report))
    result, _events, _provider = await run(Returns([]), hooks=hooks)
    assert result.ok
    [(before, after, tokens_before, tokens_after)] = heard
    assert before == after == 1 and tokens_before == tokens_after


class Slow:
    def __init__(self, token: CancelToken) -> None:
        self.token = token

    async def compact(self, messages: list[AgentMessage], config: CompactionConfig) -> Any:
        self.token.cancel()
        await asyncio.sleep(100)
        return messages


async def test_a_cancelled_compaction_still_ends() -> None:
    token = CancelToken()
    provider = ScriptedProvider(["never"])
    events: list[Any] = []
    config = AgentLoopConfig(
        provider=provider,
        retry=RetryPolicy.none(),
        compaction=CompactionConfig(max_context_tokens=200, strategy=Slow(token)),
    )
    result = await asyncio.wait_for(
        agent_loop(PROMPT, AgentContext(), config, events=events.append, cancel=token), 20
    )
    assert result.reason == "cancelled"
    assert compaction_events(events) == {"compaction_started": 1, "compaction_ended": 1}
    assert [e.error for e in events if isinstance(e, CompactionEnded)] == ["cancelled"]
    assert provider.calls == 0


async def test_a_cancelled_overflow_recompaction_still_ends() -> None:
    token = CancelToken()
    provider = ScriptedProvider([Fail(ContextOverflowError("too long")), "never"])
    events: list[Any] = []
    config = AgentLoopConfig(
        provider=provider,
        retry=RetryPolicy.none(),
        compaction=CompactionConfig(strategy=Slow(token)),
    )
    result = await asyncio.wait_for(
        agent_loop("hello", AgentContext(), config, events=events.append, cancel=token), 20
    )
    assert result.reason == "cancelled"
    assert compaction_events(events) == {"compaction_started": 1, "compaction_ended": 1}
    [ended] = [e for e in events if isinstance(e, CompactionEnded)]
    assert ended.reason == "overflow"


async def test_the_compactor_reports_a_failure_and_raises_it() -> None:
    reports: list[CompactionReport] = []
    started: list[int] = []
    compactor = ContextCompactor(
        CompactionConfig(max_context_tokens=200, strategy=Returns([])),
        on_started=lambda tokens, count, reason: started.append(count),
        on_compacted=reports.append,
    )
    messages: list[AgentMessage] = [UserMessage.text(PROMPT)]
    with pytest.raises(ValueError, match="no messages"):
        await compactor(messages)
    [report] = reports
    assert started == [1] and report.messages_after == report.messages_before == 1
    assert report.error == "ValueError: the compaction strategy returned no messages"

    reports.clear()
    compactor.config = CompactionConfig(max_context_tokens=200, strategy=Raises())
    with pytest.raises(RuntimeError, match="strategy bug"):
        await compactor(messages)
    assert [r.error for r in reports] == ["RuntimeError: strategy bug"]


async def test_a_working_strategy_reports_no_error_and_may_return_any_iterable() -> None:
    reports: list[CompactionReport] = []
    kept = UserMessage.text("short")
    compactor = ContextCompactor(
        CompactionConfig(max_context_tokens=200, strategy=Returns(iter([kept]))),
        on_compacted=reports.append,
    )
    out = await compactor([UserMessage.text(PROMPT), kept])
    assert out == [kept]
    [report] = reports
    assert report.error is None and report.messages_after == 1
