"""Legacy tiered compaction (study §1.5): estimation, trigger, L1/L2/L3."""

from __future__ import annotations

from phi_core.context.compaction import (
    CompactionConfig,
    compact_messages,
    estimate_message_tokens,
    estimate_text_tokens,
    estimate_tokens,
    should_compact,
)
from phi_core.types import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)


def test_token_estimates_follow_the_byte_heuristic() -> None:
    assert estimate_text_tokens("abcd") == 1 and estimate_text_tokens("abcde") == 2
    assert estimate_message_tokens(UserMessage.text("abcd")) == 5
    image = UserMessage(content=[ImageContent(data="A" * 4000)])
    assert estimate_message_tokens(image) == 85 + 4
    result = ToolResultMessage(tool_call_id="c", tool_name="abcd", content=[TextContent(text="x")])
    assert estimate_message_tokens(result) == 1 + 1 + 8


def test_trigger_fires_only_when_headroom_drops_below_the_threshold() -> None:
    config = CompactionConfig(max_context_tokens=1000, system_prompt_tokens=40)
    small = [UserMessage.text("x" * 4 * 700)]  # 704 tokens → 0.9 - 0.04 - 0.704 = 0.156
    big = [UserMessage.text("x" * 4 * 900)]
    assert not should_compact(small, config)
    assert should_compact(big, config)


def _conversation(turns: int, tool_lines: int) -> list[AgentMessage]:
    out: list[AgentMessage] = []
    for n in range(turns):
        out.append(UserMessage.text(f"question {n}"))
        out.append(AssistantMessage(content=[ToolCall(id=f"c{n}", name="read")]))
        text = "\n".join(f"line {k}" for k in range(tool_lines))
        out.append(
            ToolResultMessage(
                tool_call_id=f"c{n}", tool_name="read", content=[TextContent(text=text)]
            )
        )
        out.append(AssistantMessage(content=[TextContent(text=f"answer {n}")]))
    return out


def test_level_one_truncates_tool_output_head_and_tail() -> None:
    messages = _conversation(2, 200)
    config = CompactionConfig(
        max_context_tokens=500, system_prompt_tokens=0, tool_output_max_lines=10
    )
    out = compact_messages(messages, config)
    assert len(out) == len(messages)
    text = out[2].content[0].text  # type: ignore[union-attr]
    assert "[... 190 lines truncated ...]" in text
    assert text.startswith("line 0") and text.endswith("line 199")


def test_level_two_keeps_first_and_recent_turns_and_summarises_the_middle() -> None:
    messages = _conversation(20, 5)  # 20 turns of 4 messages
    config = CompactionConfig(
        max_context_tokens=estimate_tokens(messages),
        system_prompt_tokens=0,
        keep_first_turns=1,
        keep_recent_turns=4,
        max_summary_tokens=10_000,
    )
    out = compact_messages(messages, config)
    assert out[:4] == messages[:4]  # the first turn, verbatim
    assert out[-16:] == messages[-16:]  # the last four turns, verbatim (tool results included)
    middle = out[4:-16]
    assert not any(isinstance(m, ToolResultMessage | AssistantMessage) for m in middle)
    questions = [m.content[0].text for m in middle if "question" in m.content[0].text]  # type: ignore[union-attr]
    assert questions == [f"question {n}" for n in range(1, 16)]  # user intent stays
    assert any("[Summary]" in m.content[0].text for m in middle)  # type: ignore[union-attr]


def test_level_three_keeps_first_marker_and_recent_and_never_orphans_tool_results() -> None:
    messages = _conversation(30, 5)
    config = CompactionConfig(
        max_context_tokens=150,
        system_prompt_tokens=0,
        keep_first_turns=2,
        keep_recent_turns=6,
        focus_message="keep the answers",
    )
    out = compact_messages(messages, config)
    assert estimate_tokens(out) <= 150
    markers = [m for m in out if m.role == "user" and "[Context compacted:" in m.content[0].text]  # type: ignore[union-attr]
    assert len(markers) == 1 and "keep the answers" in markers[0].content[0].text  # type: ignore[union-attr]
    for i, m in enumerate(out):
        if isinstance(m, ToolResultMessage):
            previous = out[i - 1]
            assert isinstance(previous, AssistantMessage) and previous.tool_calls


def test_messages_within_budget_are_returned_unchanged() -> None:
    messages = _conversation(2, 3)
    assert compact_messages(messages, CompactionConfig()) == messages
