"""Overflow recovery: with compaction on, a context overflow compacts harder and resends once."""

from __future__ import annotations

from typing import Any

from phi_core.context import CompactionConfig
from phi_core.errors import ContextOverflowError
from phi_core.events import CompactionEnded, CompactionStarted, TurnRequest
from phi_core.loop import AgentContext, AgentLoopConfig, LoopHooks, agent_loop
from phi_core.providers.base import ModelConfig
from phi_core.testing import Fail, Reply, ScriptedProvider
from phi_core.types import AssistantMessage, TextContent, UserMessage


def overflow() -> Fail:
    return Fail(ContextOverflowError("prompt is too long: 250000 tokens > 200000 maximum"))


def history(turns: int, size: int = 400) -> list[Any]:
    out: list[Any] = []
    for i in range(turns):
        out.append(UserMessage.text(f"question {i} " + "x" * size))
        out.append(AssistantMessage(content=[TextContent(text=f"answer {i} " + "y" * size)]))
    return out


async def test_overflow_then_reply_completes_after_two_calls_with_compaction_between() -> None:
    provider = ScriptedProvider([overflow(), Reply("recovered")])
    events: list[Any] = []
    context = AgentContext(messages=history(20))
    result = await agent_loop(
        "latest", context, AgentLoopConfig(provider=provider), events=events.append
    )
    assert result.reason == "completed" and result.text == "recovered"
    assert provider.calls == 2
    kinds = [type(e).__name__ for e in events]
    first, second = [i for i, k in enumerate(kinds) if k == "TurnRequest"]
    between = kinds[first:second]
    assert "CompactionStarted" in between and "CompactionEnded" in between
    started = next(e for e in events if isinstance(e, CompactionStarted))
    ended = next(e for e in events if isinstance(e, CompactionEnded))
    assert started.reason == ended.reason == "overflow"
    assert len(provider.requests[1].messages) < len(provider.requests[0].messages)
    assert provider.requests[1].messages[-1].content[0].text == "latest"  # type: ignore[union-attr]
    assert len(context.messages) == 42  # the log keeps every message; no error message added
    requests = [e for e in events if isinstance(e, TurnRequest)]
    assert [r.turn_index for r in requests] == [0, 0]


async def test_without_compaction_an_overflow_ends_the_run_with_the_classified_error() -> None:
    provider = ScriptedProvider([overflow(), Reply("never")])
    result = await agent_loop(
        "q", AgentContext(messages=history(5)), AgentLoopConfig(provider=provider, compaction=None)
    )
    assert result.reason == "error" and "prompt is too long" in (result.error or "")
    assert provider.calls == 1


async def test_a_second_overflow_is_not_retried_again() -> None:
    provider = ScriptedProvider([overflow(), overflow(), Reply("never")])
    result = await agent_loop(
        "q", AgentContext(messages=history(10)), AgentLoopConfig(provider=provider)
    )
    assert result.reason == "error" and provider.calls == 2


async def test_a_vetoed_overflow_compaction_gives_up_at_once() -> None:
    provider = ScriptedProvider([overflow(), Reply("never")])
    hooks = LoopHooks(before_compaction_start=lambda tokens, count: False)
    result = await agent_loop(
        "q", AgentContext(messages=history(10)), AgentLoopConfig(provider=provider, hooks=hooks)
    )
    assert result.reason == "error" and provider.calls == 1


async def test_after_an_overflow_later_turns_compact_before_sending() -> None:
    # The provider rejects what the estimate says fits: the run learns the real window.
    follow = [UserMessage.text("two")]
    provider = ScriptedProvider([overflow(), Reply("a"), Reply("b")])
    config = AgentLoopConfig(
        provider=provider, get_follow_up_messages=lambda: [follow.pop()] if follow else []
    )
    events: list[Any] = []
    result = await agent_loop(
        "one", AgentContext(messages=history(20)), config, events=events.append
    )
    assert result.text == "b" and provider.calls == 3
    reasons = [e.reason for e in events if isinstance(e, CompactionStarted)]
    assert reasons == ["overflow", "threshold"]  # the follow-up turn compacted before sending


async def test_compaction_is_on_by_default_and_sized_to_the_model_window() -> None:
    small = ModelConfig(provider="scripted", id="small", api="scripted", context_window=2_000)
    provider = ScriptedProvider(["ok"])
    events: list[Any] = []
    await agent_loop(
        "q",
        AgentContext(messages=history(20)),
        AgentLoopConfig(model=small, provider=provider),
        events=events.append,
    )
    assert any(isinstance(e, CompactionStarted) and e.reason == "threshold" for e in events)
    big = ModelConfig(provider="scripted", id="big", api="scripted", context_window=1_000_000)
    provider = ScriptedProvider(["ok"])
    await agent_loop(
        "q", AgentContext(messages=history(20)), AgentLoopConfig(model=big, provider=provider)
    )
    assert len(provider.requests[0].messages) == 41  # fits: nothing compacted


async def test_reported_usage_drives_the_trigger_not_only_the_estimate() -> None:
    from phi_core.types import Usage

    window = ModelConfig(provider="scripted", id="m", api="scripted", context_window=10_000)
    # Tiny messages, but the model reports 9,500 input tokens: the next request must compact.
    provider = ScriptedProvider(
        [
            Reply("a", usage=Usage(input=9_500, output=10)),
            Reply("b", usage=Usage(input=20, output=5)),
        ]
    )
    follow = [UserMessage.text("more")]
    events: list[Any] = []
    await agent_loop(
        "q",
        AgentContext(messages=history(4, size=20)),
        AgentLoopConfig(
            model=window,
            provider=provider,
            compaction=CompactionConfig(keep_first_turns=1, keep_recent_turns=1),
            get_follow_up_messages=lambda: [follow.pop()] if follow else [],
        ),
        events=events.append,
    )
    started = [e for e in events if isinstance(e, CompactionStarted)]
    assert len(started) == 1 and started[0].estimated_tokens >= 9_500


async def test_a_failing_custom_counter_or_strategy_warns_and_the_run_goes_on() -> None:
    from phi_core.context import CallableTokenCounter
    from phi_core.events import AgentEnd, Warning

    def broken(text: str) -> int:
        raise RuntimeError("tokenizer exploded")

    for settings in (
        CompactionConfig(token_counter=CallableTokenCounter(broken)),
        CompactionConfig(max_context_tokens=500, strategy=_Raising()),
    ):
        provider = ScriptedProvider(["fine"])
        events: list[Any] = []
        result = await agent_loop(
            "q",
            AgentContext(messages=history(3)),
            AgentLoopConfig(provider=provider, compaction=settings),
            events=events.append,
        )
        assert result.ok and result.text == "fine"
        warnings = [e.message for e in events if isinstance(e, Warning)]
        assert len(warnings) == 1 and "Context management failed" in warnings[0]
        assert sum(isinstance(e, AgentEnd) for e in events) == 1


class _Raising:
    def compact(self, messages: list[Any], config: CompactionConfig) -> list[Any]:
        raise ValueError("strategy bug")
