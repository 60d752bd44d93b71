"""Compaction counts turns, reaches every tier with the focus, and takes a pluggable counter."""

from __future__ import annotations

from typing import Any

import pytest

from phi_core.context import (
    CallableTokenCounter,
    CompactionConfig,
    ContextTracker,
    HeuristicTokenCounter,
    compact_messages,
)
from phi_core.context._summary import split_turns
from phi_core.context.tokens import messages_tokens, token_counter_for
from phi_core.providers.base import ModelConfig
from phi_core.types import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)


def exchange(n: int, tool_lines: int = 3, *, note: str = "") -> list[Any]:
    """One turn: a question, a tool call, its result, and an answer."""
    lines = "\n".join(f"row {n}.{k}" for k in range(tool_lines))
    return [
        UserMessage.text(f"question {n}"),
        AssistantMessage(
            content=[
                TextContent(text=f"Looking up {n}. {note}"),
                ToolCall(id=f"c{n}", name="lookup"),
            ]
        ),
        ToolResultMessage(
            tool_call_id=f"c{n}", tool_name="lookup", content=[TextContent(text=lines)]
        ),
        AssistantMessage(content=[TextContent(text=f"answer {n}")]),
    ]


def test_a_turn_is_a_user_message_and_everything_until_the_next_one() -> None:
    reply = AssistantMessage(content=[TextContent(text="ok")])
    messages = [*exchange(0), UserMessage.text("a"), UserMessage.text("b"), reply, *exchange(1)]
    turns = split_turns(messages)
    assert [len(t) for t in turns] == [4, 3, 4]  # consecutive user messages open one turn
    lead = [AssistantMessage(content=[TextContent(text="hello")]), *exchange(2)]
    assert [len(t) for t in split_turns(lead)] == [1, 4]


def test_keep_turns_keep_whole_turns_with_their_tool_results() -> None:
    messages = [m for n in range(12) for m in exchange(n)]
    config = CompactionConfig(
        max_context_tokens=messages_tokens(messages),
        system_prompt_tokens=0,
        keep_first_turns=2,
        keep_recent_turns=3,
    )
    out = compact_messages(messages, config)
    assert len(out) < len(messages)
    assert out[:8] == messages[:8]
    assert out[-12:] == messages[-12:]
    for i, m in enumerate(out):  # no tool result without the call right before it
        if isinstance(m, ToolResultMessage):
            assert isinstance(out[i - 1], AssistantMessage) and out[i - 1].tool_calls


def test_focus_keeps_matching_tool_output_lines_when_truncating() -> None:
    lines = [f"line {k}" for k in range(200)]
    lines[120] = "ERROR: database migration 0042 failed"
    result = ToolResultMessage(
        tool_call_id="c", tool_name="logs", content=[TextContent(text="\n".join(lines))]
    )
    messages = [
        UserMessage.text("check the logs"),
        AssistantMessage(content=[ToolCall(id="c", name="logs")]),
        result,
    ]
    base = dict(max_context_tokens=300, system_prompt_tokens=0, tool_output_max_lines=10)
    plain = compact_messages(messages, CompactionConfig(**base))  # type: ignore[arg-type]
    focused = compact_messages(
        messages,
        CompactionConfig(**base, focus_message="Keep database migration errors"),  # type: ignore[arg-type]
    )
    assert "migration 0042" not in plain[2].content[0].text  # type: ignore[union-attr]
    assert "migration 0042" in focused[2].content[0].text  # type: ignore[union-attr]


