"""Compaction's last resort never sends a tool result without the assistant message that made
its call (a red-team pass, s18): a turn whose newest message is one tool result too big for the
target keeps the call with it, and results whose call is nowhere before them are dropped."""

from __future__ import annotations

from typing import Any

from phi_core.context import CompactionConfig
from phi_core.context.compaction import compact_messages
from phi_core.errors import ContextOverflowError
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import RetryPolicy
from phi_core.providers.base import StreamRequest
from phi_core.testing import Fail, Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import (
    AgentMessage,
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

HUGE = "A" * 40_000  # one line of ~10,000 tokens: line truncation (L1) cannot shrink it
SMALL = CompactionConfig(max_context_tokens=8_000)


def result(call_id: str, text: str) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id, tool_name="fetch", content=[TextContent(text=text)]
    )


def calls(*ids: str) -> AssistantMessage:
    return AssistantMessage(content=[ToolCall(id=i, name="fetch") for i in ids])


def orphans(messages: list[Any]) -> list[str]:
    """Tool results whose call is not in an assistant message before them."""
    seen: set[str] = set()
    out: list[str] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            seen.update(c.id for c in message.tool_calls)
        elif isinstance(message, ToolResultMessage) and message.tool_call_id not in seen:
            out.append(message.tool_call_id)
    return out


def unanswered(messages: list[Any]) -> set[str]:
    asked = {c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls}
    return asked - {m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)}


def test_a_tool_result_too_big_for_the_target_keeps_its_call() -> None:
    messages: list[AgentMessage] = [
        UserMessage.text("Read the page"),
        calls("c1"),
        result("c1", HUGE),
    ]
    out = compact_messages(messages, SMALL.for_model(None))
    assert orphans(out) == [] and unanswered(out) == set()
    assert [m.role for m in out] == ["user", "assistant", "tool_result"]


def test_the_newest_results_keep_their_call_and_its_other_results() -> None:
    history: list[AgentMessage] = []
    for i in range(3):
        history += [UserMessage.text(f"question {i} " + "q" * 4000), AssistantMessage(
            content=[TextContent(text="answer " + "a" * 4000)])]  # fmt: skip
    messages = [*history, UserMessage.text("Read both"), calls("c1", "c2")]
    messages += [result("c1", HUGE), result("c2", "small")]
    out = compact_messages(messages, SMALL.for_model(None))
    assert orphans(out) == [] and unanswered(out) == set()
    assert out[0].role == "user" and out[-2:] == messages[-2:]


def test_results_whose_call_is_gone_are_dropped_not_sent() -> None:
    # what a transform_context that dropped the assistant message leaves behind
    messages: list[AgentMessage] = [UserMessage.text("Read the page"), result("gone", HUGE)]
    messages.append(result("gone_2", "B" * 40_000))
    out = compact_messages(messages, SMALL.for_model(None))
    assert orphans(out) == []
    assert [m.role for m in out] == ["user", "user"]  # the marker, then the turn's user message


@tool
def fetch() -> str:
    """Fetch a page."""
    return HUGE


def valid(request: StreamRequest) -> bool:
    return orphans(request.messages) == [] and unanswered(request.messages) == set()


async def test_the_loop_never_sends_an_orphan_tool_result(strict_loop) -> None:
    provider = ScriptedProvider([Reply(tool_calls=[call("fetch", id="call_fetch")]), "summary"])
    result_ = await agent_loop(
        "Read the page",
        AgentContext(tools=[fetch]),
        AgentLoopConfig(provider=provider, compaction=SMALL),
    )
    assert result_.ok and all(valid(r) for r in provider.requests)


async def test_a_result_that_can_never_fit_ends_on_the_overflow_with_valid_requests(
    strict_loop,
) -> None:
    overflow = Fail(ContextOverflowError("prompt is too long: 12000 tokens > 8000 maximum"))
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("fetch", id="call_fetch")]), overflow, overflow, "never"]
    )
    result_ = await agent_loop(
        "Read the page",
        AgentContext(tools=[fetch]),
        AgentLoopConfig(provider=provider, compaction=SMALL, retry=RetryPolicy.none()),
    )
    assert result_.reason == "error" and result_.error_kind == "context_overflow"
    assert result_.error is not None and "prompt is too long" in result_.error
    assert "does not fit the model's context window even compacted" in result_.error
    assert len(provider.requests) == 2 and all(valid(r) for r in provider.requests)
