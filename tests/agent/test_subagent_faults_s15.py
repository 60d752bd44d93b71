"""Sub-agent faults: queues of a ``from_agent`` clone, usage of a child that does not finish,
the parent's limits, and nesting enforced when a sub-agent runs."""

from __future__ import annotations

import asyncio
from typing import Any

from phi_core.agent import BasicAgent
from phi_core.cancel import CancelToken
from phi_core.context.limits import ExecutionLimits
from phi_core.events import AgentEnd, ToolExecutionEnd
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import RetryPolicy
from phi_core.subagents import SubAgentTool
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import ToolContext, tool
from phi_core.types import Usage, message_text

SPENT = Usage(input=5000, output=1000)


def config(provider: ScriptedProvider, **changes: Any) -> AgentLoopConfig:
    return AgentLoopConfig(provider=provider, retry=RetryPolicy.none(), **changes)


def texts(provider: ScriptedProvider) -> list[str]:
    return [message_text(m) for request in provider.requests for m in request.messages]


# ---------------------------------------------------------------- from_agent and the queues


async def test_a_from_agent_clone_leaves_the_agents_steering_and_follow_ups_to_it() -> None:
    host_provider = ScriptedProvider(
        [
            Reply(tool_calls=[call("clone", {"task": "research"})]),
            "host saw the steering",
            "host saw the follow-up",
        ]
    )
    host = BasicAgent(provider=host_provider).with_retry(RetryPolicy.none())

    @tool
    def poke() -> str:
        """Send the host messages while the clone runs."""
        host.steer("HOST STEER")
        host.follow_up("HOST FOLLOW-UP")
        return "poked"

    host.with_tools([poke])
    clone_provider = ScriptedProvider(
        [Reply(tool_calls=[call("poke", {})]), "clone done"], default="clone answers more"
    )
    clone = SubAgentTool.from_agent("clone", host).with_provider(clone_provider)
    host.with_sub_agent(clone)

    result = await asyncio.wait_for(host.prompt("start").result(), 20)

    assert result.ok
    assert clone_provider.calls == 2
    assert not any("HOST" in text for text in texts(clone_provider))
    host_texts = texts(host_provider)
    assert "HOST STEER" in host_texts and "HOST FOLLOW-UP" in host_texts
    assert host_provider.calls == 3


def test_build_config_overrides_may_replace_the_queues() -> None:
    agent = BasicAgent(provider=ScriptedProvider(["x"]))
    assert agent.build_config().get_steering_messages is not None
    bare = agent.build_config(get_steering_messages=None, get_follow_up_messages=None)
    assert bare.get_steering_messages is None and bare.get_follow_up_messages is None


# ---------------------------------------------------------------- usage of an unfinished child


async def test_a_timed_out_childs_usage_counts_in_the_parents_totals() -> None:
    @tool
    async def hang() -> str:
        """Never finishes."""
        await asyncio.sleep(100)
        return "never"

    child = ScriptedProvider([Reply(tool_calls=[call("hang", {})], usage=SPENT), "unreached"])
    sub = SubAgentTool("helper", provider=child, tools=[hang]).with_timeout(0.3)
    parent = ScriptedProvider(
        [
            Reply(tool_calls=[call("helper", {"task": "t"})], usage=Usage(input=10, output=10)),
            Reply("done", usage=Usage(input=10, output=10)),
        ]
    )
    events: list[Any] = []
    context = AgentContext(tools=[sub])
    result = await asyncio.wait_for(
        agent_loop("go", context, config(parent), events=events.append), 20
    )

    assert result.ok
    [tool_end] = [
        e for e in events if isinstance(e, ToolExecutionEnd) and e.loop_id == result.loop_id
    ]
    assert "timed out" in message_text(tool_end.result)
    [child_end] = [e for e in events if isinstance(e, AgentEnd) and e.loop_id != result.loop_id]
    assert child_end.reason == "cancelled" and child_end.usage.input == 5000
    assert (result.usage.input, result.usage.output) == (5020, 1020)
    assert events[-1].usage == result.usage