def test_focus_steers_the_summaries_of_the_middle_and_is_stated() -> None:
    messages = [m for n in range(10) for m in exchange(n, 40)]
    messages[5 * 4 + 2] = ToolResultMessage(
        tool_call_id="c5",
        tool_name="lookup",
        content=[TextContent(text="noise\nthe invoice total is 4,210 EUR\nnoise")],
    )
    base = dict(
        max_context_tokens=messages_tokens(messages) * 2 // 3,
        system_prompt_tokens=0,
        keep_first_turns=1,
        keep_recent_turns=1,
    )
    focused = compact_messages(
        messages,
        CompactionConfig(**base, focus_message="invoice totals"),  # type: ignore[arg-type]
    )
    plain = compact_messages(messages, CompactionConfig(**base))  # type: ignore[arg-type]
    text = "\n".join(m.content[0].text for m in focused if isinstance(m, UserMessage))  # type: ignore[union-attr]
    assert "4,210 EUR" in text and "focus: invoice totals" in text
    plain_text = "\n".join(m.content[0].text for m in plain if isinstance(m, UserMessage))  # type: ignore[union-attr]
    assert "4,210 EUR" not in plain_text


def test_focus_is_named_in_the_marker_when_the_middle_is_dropped() -> None:
    messages = [m for n in range(30) for m in exchange(n, 5)]
    config = CompactionConfig(
        max_context_tokens=250,
        system_prompt_tokens=0,
        keep_first_turns=1,
        keep_recent_turns=1,
        focus_message="the answers",
    )
    out = compact_messages(messages, config)
    markers = [
        m for m in out if isinstance(m, UserMessage) and "[Context compacted" in m.content[0].text
    ]  # type: ignore[union-attr]
    assert markers and "[Focus: the answers]" in markers[0].content[0].text  # type: ignore[union-attr]
    assert messages_tokens(out) <= config.target()


def test_one_huge_turn_still_fits_without_orphaned_tool_results() -> None:
    messages: list[Any] = [UserMessage.text("do the task")]
    for n in range(40):
        messages.append(AssistantMessage(content=[ToolCall(id=f"c{n}", name="step")]))
        messages.append(
            ToolResultMessage(
                tool_call_id=f"c{n}", tool_name="step", content=[TextContent(text="z" * 400)]
            )
        )
    config = CompactionConfig(max_context_tokens=2_000, system_prompt_tokens=0)
    out = compact_messages(messages, config)
    assert messages_tokens(out) <= config.target()
    assert any(isinstance(m, UserMessage) and m.content[0].text == "do the task" for m in out)  # type: ignore[union-attr]
    for i, m in enumerate(out):
        if isinstance(m, ToolResultMessage):
            assert isinstance(out[i - 1], AssistantMessage)


def test_a_custom_counter_changes_what_fits() -> None:
    messages = [m for n in range(6) for m in exchange(n)]
    generous = CompactionConfig(max_context_tokens=10_000, system_prompt_tokens=0)
    assert compact_messages(messages, generous) == messages
    every_char = CallableTokenCounter(len, "chars")
    strict = CompactionConfig(
        max_context_tokens=messages_tokens(messages) * 2,
        system_prompt_tokens=0,
        token_counter=every_char,
    )
    assert compact_messages(messages, strict) != messages  # four times the count: must shrink


def test_the_default_counter_is_the_heuristic_for_vendor_models() -> None:
    model = ModelConfig(provider="openai", id="gpt-4o-mini")
    assert isinstance(token_counter_for(model), HeuristicTokenCounter)
    assert HeuristicTokenCounter().count_text("abcde") == 2


def test_the_tracker_adds_estimates_only_for_what_came_after_the_report() -> None:
    tracker = ContextTracker()
    messages: list[Any] = [UserMessage.text("x" * 400)]
    assert tracker.estimate_context_tokens(messages, overhead=10) == 10 + 100 + 4
    tracker.record_usage(Usage(input=5_000, output=50), len(messages))
    messages.append(UserMessage.text("y" * 40))
    assert tracker.estimate_context_tokens(messages) == 5_050 + 10 + 4
    tracker.reset()
    assert tracker.estimate_context_tokens(messages, overhead=0) == 104 + 14


def test_config_rejects_impossible_values_with_the_value() -> None:
    with pytest.raises(ValueError, match="keep_first_turns and keep_recent_turns must be >= 0"):
        CompactionConfig(keep_recent_turns=-1)
    with pytest.raises(ValueError, match=r"max_context_tokens must be >= 1, got 0"):
        CompactionConfig(max_context_tokens=0)
