"""Input filters (study §4.3), steering and follow-ups (§1.7) and queue modes."""

from __future__ import annotations

from typing import Any

from phi_core.events import InputRejected
from phi_core.loop import (
    AgentContext,
    AgentLoopConfig,
    FilterResult,
    MessageQueue,
    agent_loop,
)
from phi_core.providers import RetryPolicy
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import ToolContext, tool
from phi_core.types import AssistantMessage, ImageContent, TextContent, UserMessage


def kinds(events: list[Any]) -> list[str]:
    return [e.type for e in events]


def cfg(provider: ScriptedProvider, **kw: Any) -> AgentLoopConfig:
    return AgentLoopConfig(provider=provider, retry=RetryPolicy.none(), **kw)


async def test_pass_filter_runs_normally() -> None:
    result = await agent_loop(
        "hi",
        AgentContext(),
        cfg(ScriptedProvider(["ok"]), input_filters=[lambda t: FilterResult.allow()]),
    )
    assert result.text == "ok"


async def test_warnings_are_appended_to_the_last_user_message() -> None:
    provider = ScriptedProvider(["ok"])
    filters = [lambda t: FilterResult.warn("warn1"), lambda t: FilterResult.warn("warn2")]
    context = AgentContext()
    await agent_loop("careful", context, cfg(provider, input_filters=filters))
    prompt = context.messages[0]
    assert isinstance(prompt, UserMessage)
    assert prompt.content[-1] == TextContent(text="[Warning: warn1]\n[Warning: warn2]")
    # The model saw the warning too.
    assert provider.requests[0].messages[0].content[-1].text.startswith("[Warning: warn1]")  # type: ignore[union-attr]


async def test_reject_keeps_the_context_empty_and_emits_input_rejected() -> None:
    events: list[Any] = []
    context = AgentContext()
    result = await agent_loop(
        "bad",
        context,
        cfg(ScriptedProvider(["x"]), input_filters=[lambda t: FilterResult.reject("blocked")]),
        events=events.append,
    )
    assert result.messages == [] and context.messages == []
    assert result.reason == "rejected" and result.rejection == "blocked"
    assert kinds(events) == ["agent_start", "input_rejected", "agent_end"]
    assert events[-1].messages == [] and events[-1].rejection == "blocked"


async def test_first_reject_wins_and_later_filters_are_not_called() -> None:
    counts = [0, 0]

    def first(text: str) -> FilterResult:
        counts[0] += 1
        return FilterResult.reject("no")

    async def second(text: str) -> FilterResult:
        counts[1] += 1
        return FilterResult.allow()

    await agent_loop(
        "x", AgentContext(), cfg(ScriptedProvider(["x"]), input_filters=[first, second])
    )
    assert counts == [1, 0]


async def test_filters_see_only_user_text_blocks() -> None:
    seen: list[str] = []

    def spy(text: str) -> FilterResult:
        seen.append(text)
        return FilterResult.allow()

    prompt = UserMessage(
        content=[
            TextContent(text="Check this image"),
            ImageContent(data="aGVsbG8=", mime_type="image/png"),
        ]
    )
    await agent_loop([prompt], AgentContext(), cfg(ScriptedProvider(["x"]), input_filters=[spy]))
    assert seen == ["Check this image"]


async def test_rejected_initial_steering_ends_before_any_turn() -> None:
    queue = MessageQueue()
    queue.push("tell me the SECRET")
    events: list[Any] = []

    def no_secrets(text: str) -> FilterResult:
        return FilterResult.reject("secret") if "SECRET" in text else FilterResult.allow()

    await agent_loop(
        "hello",
        AgentContext(),
        cfg(ScriptedProvider(["x"]), input_filters=[no_secrets], get_steering_messages=queue.get),
        events=events.append,
    )
    assert any(isinstance(e, InputRejected) for e in events)
    assert "turn_start" not in kinds(events)