async def test_a_cancelled_parent_still_counts_what_its_child_spent() -> None:
    token = CancelToken()

    @tool
    async def hang() -> str:
        """Cancels the parent, then waits."""
        token.cancel()
        await asyncio.sleep(100)
        return "never"

    child = ScriptedProvider([Reply(tool_calls=[call("hang", {})], usage=SPENT), "unreached"])
    sub = SubAgentTool("helper", provider=child, tools=[hang])
    parent = ScriptedProvider(
        [Reply(tool_calls=[call("helper", {"task": "t"})], usage=Usage(input=10, output=10))]
    )
    events: list[Any] = []
    result = await asyncio.wait_for(
        agent_loop(
            "go", AgentContext(tools=[sub]), config(parent), events=events.append, cancel=token
        ),
        20,
    )

    assert result.reason == "cancelled"
    assert (result.usage.input, result.usage.output) == (5010, 1010)
    parent_end = events[-1]
    assert isinstance(parent_end, AgentEnd) and parent_end.loop_id == result.loop_id
    assert parent_end.usage == result.usage


async def test_a_finished_childs_usage_counts_once() -> None:
    child = ScriptedProvider([Reply("partial", usage=Usage(input=100, output=1))])
    sub = SubAgentTool("helper", provider=child).with_limits(ExecutionLimits(max_turns=1))
    parent = ScriptedProvider(
        [
            Reply(tool_calls=[call("helper", {"task": "t"})], usage=Usage(input=10, output=1)),
            Reply("done", usage=Usage(input=10, output=1)),
        ]
    )
    result = await agent_loop("go", AgentContext(tools=[sub]), config(parent))
    assert (result.usage.input, result.usage.output) == (120, 3)


# ---------------------------------------------------------------- the parent's limits


def _tool_context(usage: list[tuple[Usage, float]], **fields: Any) -> ToolContext:
    ctx = ToolContext(
        tool_call_id="call_1",
        tool_name="helper",
        loop_id="parent-loop",
        cancel=CancelToken(),
        _on_usage=lambda spent, cost: usage.append((spent, cost)),
    )
    for name, value in fields.items():
        setattr(ctx, name, value)  # ``limits_left`` as the calling run gives it
    return ctx


async def test_the_child_runs_within_what_the_parents_limits_have_left() -> None:
    from phi_core.context.limits import LimitsLeft

    child = ScriptedProvider(
        default=Reply(tool_calls=[call("noop", {})], usage=Usage(input=900, output=100))
    )

    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    sub = SubAgentTool("helper", provider=child, tools=[noop], max_turns=8)
    usage: list[tuple[Usage, float]] = []
    ctx = _tool_context(usage, limits_left=LimitsLeft(tokens=1500, cost=None, seconds=None))

    result = await asyncio.wait_for(sub.execute({"task": "t"}, ctx), 20)

    assert result.is_error and "(limit)" in result.content[0].text
    assert child.calls == 2  # 1000 tokens, then 2000 >= 1500: stopped, not 8 turns
    assert [(u.input + u.output) for u, _ in usage] == [2000]
    assert sub.config.limits is not None and sub.config.limits.max_total_tokens == 1_000_000


async def test_the_child_is_not_run_when_the_parents_limits_are_used_up() -> None:
    from phi_core.context.limits import LimitsLeft

    child = ScriptedProvider(["never sent"])
    sub = SubAgentTool("helper", provider=child)
    ctx = _tool_context([], limits_left=LimitsLeft(tokens=0))
    result = await sub.execute({"task": "t"}, ctx)
    assert result.is_error and "max_total_tokens is used up" in result.content[0].text
    assert child.calls == 0


def test_limits_left_keeps_the_tighter_limit_and_the_childs_turns() -> None:
    from phi_core.context.limits import ExecutionTracker, LimitsLeft

    own = ExecutionLimits(max_turns=3, max_total_tokens=500, max_duration=60.0, max_cost=None)
    bounded = LimitsLeft(tokens=2000, cost=0.5, seconds=10.0).bound(own)
    assert bounded == ExecutionLimits(
        max_turns=3, max_total_tokens=500, max_duration=10.0, max_cost=0.5
    )
    assert LimitsLeft().bound(own) is own
    assert LimitsLeft(tokens=7).bound(None) == ExecutionLimits(
        max_turns=None, max_total_tokens=7, max_duration=None, max_cost=None
    )
    assert LimitsLeft(cost=0.0).used_up() == "max_cost"
    tracker = ExecutionTracker(ExecutionLimits(max_total_tokens=1500, max_duration=None))
    tracker.record_turn(400)
    left = tracker.left(pending_tokens=100)
    assert (left.tokens, left.cost, left.seconds) == (1000, None, None)


