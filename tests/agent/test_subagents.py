"""SubAgentTool from Python: builder, events to the parent's sink, usage, cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phi_core.agent import BasicAgent
from phi_core.errors import UserError
from phi_core.events import (
    AgentEnd,
    AgentStart,
    MessageUpdate,
    ProgressMessage,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
)
from phi_core.providers import RetryPolicy
from phi_core.sessions import SessionRecorder
from phi_core.subagents import SubAgentTool
from phi_core.testing import Hang, Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import Usage


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return f"echoed: {text}"


def researcher(provider: ScriptedProvider) -> SubAgentTool:
    return (
        SubAgentTool("researcher", "child:m", provider=provider)
        .with_description("Finds things.")
        .with_system_prompt("You research.")
        .with_tools([echo])
        .with_max_turns(4)
        .with_retry(RetryPolicy.none())
    )


async def test_child_events_reach_the_parent_sink_with_the_child_loop_id_and_parent_link() -> None:
    child = ScriptedProvider(
        [
            Reply(tool_calls=[call("echo", {"text": "hi"})], usage=Usage(input=100, output=10)),
            Reply("Sub-agent done: 42", chunks=3, usage=Usage(input=200, output=20)),
        ]
    )
    parent = ScriptedProvider(
        [
            Reply(
                tool_calls=[call("researcher", {"task": "find 42"})],
                usage=Usage(input=50, output=5),
            ),
            Reply("The answer is 42.", usage=Usage(input=60, output=6)),
        ]
    )
    agent = (
        BasicAgent(provider=parent).with_sub_agent(researcher(child)).with_retry(RetryPolicy.none())
    )
    agent.with_session_recorder(SessionRecorder())
    events = [e async for e in agent.prompt("delegate")]
    parent_id = agent.last_loop_id
    starts = [e for e in events if isinstance(e, AgentStart)]
    assert len(starts) == 2
    child_start = next(e for e in starts if e.loop_id != parent_id)
    assert child_start.parent_loop_id == parent_id and child_start.loop_id.endswith(".sub.1")
    child_id = child_start.loop_id
    child_kinds = {type(e) for e in events if e.loop_id == child_id}
    assert {MessageUpdate, ToolExecutionStart, ToolExecutionEnd, AgentEnd} <= child_kinds
    updates = "".join(
        e.text for e in events if isinstance(e, ToolExecutionUpdate) and e.loop_id == parent_id
    )
    assert updates == "Sub-agent done: 42"
    progress = [e.text for e in events if isinstance(e, ProgressMessage) and e.loop_id == parent_id]
    assert progress == ["researcher: calling echo"]
    end = next(e for e in events if isinstance(e, ToolExecutionEnd) and e.loop_id == parent_id)
    assert end.child_loop_id == child_id
    # the child's usage is in the parent's totals
    final = events[-1]
    assert isinstance(final, AgentEnd) and final.loop_id == parent_id
    assert (final.usage.input, final.usage.output) == (50 + 60 + 100 + 200, 5 + 6 + 10 + 20)
    # the recorder linked both sessions
    assert agent.recorder is not None
    [child_session] = [s for s in agent.recorder.all_sessions() if s.session_id != agent.session_id]
    assert child_session.parent_spawn_ref is not None
    assert child_session.parent_spawn_ref.parent_loop_id == parent_id
    assert child.requests[0].system_prompt == "You research."


async def test_cancelling_the_parent_cancels_the_child(strict_loop: Any) -> None:
    child = ScriptedProvider([Hang("thinking")])
    parent = ScriptedProvider([Reply(tool_calls=[call("researcher", {"task": "t"})]), "never"])
    agent = BasicAgent(provider=parent).with_sub_agent(researcher(child))
    ends: list[AgentEnd] = []
    seen_child = asyncio.Event()

    def listen(event: Any) -> None:
        if isinstance(event, AgentEnd):
            ends.append(event)
        if isinstance(event, MessageUpdate) and event.loop_id.endswith(".sub.1"):
            seen_child.set()

    agent.subscribe(listen)
    run = asyncio.ensure_future(agent.prompt("go").result())
    await seen_child.wait()
    agent.abort()
    result = await run
    assert result.reason == "cancelled"
    assert sorted(e.reason for e in ends) == ["cancelled", "cancelled"]
    assert len({e.loop_id for e in ends}) == 2


async def test_a_failing_child_is_an_error_result_and_the_turn_limit_holds() -> None:
    child = ScriptedProvider(default=Reply(tool_calls=[call("echo", {"text": "again"})]))
    parent = ScriptedProvider([Reply(tool_calls=[call("researcher", {"task": "loop"})]), "ok"])
    agent = BasicAgent(provider=parent).with_sub_agent(researcher(child).with_max_turns(2))
    result = await agent.prompt("go")
    tool_result = agent.messages[2]
    assert tool_result.role == "tool_result" and tool_result.is_error  # type: ignore[union-attr]
    assert "Max turns reached (2/2)" in tool_result.content[0].text  # type: ignore[union-attr]
    assert child.calls == 2 and result.text == "ok"


async def test_an_unset_model_runs_on_the_parent_model() -> None:
    shared = ScriptedProvider(
        [Reply(tool_calls=[call("helper", {"task": "x"})]), "child says hi", "done"]
    )
    agent = BasicAgent("shared:m", provider=shared).with_sub_agent(SubAgentTool("helper"))
    result = await agent.prompt("go")
    assert result.text == "done" and shared.calls == 3
    assert agent.messages[2].content[0].text == "child says hi"  # type: ignore[union-attr]


def test_sub_agents_do_not_nest_and_names_are_checked() -> None:
    inner = SubAgentTool("inner")
    with pytest.raises(UserError, match="do not nest"):
        SubAgentTool("outer").with_tools([inner])
    with pytest.raises(UserError, match="1-64 letters"):
        SubAgentTool("has space")
    with pytest.raises(UserError, match="max_turns must be an integer >= 1, got 0"):
        SubAgentTool("x").with_max_turns(0)
    agent = BasicAgent("scripted:m").with_tools([echo])
    with pytest.raises(UserError, match="already has a tool named 'echo'"):
        agent.with_sub_agent(SubAgentTool("echo"))
    with pytest.raises(UserError, match="takes a SubAgentTool"):
        agent.with_sub_agent(echo)  # type: ignore[arg-type]


async def test_from_agent_copies_model_prompt_and_tools() -> None:
    provider = ScriptedProvider(["from the template"])
    template = BasicAgent("t:m", provider=provider, system_prompt="Be a template.").with_tools(
        [echo]
    )
    sub = SubAgentTool.from_agent("templ", template, "Uses the template.")
    assert sub.description == "Uses the template." and [t.name for t in sub.tools] == ["echo"]
    parent = ScriptedProvider([Reply(tool_calls=[call("templ", {"task": "go"})]), "ok"])
    await BasicAgent(provider=parent).with_sub_agent(sub).prompt("x")
    assert provider.requests[0].system_prompt == "Be a template."


async def test_a_sub_agent_inside_a_race_branch_keeps_the_branch_accounting_right() -> None:
    from phi_core.loop import AgentContext, AgentLoopConfig
    from phi_core.parallel import PickFirstEvaluation, agent_loop_parallel

    child = ScriptedProvider([Reply("found it", usage=Usage(input=30, output=3))])
    branch = ScriptedProvider(
        [
            Reply(tool_calls=[call("researcher", {"task": "t"})], usage=Usage(input=10, output=1)),
            Reply("done", usage=Usage(input=20, output=2)),
        ]
    )
    config = AgentLoopConfig(model="b:m", provider=branch)
    events: list[Any] = []
    result = await agent_loop_parallel(
        "go",
        AgentContext(tools=[researcher(child)]),
        [config],
        PickFirstEvaluation(),
        events=events.append,
    )
    winner = result.selected
    assert winner is not None and winner.ok and winner.text == "done"
    assert (winner.usage.input, winner.usage.output) == (60, 6)  # the child's usage included
    ends = [e for e in events if isinstance(e, AgentEnd)]
    assert [e.loop_id.endswith(".sub.1") for e in ends] == [True, False]
    assert ends[-1].loop_id == winner.loop_id