async def test_warned_steering_message_is_in_the_context_with_its_warning() -> None:
    queue = MessageQueue()
    queue.push("steer left")

    def warn_steer(text: str) -> FilterResult:
        return FilterResult.warn("careful") if "steer" in text else FilterResult.allow()

    context = AgentContext()
    await agent_loop(
        "start",
        context,
        cfg(
            ScriptedProvider(["a", "b"]),
            input_filters=[warn_steer],
            get_steering_messages=queue.get,
        ),
    )
    steer = [
        m for m in context.messages if isinstance(m, UserMessage) and "steer left" in str(m.content)
    ]
    assert steer and steer[0].content[-1] == TextContent(text="[Warning: careful]")


async def test_rejected_follow_up_after_a_completed_turn() -> None:
    follow = MessageQueue()
    follow.push("do something FORBIDDEN")
    events: list[Any] = []

    def f(text: str) -> FilterResult:
        return FilterResult.reject("nope") if "FORBIDDEN" in text else FilterResult.allow()

    result = await agent_loop(
        "hi",
        AgentContext(),
        cfg(ScriptedProvider(["a", "b"]), input_filters=[f], get_follow_up_messages=follow.get),
        events=events.append,
    )
    order = kinds(events)
    assert order.count("turn_start") == 1
    assert order.index("turn_end") < order.index("input_rejected") < order.index("agent_end")
    assert result.reason == "rejected"


async def test_warned_follow_up_is_injected_into_a_new_turn() -> None:
    follow = MessageQueue()
    follow.push("one more thing")
    context = AgentContext()
    await agent_loop(
        "hi",
        context,
        cfg(
            ScriptedProvider(["a", "b"]),
            input_filters=[
                lambda t: FilterResult.warn("w") if "more" in t else FilterResult.allow()
            ],
            get_follow_up_messages=follow.get,
        ),
    )
    assert sum(isinstance(m, AssistantMessage) for m in context.messages) == 2
    injected = context.messages[2]
    assert isinstance(injected, UserMessage) and injected.content[-1].text == "[Warning: w]"  # type: ignore[union-attr]
    assert injected.turn_id is not None and injected.turn_id.turn_index == 1


def test_queue_modes_hand_out_one_or_all() -> None:
    one = MessageQueue("one_at_a_time")
    every = MessageQueue("all")
    for q in (one, every):
        q.push("a")
        q.push("b")
    assert len(one.get()) == 1 and len(one.get()) == 1 and one.get() == []
    assert len(every.get()) == 2 and every.get() == []


async def test_steering_during_sequential_tools_skips_the_remaining_calls() -> None:
    queue = MessageQueue()
    ran: list[str] = []

    @tool
    def step(name: str) -> str:
        """Record a step."""
        ran.append(name)
        if name == "first":
            queue.push("stop and do this instead")
        return name

    provider = ScriptedProvider(
        [
            Reply(tool_calls=[call("step", {"name": "first"}), call("step", {"name": "second"})]),
            "ok",
        ]
    )
    context = AgentContext(tools=[step])
    await agent_loop(
        "go",
        context,
        cfg(provider, tool_execution="sequential", get_steering_messages=queue.get),
    )
    assert ran == ["first"]
    results = [m for m in context.messages if m.role == "tool_result"]
    assert [r.is_error for r in results] == [False, True]  # type: ignore[union-attr]
    assert "Skipped" in results[1].content[0].text  # type: ignore[union-attr]
    # The steering message is the first thing of the next turn, right after the tool results.
    assert [m.role for m in provider.requests[1].messages] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "user",
    ]


async def test_tool_progress_reports_carry_the_tool_name() -> None:
    @tool
    async def progress_msg_tool(ctx: ToolContext) -> str:
        """Reports progress."""
        ctx.progress("Working...")
        return "done"

    @tool
    async def quiet() -> str:
        """Says nothing."""
        return "q"

    events: list[Any] = []
    await agent_loop(
        "go",
        AgentContext(tools=[progress_msg_tool, quiet]),
        cfg(ScriptedProvider([Reply(tool_calls=[call("progress_msg_tool"), call("quiet")]), "ok"])),
        events=events.append,
    )
    progress = [e for e in events if e.type == "progress_message"]
    assert [(p.tool_name, p.text) for p in progress] == [("progress_msg_tool", "Working...")]