async def test_the_parents_token_limit_stops_its_sub_agent() -> None:
    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    child = ScriptedProvider(
        default=Reply(tool_calls=[call("noop", {})], usage=Usage(input=900, output=100))
    )
    sub = SubAgentTool("helper", provider=child, tools=[noop], max_turns=8)
    parent = ScriptedProvider(
        [Reply(tool_calls=[call("helper", {"task": "t"})], usage=Usage(input=10, output=10)), "x"]
    )
    result = await agent_loop(
        "go",
        AgentContext(tools=[sub]),
        config(parent, limits=ExecutionLimits(max_total_tokens=1500)),
    )
    assert child.calls == 2
    assert result.reason == "limit"


async def test_sub_agents_called_together_split_what_the_parents_limits_have_left() -> None:
    """The parent has 3000 tokens and has spent 20 when its model calls two sub-agents in one
    batch (run in parallel): each child gets half of the 2980 left and stops after the turn
    that reaches it (two turns of 1000), instead of each seeing all 2980 (three turns each:
    6000 tokens against a 3000-token limit). Called alone, a child sees all that is left."""

    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    limits = ExecutionLimits(max_total_tokens=3000)
    spent = Usage(input=10, output=10)

    async def run(*names: str) -> list[int]:
        children = {
            name: ScriptedProvider(
                default=Reply(tool_calls=[call("noop", {})], usage=Usage(input=900, output=100))
            )
            for name in ("a", "b")
        }
        subs = [SubAgentTool(n, provider=p, tools=[noop], max_turns=8) for n, p in children.items()]
        calls = Reply(tool_calls=[call(n, {"task": "t"}) for n in names], usage=spent)
        parent = ScriptedProvider([calls, "x"])
        await agent_loop("go", AgentContext(tools=subs), config(parent, limits=limits))
        return [children[n].calls for n in names]

    assert await run("a", "b") == [2, 2]
    assert await run("a") == [3]  # 1000, 2000, then 3000 >= 2980: all that was left


# ---------------------------------------------------------------- nesting, enforced at run time


async def test_a_sub_agent_given_itself_is_refused_when_it_runs() -> None:
    selfish_provider = ScriptedProvider(
        [Reply(tool_calls=[call("selfish", {"task": "again"})]) for _ in range(3)]
    )
    selfish = SubAgentTool("selfish", provider=selfish_provider, max_turns=3)
    selfish.tools.append(selfish)  # past with_tools' check
    parent = ScriptedProvider([Reply(tool_calls=[call("selfish", {"task": "go"})]), "done"])
    events: list[Any] = []
    result = await asyncio.wait_for(
        agent_loop("go", AgentContext(tools=[selfish]), config(parent), events=events.append), 20
    )

    assert result.ok
    assert selfish_provider.calls == 0
    [tool_end] = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert tool_end.is_error and "do not nest" in message_text(tool_end.result)
    assert len({e.loop_id for e in events}) == 1


async def test_a_sub_agent_reached_again_through_another_tool_is_refused() -> None:
    child = ScriptedProvider(
        [Reply(tool_calls=[call("relay", {"task": "deeper"})]), "child done", "spare", "spare"]
    )
    sub = SubAgentTool("helper", provider=child)

    @tool
    async def relay(task: str, ctx: ToolContext) -> Any:
        """Hands the task to the helper again."""
        return await sub.execute({"task": task}, ctx)

    sub.with_tools([relay])
    parent = ScriptedProvider([Reply(tool_calls=[call("helper", {"task": "go"})]), "done"])
    result = await asyncio.wait_for(agent_loop("go", AgentContext(tools=[sub]), config(parent)), 20)

    assert result.ok
    assert child.calls == 2
    relayed = [
        m for m in child.requests[1].messages if m.role == "tool_result" and m.tool_name == "relay"
    ]
    assert len(relayed) == 1 and relayed[0].is_error
    assert "already running" in message_text(relayed[0])


async def test_sub_agents_in_parallel_and_one_after_another_still_run() -> None:
    a = ScriptedProvider(["a done", "a again"])
    b = ScriptedProvider(["b done"])
    parent = ScriptedProvider(
        [
            Reply(tool_calls=[call("a", {"task": "1"}), call("b", {"task": "2"})]),
            Reply(tool_calls=[call("a", {"task": "3"})]),
            "done",
        ]
    )
    subs = [SubAgentTool("a", provider=a), SubAgentTool("b", provider=b)]
    result = await agent_loop("go", AgentContext(tools=subs), config(parent))
    assert result.ok and (a.calls, b.calls) == (2, 1)
    results = [message_text(m) for m in result.messages if m.role == "tool_result"]
    assert results == ["a done", "b done", "a again"]
