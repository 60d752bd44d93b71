"""The loop against a red-team pass (s18): what earlier tool calls of a turn spent, cached tokens
under ``max_total_tokens``, ``ctx.update`` from a sync tool, tool-call ids repeated across turns,
a turn mixing caller tools with the run's own, ``max_duration`` over hooks, ``transform_context``
and compaction, and stray ``CancelledError`` from hooks and the approver."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, ClassVar

import pytest

from phi_core.context import CompactionConfig, ExecutionLimits
from phi_core.context.limits import LimitsLeft
from phi_core.events import AgentEnd, ProgressMessage, ToolExecutionEnd, ToolExecutionUpdate
from phi_core.loop import AgentContext, AgentLoopConfig, Batched, LoopHooks, agent_loop
from phi_core.providers.base import StreamRequest
from phi_core.testing import Hang, Reply, ScriptedProvider, call
from phi_core.tools import ToolContext, tool
from phi_core.types import AgentMessage, ToolDefinition, Usage


def paired(events: list[Any]) -> bool:
    kinds = Counter(e.type for e in events)
    return kinds["agent_end"] == 1 and all(
        kinds[f"{what}_start"] == kinds[f"{what}_end"]
        for what in ("turn", "message", "tool_execution")
    )


def valid_pairs(request: StreamRequest, *, pending_last: bool = False) -> bool:
    """Every tool result follows its call, every call has one result, and ids are unique
    (``pending_last``: the last assistant message's calls are for the caller)."""
    calls: list[str] = []
    answered: list[str] = []
    for message in request.messages:
        if message.role == "assistant":
            calls.extend(c.id for c in message.tool_calls)
        elif message.role == "tool_result":
            if message.tool_call_id not in calls:
                return False
            answered.append(message.tool_call_id)
    unique = len(set(calls)) == len(calls) and len(set(answered)) == len(answered)
    return unique and (pending_last or set(calls) == set(answered))


async def stray_cancel(*_args: Any) -> Any:
    """Raise a CancelledError although nothing cancels the task (it awaited a future someone
    else cancelled)."""
    future = asyncio.get_running_loop().create_future()
    future.cancel()
    return await future


async def hang(*_args: Any) -> Any:
    await asyncio.Event().wait()


# ---------------------------------------------------------------- 1: live allowance in a turn


class Spender:
    """Reports ``spend`` tokens through ``ctx.add_usage`` and records the allowance it saw."""

    description = "spends"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    spends_limits = True

    def __init__(self, name: str, spend: int, seen: dict[str, LimitsLeft | None]) -> None:
        self.name, self.spend, self.seen = name, spend, seen

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.seen[ctx.tool_call_id] = ctx.limits_left
        await asyncio.sleep(0)
        ctx.add_usage(Usage(input=self.spend - 100, output=100), 0.01)
        return "spent"


@pytest.mark.parametrize("strategy", ["sequential", Batched(1), Batched(2)])
async def test_a_tool_call_sees_what_earlier_calls_of_its_turn_spent(strategy, strict_loop):
    seen: dict[str, LimitsLeft | None] = {}
    spender = Spender("spend", 1000, seen)
    reply = Reply(
        tool_calls=[call("spend", id=f"s{i}") for i in range(3)], usage=Usage(input=50, output=50)
    )
    provider = ScriptedProvider([reply, "done"])
    limits = ExecutionLimits(max_total_tokens=10_000, max_cost=1.0)
    result = await agent_loop(
        "go",
        AgentContext(tools=[spender]),
        AgentLoopConfig(provider=provider, tool_execution=strategy, limits=limits),
    )
    assert result.ok
    tokens = {k: v.tokens for k, v in seen.items() if v is not None}
    costs = {k: round(v.cost or 0, 6) for k, v in seen.items() if v is not None}
    if strategy == Batched(2):
        # s0 and s1 share the batch equally; s2 (a batch of its own) sees what they spent
        assert tokens == {"s0": 4950, "s1": 4950, "s2": 7900}
        assert costs["s2"] == 0.98
    else:
        assert tokens == {"s0": 9900, "s1": 8900, "s2": 7900}
        assert costs == {"s0": 1.0, "s1": 0.99, "s2": 0.98}


async def test_a_parallel_batch_keeps_equal_shares_of_what_was_left_when_it_started(strict_loop):
    seen: dict[str, LimitsLeft | None] = {}
    spender = Spender("spend", 3000, seen)
    reply = Reply(
        tool_calls=[call("spend", id=f"p{i}") for i in range(4)], usage=Usage(input=50, output=50)
    )
    result = await agent_loop(
        "go",
        AgentContext(tools=[spender]),
        AgentLoopConfig(
            provider=ScriptedProvider([reply, "done"]),
            limits=ExecutionLimits(max_total_tokens=10_000),
        ),
    )
    assert result.reason == "limit"  # the four together spent more than the limit has left
    # every call got a quarter of what was left when the batch started, whichever ran first
    assert {k: v.tokens for k, v in seen.items() if v is not None} == dict.fromkeys(
        ["p0", "p1", "p2", "p3"], 2475
    )


# ---------------------------------------------------------------- 3: cached tokens count


async def test_cached_prompt_tokens_count_against_max_total_tokens(strict_loop):
    cached = Usage(input=5, cache_read=900, output=5)
    provider = ScriptedProvider([], default=Reply(tool_calls=[call("noop")], usage=cached))

    @tool
    def noop() -> str:
        """Do nothing."""
        return "ok"

    result = await agent_loop(
        "loop",
        AgentContext(tools=[noop]),
        AgentLoopConfig(
            provider=provider, limits=ExecutionLimits(max_turns=30, max_total_tokens=5000)
        ),
    )
    assert result.reason == "limit" and result.error is not None
    assert "Max tokens reached" in result.error
    assert len(provider.requests) == 6  # 6 x 910 passes 5000: no seventh turn


async def test_a_tools_cached_tokens_count_against_max_total_tokens(strict_loop):
    @tool
    def delegate(ctx: ToolContext) -> str:
        """Report a sub-agent's usage, mostly cached input."""
        ctx.add_usage(Usage(input=10, cache_read=6000, cache_write=100, output=10))
        return "delegated"

    provider = ScriptedProvider([Reply(tool_calls=[call("delegate")])], default="more")
    result = await agent_loop(
        "go",
        AgentContext(tools=[delegate]),
        AgentLoopConfig(provider=provider, limits=ExecutionLimits(max_total_tokens=6000)),
    )
    assert result.reason == "limit" and len(provider.requests) == 1


# ---------------------------------------------------------------- 4: updates from a sync tool


async def test_a_sync_tool_streams_updates_and_progress_from_its_thread(strict_loop):
    @tool
    def build(ctx: ToolContext) -> str:
        """Build, streaming the log (sync: runs in a worker thread)."""
        for step in ("compile", "link"):
            ctx.progress(f"{step} step")
            ctx.update(f"{step}...\n")
        return "built"

    events: list[Any] = []
    result = await agent_loop(
        "build it",
        AgentContext(tools=[build]),
        AgentLoopConfig(provider=ScriptedProvider([Reply(tool_calls=[call("build")]), "ok"])),
        events=events.append,
    )
    [tool_result] = [m for m in result.messages if m.role == "tool_result"]
    assert not tool_result.is_error and tool_result.content[0].text == "built"
    shown = [
        (e.type, None if isinstance(e, ToolExecutionEnd) else e.text)
        for e in events
        if isinstance(e, ToolExecutionUpdate | ToolExecutionEnd | ProgressMessage)
    ]
    # each kind in order (updates pass the update hooks, progress lines do not), all before
    # the call's end
    assert [t for k, t in shown if k == "progress_message"] == ["compile step", "link step"]
    assert [t for k, t in shown if k == "tool_execution_update"] == ["compile...\n", "link...\n"]
    assert shown[-1] == ("tool_execution_end", None) and len(shown) == 5


# ---------------------------------------------------------------- 5: ids across turns


async def test_tool_call_ids_repeated_across_turns_get_ids_of_their_own(strict_loop):
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    provider = ScriptedProvider(
        [
            Reply(tool_calls=[call("add", {"a": 1, "b": 2}, id="call_0")]),
            Reply(tool_calls=[call("add", {"a": 3, "b": 4}, id="call_0")]),
            "done",
        ]
    )
    result = await agent_loop(
        "add twice", AgentContext(tools=[add]), AgentLoopConfig(provider=provider)
    )
    assert result.ok
    last = provider.requests[-1]
    assert valid_pairs(last)
    pairs = [(m.tool_call_id, m.content[0].text) for m in last.messages if m.role == "tool_result"]
    assert pairs == [("call_0", "3"), ("call_0_2", "7")]


# ---------------------------------------------------------------- 6: caller tools mixed


async def test_a_turn_mixing_caller_and_own_tools_runs_the_own_and_asks_again(strict_loop):
    ran: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append(a + b)
        return a + b

    weather = ToolDefinition(
        name="get_weather",
        description="The caller's tool",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    provider = ScriptedProvider(
        [
            Reply(
                tool_calls=[
                    call("add", {"a": 1, "b": 2}, id="c_add"),
                    call("get_weather", {"city": "Oslo"}, id="c_w"),
                ]
            ),
            Reply(tool_calls=[call("get_weather", {"city": "Oslo"}, id="c_w2")]),
            "never asked",
        ]
    )
    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(tools=[add]),
        AgentLoopConfig(provider=provider, caller_tools=[weather]),
        events=events.append,
    )
    assert result.reason == "completed" and ran == [3]
    second = provider.requests[1]
    assert valid_pairs(second)
    refusal = next(
        m for m in second.messages if m.role == "tool_result" and m.tool_call_id == "c_w"
    )
    assert refusal.is_error and "in a turn of its own" in refusal.content[0].text
    # the run ends on a turn that calls the caller's tool alone: all it hands over
    last = result.messages[-1]
    assert last.role == "assistant"
    assert [c.id for c in last.tool_calls] == ["c_w2"]
    assert len(provider.requests) == 2 and paired(events)


# ---------------------------------------------------------------- 7: max_duration bounds all


class HangingStrategy:
    def compact(self, messages: list[AgentMessage], config: CompactionConfig) -> Any:
        return hang()


@pytest.mark.parametrize(
    ("setting", "where"),
    [
        ({"transform_context": hang}, "while the request was built"),
        (
            {"compaction": CompactionConfig(max_context_tokens=50, strategy=HangingStrategy())},
            "while the request was built",
        ),
        ({"hooks": LoopHooks(before_turn=hang)}, "in the before_turn hook"),
        ({"hooks": LoopHooks(before_loop=hang)}, "in the before_loop hook"),
        ({"hooks": LoopHooks(after_turn=hang)}, "in the after_turn hook"),
        ({"get_follow_up_messages": hang}, "follow-up messages"),
        ({"hooks": LoopHooks(before_compaction_start=hang)}, "while the request was built"),
        ({"input_filters": [hang]}, "in an input filter"),
        ({"get_steering_messages": hang}, "steering messages"),
    ],
)
async def test_max_duration_ends_a_run_stuck_outside_model_calls_and_tools(
    setting, where, strict_loop
):
    if "hooks" in setting and setting["hooks"].before_compaction_start is not None:
        setting = {**setting, "compaction": CompactionConfig(max_context_tokens=50)}
    events: list[Any] = []
    config = AgentLoopConfig(
        provider=ScriptedProvider(["hi " * 100]),
        limits=ExecutionLimits(max_duration=0.3),
        **setting,
    )
    # a bounded wait: a run that ignored its deadline fails here instead of hanging the suite
    result = await asyncio.wait_for(
        agent_loop("go " * 100, AgentContext(), config, events=events.append), 30
    )
    assert result.reason == "limit" and result.error is not None, result
    assert "Max duration reached" in result.error and where in result.error
    assert paired(events) and isinstance(events[-1], AgentEnd)


async def test_a_hanging_after_loop_hook_is_cancelled_after_the_agent_end(strict_loop):
    events: list[Any] = []
    config = AgentLoopConfig(
        provider=ScriptedProvider(["hi"]),
        limits=ExecutionLimits(max_duration=0.3),
        hooks=LoopHooks(after_loop=hang),
    )
    result = await asyncio.wait_for(
        agent_loop("go", AgentContext(), config, events=events.append), 30
    )
    assert result.reason == "completed" and paired(events)  # its AgentEnd came first


async def test_observer_hooks_still_run_when_the_run_ends_on_its_deadline(strict_loop):
    observed: list[str] = []

    async def observe(name: str) -> None:
        await asyncio.sleep(0)  # a hook that awaits something (a write, a post) still finishes
        observed.append(name)

    hooks = LoopHooks(
        on_error=lambda _error: observe("on_error"),
        after_turn=lambda _messages, _usage: observe("after_turn"),
        after_loop=lambda _messages, _usage: observe("after_loop"),
    )
    config = AgentLoopConfig(
        provider=ScriptedProvider([Hang()]), limits=ExecutionLimits(max_duration=0.3), hooks=hooks
    )
    result = await asyncio.wait_for(agent_loop("go", AgentContext(), config), 30)
    assert result.reason == "limit" and result.error is not None
    assert "mid-stream" in result.error
    assert observed == ["on_error", "after_turn", "after_loop"]


# ---------------------------------------------------------------- 8: stray CancelledError


@pytest.mark.parametrize("hook", ["before_loop", "before_turn"])
async def test_a_stray_cancelled_error_from_a_gate_hook_is_that_hooks_failure(hook, strict_loop):
    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(),
        AgentLoopConfig(provider=ScriptedProvider(["hi"]), hooks=LoopHooks(**{hook: stray_cancel})),
        events=events.append,
    )
    assert result.reason == "error" and result.error_kind == "hook"
    assert result.error == f"The {hook} hook raised: CancelledError"
    assert sum(isinstance(e, AgentEnd) for e in events) == 1


