"""BasicAgent behaviour (study §4.11, §4.10 item 5, §3.11) and the fixes over phi-core."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from phi_core.agent import AgentBusyError, BasicAgent
from phi_core.context import ExecutionLimits
from phi_core.context.compaction import CompactionConfig
from phi_core.errors import UserError
from phi_core.events import (
    AgentEnd,
    AgentStart,
    CompactionEnded,
    CompactionStarted,
    MessageUpdate,
    ToolExecutionUpdate,
)
from phi_core.loop import AgentLoopConfig
from phi_core.parallel import LlmJudgeEvaluation, PickFirstEvaluation
from phi_core.providers import RetryPolicy
from phi_core.sessions import JsonFileSessionStore, SessionRecorder
from phi_core.testing import Hang, Reply, ScriptedProvider, call
from phi_core.tools import ToolContext, tool
from phi_core.types import AssistantMessage, ToolResultMessage, UserMessage


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent_with(*script: Any, **kw: Any) -> tuple[BasicAgent, ScriptedProvider]:
    provider = ScriptedProvider(list(script))
    agent = BasicAgent(provider=provider, **kw).with_retry(RetryPolicy.none())
    return agent, provider


async def test_prompt_yields_events_and_reset_clears_messages() -> None:
    agent, _ = agent_with("hello")
    events = [e async for e in agent.prompt("hi")]
    assert isinstance(events[0], AgentStart) and isinstance(events[-1], AgentEnd)
    assert len(agent.messages) == 2 and not agent.is_running
    agent.reset()
    assert agent.messages == [] and agent.last_loop_id is None


async def test_awaiting_prompt_gives_the_loop_result() -> None:
    agent, _ = agent_with("four")
    result = await agent.prompt("2+2?")
    assert result.ok and result.text == "four"
    assert [m.role for m in agent.messages] == ["user", "assistant"]


async def test_a_tool_run_leaves_four_messages_and_tools_stay_on_the_agent() -> None:
    agent, _ = agent_with(Reply(tool_calls=[call("add", {"a": 2, "b": 3})]), "5", tools=[add])
    await agent.prompt("add")
    assert [m.role for m in agent.messages] == ["user", "assistant", "tool_result", "assistant"]
    assert agent.tools == [add]


def test_builder_setters_are_reflected_in_the_config() -> None:
    limits = ExecutionLimits(max_turns=3)
    agent = (
        BasicAgent("scripted:demo")
        .with_system_prompt("Be brief.")
        .with_thinking("high")
        .with_max_tokens(123)
        .with_temperature(0.3)
        .with_limits(limits)
        .with_tool_execution("sequential", timeout=7)
        .with_config_id("mine")
        .with_messages([UserMessage.text("seed")])
    )
    config = agent.build_config()
    assert agent.system_prompt == "Be brief."
    assert (config.thinking, config.max_tokens, config.temperature) == ("high", 123, 0.3)
    assert config.limits is limits and config.tool_execution == "sequential"
    assert config.tool_timeout == 7 and config.segment() == "mine"
    assert config.model_config().id == "demo"
    assert len(agent.messages) == 1


async def test_second_prompt_sends_the_first_exchange() -> None:
    agent, provider = agent_with("first answer", "second answer", system_prompt="sys")
    await agent.prompt("first question")
    await agent.prompt("second question")
    sent = provider.requests[1]
    assert sent.system_prompt == "sys"
    assert [m.role for m in sent.messages] == ["user", "assistant", "user"]
    texts = [m.content[0].text for m in sent.messages]  # type: ignore[union-attr]
    assert texts == ["first question", "first answer", "second question"]


async def test_save_and_restore_messages_round_trip_and_the_restored_agent_continues() -> None:
    agent, _ = agent_with("a1")
    await agent.prompt("q1")
    saved = agent.save_messages()
    other, provider = agent_with("a2")
    other.restore_messages(saved)
    assert other.messages == agent.messages
    await other.prompt("q2")
    assert [m.role for m in other.messages] == ["user", "assistant", "user", "assistant"]
    assert len(provider.requests[0].messages) == 3


async def test_events_reach_a_concurrent_consumer_during_the_run() -> None:
    agent, _ = agent_with(Reply("streamed text", chunks=4, delta_delay=0.001))
    running_at_update: list[bool] = []
    async for event in agent.prompt("hi"):
        if isinstance(event, MessageUpdate):
            running_at_update.append(agent.is_running)
    assert len(running_at_update) == 4
    assert running_at_update[0]  # the first delta arrived while the run was still going
    assert not agent.is_running and len(agent.messages) == 2


async def test_a_concurrent_prompt_is_refused_with_a_clear_error(
    strict_loop: list[dict[str, Any]],
) -> None:
    agent, _ = agent_with(Hang())
    stream = agent.prompt("hang")
    iterator = aiter(stream)
    first = await anext(iterator)
    assert isinstance(first, AgentStart) and agent.is_running
    with pytest.raises(AgentBusyError, match="already running"):
        agent.prompt("another")
    with pytest.raises(AgentBusyError):
        agent.reset()
    agent.abort()
    result = await stream
    assert result.reason == "cancelled"
    await iterator.aclose()
    assert not agent.is_running


async def test_two_streams_started_together_run_one_and_refuse_the_other(
    strict_loop: list[dict[str, Any]],
) -> None:
    agent, _ = agent_with(Hang(), "never")
    first, second = agent.prompt("a"), agent.prompt("b")
    task = asyncio.ensure_future(first.result())
    with pytest.raises(AgentBusyError):
        await asyncio.gather(asyncio.sleep(0), second.result())
    agent.abort()
    assert (await task).reason == "cancelled"


async def test_loop_ids_are_deterministic_per_segment_and_reset_by_new_session() -> None:
    agent, _ = agent_with("a", "b", "c", "d")
    ids = []
    for text in ("1", "2"):
        await agent.prompt(text)
        ids.append(agent.last_loop_id)
    agent.with_config_id("other")
    await agent.prompt("3")
    ids.append(agent.last_loop_id)
    s = agent.session_id
    assert ids == [f"{s}.scripted.scripted.1", f"{s}.scripted.scripted.2", f"{s}.other.1"]
    new = agent.new_session()
    assert new != s and agent.session_id == new
    await agent.prompt("4")
    assert agent.last_loop_id == f"{new}.other.1"


async def test_continue_links_to_the_previous_loop_and_needs_history() -> None:
    agent, _ = agent_with(Reply(tool_calls=[call("add", {"a": 1, "b": 1})]), "2")
    with pytest.raises(UserError, match="prompt"):
        agent.continue_()
    recorder = SessionRecorder()
    agent.with_session_recorder(recorder)
    agent.with_limits(ExecutionLimits(max_turns=1))
    await agent.prompt("add")  # stops after the tool call: the history ends on a tool result
    assert isinstance(agent.messages[-1], ToolResultMessage | UserMessage)
    first = agent.last_loop_id
    agent.with_limits(ExecutionLimits())
    result = await agent.continue_()
    assert result.text == "2"
    session = recorder.get_session(agent.session_id)
    assert session is not None
    child = session.get_loop(agent.last_loop_id or "")
    assert child is not None and child.parent_loop_id == first
    assert child.continuation_kind == "default"
    with pytest.raises(UserError, match="assistant"):
        agent.continue_()


async def test_check_and_rotate_only_rotates_after_the_idle_threshold() -> None:
    agent, _ = agent_with("x")
    assert agent.check_and_rotate(0) is None  # never prompted
    await agent.prompt("hi")
    assert agent.check_and_rotate(3600) is None
    old = agent.session_id
    new = agent.check_and_rotate(0)
    assert new is not None and new != old and agent.session_id == new
    assert agent.check_and_rotate(0) is None  # right after rotating


async def test_steering_queue_modes_deliver_one_or_all_messages_per_checkpoint() -> None:
    for mode, expected_turns in (("one_at_a_time", 2), ("all", 1)):
        agent, provider = agent_with("a", "b", "c")
        agent.with_steering_mode(mode)  # type: ignore[arg-type]
        agent.steer("s1")
        agent.steer("s2")
        await agent.prompt("go")
        assert provider.calls == expected_turns, mode
        users = [m for m in agent.messages if isinstance(m, UserMessage)]
        assert len(users) == 3


async def test_follow_up_runs_after_the_agent_would_stop() -> None:
    agent, provider = agent_with("first", "second")
    agent.follow_up("and then?")
    result = await agent.prompt("start")
    assert result.text == "second" and provider.calls == 2
    assert agent.messages[2].role == "user"


async def test_tool_update_hooks_fire_per_update_and_a_veto_suppresses_the_after_hook() -> None:
    @tool
    async def chatty(ctx: ToolContext) -> str:
        """Report progress three times."""
        for n in range(3):
            ctx.update(f"step {n}")
        return "done"

    for veto in (False, True):
        before: list[str] = []
        after: list[str] = []
        agent, _ = agent_with(Reply(tool_calls=[call("chatty")]), "ok", tools=[chatty])

        def gate(n: str, i: str, t: str, seen: list[str] = before, veto: bool = veto) -> bool:
            seen.append(t)
            return not veto

        agent.with_hook("before_tool_execution_update", gate)
        agent.with_hook("after_tool_execution_update", lambda n, i, t, seen=after: seen.append(t))
        updates = [e async for e in agent.prompt("go") if isinstance(e, ToolExecutionUpdate)]
        assert len(before) == 3
        assert len(after) == (0 if veto else 3)
        assert len(updates) == (0 if veto else 3)


def test_unknown_hook_name_is_refused_with_the_known_names() -> None:
    with pytest.raises(UserError, match="before_loop"):
        BasicAgent("scripted:x").with_hook("before_everything", print)


async def test_compaction_shrinks_the_payload_not_the_history_and_emits_events() -> None:
    big = "word " * 400  # ~500 tokens per message
    agent, provider = agent_with(*[Reply(big) for _ in range(6)])
    agent.with_compaction(
        CompactionConfig(
            max_context_tokens=2000, system_prompt_tokens=0, keep_first_turns=1, keep_recent_turns=2
        )
    )
    vetoes: list[int] = []
    agent.with_hook("before_compaction_start", lambda tokens, count: vetoes.append(count) or True)
    events: list[Any] = []
    agent.subscribe(events.append)
    for n in range(3):
        await agent.prompt(f"{n} {big}")
    assert len(agent.messages) == 6  # the history keeps everything
    assert any(isinstance(e, CompactionStarted) for e in events) and vetoes
    ended = [e for e in events if isinstance(e, CompactionEnded)]
    assert ended and ended[-1].messages_after < ended[-1].messages_before
    assert len(provider.requests[-1].messages) < 5


async def test_session_recorder_and_store_persist_every_run(tmp_path: Path) -> None:
    store = JsonFileSessionStore(tmp_path)
    agent, _ = agent_with("a", "b")
    agent.with_session_recorder(store=store)
    await agent.prompt("one")
    await agent.prompt("two")
    saved = await store.load(agent.session_id)
    assert [r.loop_id for r in saved.loops] == [
        f"{agent.session_id}.scripted.scripted.1",
        f"{agent.session_id}.scripted.scripted.2",
    ]
    assert saved.agent_id == agent.agent_id


async def test_prompt_parallel_races_and_continues_with_the_winner() -> None:
    fast = ScriptedProvider(["branch zero", "next from zero"], name="zero")
    slow = ScriptedProvider(["branch one"], name="one")
    agent, _ = agent_with("first")
    recorder = SessionRecorder()
    agent.with_session_recorder(recorder)
    await agent.prompt("warm up")
    configs = [
        AgentLoopConfig(model="zero:m", provider=fast),
        AgentLoopConfig(model="one:m", provider=slow),
    ]
    race = await agent.prompt_parallel("which?", configs, PickFirstEvaluation())
    assert race.selected_index == 0
    assert agent.last_loop_id == race.loop_ids[0]
    assert [m.role for m in agent.messages] == ["user", "assistant", "user", "assistant"]
    assert agent.messages[-1].text == "branch zero"  # type: ignore[union-attr]
    agent.with_provider(fast).with_model("zero:m")
    await agent.prompt("go on")
    sent = fast.requests[-1].messages
    assert [m.role for m in sent] == ["user", "assistant", "user", "assistant", "user"]


async def test_a_race_with_a_judge_is_one_parallel_group_in_the_agent_session(
    strict_loop: list[dict[str, Any]],
) -> None:
    judge = ScriptedProvider(["2"], name="judge")
    strategy = LlmJudgeEvaluation(AgentLoopConfig(model="judge:j", provider=judge))
    agent, _ = agent_with()
    recorder = SessionRecorder()
    agent.with_session_recorder(recorder)
    configs = [
        AgentLoopConfig(model="a:m", provider=ScriptedProvider(["answer a"], name="a")),
        AgentLoopConfig(model="b:m", provider=ScriptedProvider(["answer b"], name="b")),
    ]
    race = await agent.prompt_parallel("question", configs, strategy)
    assert race.selected_index == 1
    [session] = recorder.sessions
    assert session.session_id == agent.session_id
    [group] = session.parallel_groups()
    assert group.all_loop_ids == race.loop_ids
    assert group.selected_loop_id == race.loop_ids[1] and group.selected_config_index == 1
    assert len(group.evaluation_loop_ids) == 1
    judge_loop = session.get_loop(group.evaluation_loop_ids[0])
    assert judge_loop is not None and judge_loop.session_id == agent.session_id
    assert judge_loop.parallel_group is not None
    assert judge_loop.parallel_group.role == "evaluation"
    siblings = session.parallel_siblings(race.loop_ids[0])
    assert [s.loop_id for s in siblings] == race.loop_ids
    assert [s.parallel_group.is_selected for s in siblings if s.parallel_group] == [False, True]
    assert all(s.status == "completed" for s in siblings)
    assert agent.messages[-1].text == "answer b"  # type: ignore[union-attr]


async def test_a_second_race_with_the_same_configs_gets_fresh_loop_ids() -> None:
    agent, _ = agent_with()
    ids: list[str] = []
    for _ in range(2):
        configs = [AgentLoopConfig(model="a:m", provider=ScriptedProvider(["x"], name="a"))]
        race = await agent.prompt_parallel("q", configs, PickFirstEvaluation())
        ids.extend(race.loop_ids)
    assert len(set(ids)) == 2


async def test_a_race_where_every_branch_fails_keeps_the_history() -> None:
    from phi_core.errors import BadRequestError
    from phi_core.testing import Fail

    agent, _ = agent_with("hi")
    await agent.prompt("hello")
    before = list(agent.messages)
    configs = [
        AgentLoopConfig(
            model="a:m",
            provider=ScriptedProvider([Fail(BadRequestError("boom"))], name="a"),
            retry=RetryPolicy.none(),
        )
    ]
    race = await agent.prompt_parallel("q", configs, PickFirstEvaluation())
    assert race.selected is None or not race.selected.ok
    assert agent.messages == before


async def test_empty_prompt_is_refused() -> None:
    agent, _ = agent_with("x")
    with pytest.raises(UserError, match="empty"):
        agent.prompt("  ")
    assert isinstance(AssistantMessage(), AssistantMessage)
