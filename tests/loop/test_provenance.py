"""TurnRequest provenance: where each message of a request came from."""

from __future__ import annotations

from typing import Any

from phi_core.events import TurnRequest
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import AssistantMessage, TextContent, UserMessage


@tool
def ping() -> str:
    """Ping."""
    return "pong"


async def test_each_message_of_each_request_says_where_it_came_from() -> None:
    steering = [UserMessage.text("steer: be brief")]
    follow_ups = [UserMessage.text("and one more thing")]
    provider = ScriptedProvider([Reply(tool_calls=[call("ping")]), "first answer", "second answer"])
    config = AgentLoopConfig(
        provider=provider,
        get_steering_messages=lambda: [steering.pop()] if steering and provider.calls == 1 else [],
        get_follow_up_messages=lambda: [follow_ups.pop()] if follow_ups else [],
    )
    history = [
        UserMessage.text("earlier"),
        AssistantMessage(content=[TextContent(text="earlier reply")]),
    ]
    events: list[Any] = []
    await agent_loop(
        "question", AgentContext(messages=history, tools=[ping]), config, events=events.append
    )
    requests = [e for e in events if isinstance(e, TurnRequest)]
    assert [len(r.provenance) for r in requests] == [len(r.payload["messages"]) for r in requests]
    assert requests[0].provenance == ["user", "assistant", "user"]
    assert requests[1].provenance == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool_result",
        "steering",
    ]
    assert requests[2].provenance[-2:] == ["assistant", "follow_up"]
    # what the provider got is what the event says
    assert requests[1].payload["messages"][-1]["content"][0]["text"] == "steer: be brief"
    assert provider.requests[1].messages[-1].provenance == "steering"  # type: ignore[union-attr]


async def test_a_sub_agent_task_and_the_limit_notice_are_labelled() -> None:
    from phi_core.context import ExecutionLimits

    provider = ScriptedProvider(default=Reply(tool_calls=[call("ping")]))
    events: list[Any] = []
    context = AgentContext(tools=[ping])
    await agent_loop(
        "task",
        context,
        AgentLoopConfig(
            provider=provider, first_turn_trigger="sub_agent", limits=ExecutionLimits(max_turns=1)
        ),
        events=events.append,
    )
    [request] = [e for e in events if isinstance(e, TurnRequest)]
    assert request.provenance == ["sub_agent"]
    assert context.messages[-1].provenance == "limit"  # type: ignore[union-attr]