@pytest.mark.parametrize(
    "hook", ["before_tool_execution", "after_tool_execution", "after_turn", "approver"]
)
async def test_a_stray_cancelled_error_from_a_tool_hook_or_approver_leaves_the_run(
    hook, strict_loop
):
    @tool(needs_approval=True)
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    provider = ScriptedProvider([Reply(tool_calls=[call("add", {"a": 1, "b": 2})]), "3"])
    events: list[Any] = []
    approver: Any = stray_cancel if hook == "approver" else (lambda _request: True)
    hooks = LoopHooks() if hook == "approver" else LoopHooks(**{hook: stray_cancel})
    result = await agent_loop(
        "add",
        AgentContext(tools=[add]),
        AgentLoopConfig(provider=provider, hooks=hooks, approver=approver),
        events=events.append,
    )
    assert result.reason == "completed" and result.text == "3" and paired(events)
    [tool_result] = [m for m in result.messages if m.role == "tool_result"]
    if hook in ("before_tool_execution", "approver"):
        assert tool_result.is_error and "CancelledError" in tool_result.content[0].text
    else:
        assert not tool_result.is_error
        assert any(e.type == "warning" and "CancelledError" in e.message for e in events)


async def test_cancelling_the_run_while_a_hook_waits_still_cancels_it(strict_loop):
    entered = asyncio.Event()

    async def waiting(*_args: Any) -> None:
        entered.set()
        await asyncio.Event().wait()

    events: list[Any] = []
    task = asyncio.create_task(
        agent_loop(
            "go",
            AgentContext(),
            AgentLoopConfig(
                provider=ScriptedProvider(["hi"]), hooks=LoopHooks(before_turn=waiting)
            ),
            events=events.append,
        )
    )
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    ends = [e for e in events if isinstance(e, AgentEnd)]
    assert len(ends) == 1 and ends[0].reason == "cancelled"
