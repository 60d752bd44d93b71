"""Per-configuration system prompts, compaction inside the loop, and sub-agent links."""

from __future__ import annotations

from typing import Any

from phi_core.context import CompactionConfig
from phi_core.events import CompactionEnded, CompactionStarted, ToolExecutionEnd, TurnRequest
from phi_core.loop import AgentContext, AgentLoopConfig, LoopHooks, agent_loop
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import ToolResult, tool
from phi_core.types import AssistantMessage, TextContent, UserMessage


async def test_a_config_system_prompt_replaces_the_contexts_in_request_and_event() -> None:
    provider = ScriptedProvider(["a", "b"])
    context = AgentContext(system_prompt="shared")
    events: list[Any] = []
    await agent_loop(
        "hi",
        context,
        AgentLoopConfig(provider=provider, system_prompt="be a pirate"),
        events=events.append,
    )
    assert provider.requests[0].system_prompt == "be a pirate"
    request = next(e for e in events if isinstance(e, TurnRequest))
    assert request.payload["system_prompt"] == "be a pirate"
    assert context.system_prompt == "shared"
    await agent_loop("again", context, AgentLoopConfig(provider=provider))
    assert provider.requests[1].system_prompt == "shared"


async def test_compaction_shrinks_the_payload_never_the_log_with_events_and_hooks() -> None:
    history: list[Any] = []
    for i in range(30):
        history.append(UserMessage.text(f"question {i} " + "x" * 400))
        history.append(AssistantMessage(content=[TextContent(text=f"answer {i} " + "y" * 400)]))
    context = AgentContext(messages=list(history))
    provider = ScriptedProvider(["done"])
    seen: dict[str, Any] = {}
    hooks = LoopHooks(
        before_compaction_start=lambda tokens, count: (
            seen.setdefault("before", (tokens, count)) is not None
        ),
        after_compaction_end=lambda mb, ma, tb, ta: seen.setdefault("after", (mb, ma, tb, ta)),
    )
    events: list[Any] = []
    settings = CompactionConfig(
        max_context_tokens=3_000, system_prompt_tokens=100, keep_recent_turns=6
    )
    await agent_loop(
        "latest question",
        context,
        AgentLoopConfig(provider=provider, compaction=settings, hooks=hooks),
        events=events.append,
    )
    sent = provider.requests[0].messages
    assert len(sent) < 61
    assert sent[-1].content[0].text == "latest question"  # type: ignore[union-attr]
    assert len(context.messages) == 62  # the log keeps every message
    started = [e for e in events if isinstance(e, CompactionStarted)]
    ended = [e for e in events if isinstance(e, CompactionEnded)]
    assert len(started) == 1 and len(ended) == 1
    assert ended[0].messages_before == 61 and ended[0].messages_after == len(sent)
    assert ended[0].estimated_tokens_after < ended[0].estimated_tokens_before
    assert seen["before"][1] == 61 and seen["after"][1] == len(sent)


async def test_a_vetoed_compaction_sends_everything() -> None:
    history = [UserMessage.text("z" * 4000) for _ in range(10)]
    provider = ScriptedProvider(["ok"])
    events: list[Any] = []
    await agent_loop(
        "q",
        AgentContext(messages=history),
        AgentLoopConfig(
            provider=provider,
            compaction=CompactionConfig(max_context_tokens=2_000, system_prompt_tokens=10),
            hooks=LoopHooks(before_compaction_start=lambda t, c: False),
        ),
        events=events.append,
    )
    assert len(provider.requests[0].messages) == 11
    assert not any(isinstance(e, CompactionStarted) for e in events)


async def test_a_tool_naming_its_child_loop_is_linked_in_the_end_event() -> None:
    @tool
    def delegate() -> ToolResult:
        """Pretend to run a sub-agent."""
        return ToolResult.text("child said hi", details={"child_loop_id": "child.loop.1"})

    events: list[Any] = []
    await agent_loop(
        "go",
        AgentContext(tools=[delegate]),
        AgentLoopConfig(provider=ScriptedProvider([Reply(tool_calls=[call("delegate")]), "ok"])),
        events=events.append,
    )
    end = next(e for e in events if isinstance(e, ToolExecutionEnd))
    assert end.child_loop_id == "child.loop.1"
