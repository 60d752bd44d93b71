"""agent_loop_parallel end to end with scripted branches (study §2.2–2.8, §4.9, issue 5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phi_core.cancel import CancelToken
from phi_core.errors import AllBranchesFailedError, AuthError, UserError
from phi_core.events import AgentEnd, AgentStart, ParallelLoopEnd, ParallelLoopStart
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop_continue
from phi_core.parallel import (
    ElaborateEvaluation,
    EvaluationDecision,
    ParallelLoopOutcome,
    PickFirstEvaluation,
    RegexCheck,
    TokenEfficientEvaluation,
    TransparentEvaluation,
    VerifierEvaluation,
    adopt_winner,
    agent_loop_parallel,
)
from phi_core.providers import StreamRequest
from phi_core.testing import Fail, Hang, Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import AssistantMessage, Usage, UserMessage

from .helpers import Recorder, answer, branch, provider_of

pytestmark = pytest.mark.usefixtures("strict_loop")


def base() -> AgentContext:
    return AgentContext(system_prompt="Be concise.", session_id="ses", agent_id="agent")


async def test_one_config_with_transparent_selects_it_and_brackets_the_run() -> None:
    events = Recorder()
    result = await agent_loop_parallel(
        "Hi", base(), [branch("Hello!")], TransparentEvaluation(), events=events
    )
    assert result.selected_index == 0
    assert result.all_outcomes == []
    assert result.selected_messages and result.text == "Hello!"
    types = events.types()
    assert types[0] == "parallel_loop_start" and types[-1] == "parallel_loop_end"
    assert "agent_start" in types


async def test_transparent_refuses_several_configs_before_running_anything() -> None:
    configs = [branch("a"), branch("b")]
    events = Recorder()
    with pytest.raises(UserError, match="exactly one config, got 2"):
        await agent_loop_parallel("Hi", base(), configs, TransparentEvaluation(), events=events)
    assert [provider_of(c).calls for c in configs] == [0, 0]
    assert events.events == []


async def test_two_branches_share_the_session_and_pick_first_selects_the_first() -> None:
    events = Recorder()
    result = await agent_loop_parallel(
        "Hi", AgentContext(), [branch("a"), branch("b")], PickFirstEvaluation(), events=events
    )
    assert result.selected_index == 0
    assert len(result.all_outcomes) == 1 and result.all_outcomes[0].config_index == 1
    starts = events.of_type("agent_start")
    assert len(starts) == 2
    assert starts[0].session_id == starts[1].session_id == result.session_id


async def test_loop_ids_are_session_segment_and_one_based_position() -> None:
    configs = [
        branch("a", config_id="same"),
        branch("b", config_id="same"),
        branch("c", name="openish", thinking="low"),
    ]
    events = Recorder()
    result = await agent_loop_parallel("Hi", base(), configs, PickFirstEvaluation(), events=events)
    assert result.loop_ids == ["ses.same.1", "ses.same.2", "ses.openish.m.thinking.3"]
    start = events.of_type("parallel_loop_start")[0]
    assert start.loop_ids == result.loop_ids and start.session_id == "ses"
    assert [o.loop_id for o in result.outcomes] == result.loop_ids
    assert {e.loop_id for e in events.of_type("agent_start")} == set(result.loop_ids)


async def test_token_efficient_and_elaborate_select_by_reported_tokens() -> None:
    def configs() -> list[Any]:
        return [branch(answer("x", 500)), branch(answer("y", 50)), branch(answer("z", 200))]

    cheap = await agent_loop_parallel("q", base(), configs(), TokenEfficientEvaluation())
    rich = await agent_loop_parallel("q", base(), configs(), ElaborateEvaluation())
    assert cheap.selected_index == 1 and len(cheap.all_outcomes) == 2
    assert rich.selected_index == 0 and len(rich.all_outcomes) == 2
    assert cheap.decision.scores == {0: 500.0, 1: 50.0, 2: 200.0}


async def test_events_are_bracketed_and_every_branch_ends_exactly_once() -> None:
    events = Recorder()
    configs = [branch(answer("a", delay=0.01)), branch("b"), branch(Fail(AuthError("bad key")))]
    result = await agent_loop_parallel("Hi", base(), configs, PickFirstEvaluation(), events=events)
    assert isinstance(events.events[0], ParallelLoopStart)
    assert isinstance(events.events[-1], ParallelLoopEnd)
    for loop_id in result.loop_ids:
        own = events.for_loop(loop_id)
        assert [type(e) for e in own].count(AgentEnd) == 1
        assert isinstance(own[-1], AgentEnd)
    end = events.events[-1]
    assert end.selected_loop_id == result.loop_ids[0] and end.selected_config_index == 0
    assert end.decision is not None and end.decision["strategy"] == "pick-first"


async def test_base_context_is_cloned_not_modified() -> None:
    context = base()
    context.messages.append(UserMessage.text("earlier"))
    result = await agent_loop_parallel(
        "Hi", context, [branch("a"), branch("b")], PickFirstEvaluation()
    )
    assert len(context.messages) == 1 and context.loop_id is None
    assert all(o.original_context_len == 1 for o in result.outcomes)
    assert len(result.outcomes[0].context.messages) == 3
    assert result.outcomes[0].context.messages is not result.outcomes[1].context.messages


async def test_continue_mode_runs_from_the_base_context() -> None:
    context = base()
    context.messages.append(UserMessage.text("What is 2+2?"))
    events = Recorder()
    configs = [branch("4"), branch("four")]
    result = await agent_loop_parallel([], context, configs, PickFirstEvaluation(), events=events)
    assert result.selected_index == 0 and result.selected_messages
    assert result.all_outcomes[0].original_context_len == 1
    assert len(events.of_type("agent_start")) == 2
    assert events.types()[0] == "parallel_loop_start"
    assert events.types()[-1] == "parallel_loop_end"
    request = provider_of(configs[1]).requests[0]
    assert request.messages[-1].content[0].text == "What is 2+2?"  # type: ignore[union-attr]


async def test_continue_mode_refuses_a_context_ending_on_an_assistant_before_running() -> None:
    context = base()
    context.messages += [UserMessage.text("q"), AssistantMessage(content=[])]
    config = branch("x")
    with pytest.raises(UserError, match="assistant message"):
        await agent_loop_parallel([], context, [config], PickFirstEvaluation())
    with pytest.raises(UserError, match="at least one message"):
        await agent_loop_parallel(None, base(), [config], PickFirstEvaluation())
    assert provider_of(config).calls == 0


async def test_bad_arguments_are_refused_with_clear_errors() -> None:
    with pytest.raises(UserError, match="at least one config"):
        await agent_loop_parallel("q", base(), [], PickFirstEvaluation())
    with pytest.raises(UserError, match="max_concurrency must be >= 1, got 0"):
        await agent_loop_parallel(
            "q", base(), [branch("a")], PickFirstEvaluation(), max_concurrency=0
        )
    with pytest.raises(UserError, match="branch_timeout"):
        await agent_loop_parallel(
            "q", base(), [branch("a")], PickFirstEvaluation(), branch_timeout=0
        )
    with pytest.raises(UserError, match="evaluate"):
        await agent_loop_parallel("q", base(), [branch("a")], object())  # type: ignore[arg-type]


async def test_a_branch_that_raises_is_captured_and_never_selected() -> None:
    def explode(request: StreamRequest) -> Reply:
        raise RuntimeError("tool crashed")

    events = Recorder()
    configs = [branch(explode), branch("fine")]
    result = await agent_loop_parallel("q", base(), configs, PickFirstEvaluation(), events=events)
    broken = result.outcomes[0]
    assert broken.status == "error" and not broken.ok
    assert broken.error is not None and "RuntimeError: tool crashed" in broken.error
    assert result.selected_index == 1 and result.status == "ok"
    ends = [e for e in events.for_loop(broken.loop_id) if isinstance(e, AgentEnd)]
    assert len(ends) == 1 and ends[0].reason == "error"


async def test_a_provider_raising_cancelled_error_on_its_own_is_a_failed_branch() -> None:
    """An SDK that raises CancelledError when nothing cancelled the call: the branch failed (an
    error naming the fault), the race was not cancelled, and the other branch wins."""

    def stray(request: StreamRequest) -> Reply:
        raise asyncio.CancelledError

    events = Recorder()
    configs = [branch(stray), branch("fine")]
    result = await agent_loop_parallel("q", base(), configs, PickFirstEvaluation(), events=events)
    broken = result.outcomes[0]
    assert broken.status == "error", broken.error
    assert "raised CancelledError although nothing cancelled" in (broken.error or "")
    assert not result.cancelled and result.status == "ok" and result.selected_index == 1
    end = events.events[-1]
    assert isinstance(end, ParallelLoopEnd) and not end.cancelled


async def test_a_provider_failure_becomes_an_error_outcome_with_its_text() -> None:
    configs = [branch(Fail(AuthError("invalid key"))), branch(answer("ok", 5))]
    result = await agent_loop_parallel("q", base(), configs, TokenEfficientEvaluation())
    assert result.outcomes[0].status == "error"
    assert "invalid key" in (result.outcomes[0].error or "")
    assert result.selected_index == 1  # the failed branch used fewer tokens but cannot win


async def test_a_branch_that_times_out_is_cancelled_with_status_timeout() -> None:
    events = Recorder()
    configs = [branch(Hang(partial_text="thinking...")), branch("quick")]
    result = await agent_loop_parallel(
        "q", base(), configs, PickFirstEvaluation(), events=events, branch_timeout=0.05
    )
    slow = result.outcomes[0]
    assert slow.status == "timeout"
    assert slow.error is not None and "branch_timeout=0.05" in slow.error
    assert result.outcomes[1].status == "ok"
    assert result.selected_index == 1 and not result.cancelled
    ends = [e for e in events.for_loop(slow.loop_id) if isinstance(e, AgentEnd)]
    assert len(ends) == 1 and ends[0].reason == "cancelled"


async def test_a_cancelled_race_says_so_and_still_ends_every_branch() -> None:
    token = CancelToken()
    started = 0
    both = asyncio.Event()

    def hang(request: StreamRequest) -> Hang:
        nonlocal started
        started += 1
        if started == 2:
            both.set()
        return Hang()

    async def cancel_when_running() -> None:
        await both.wait()
        token.cancel()

    events = Recorder()
    configs = [branch(hang), branch(hang)]
    async with asyncio.TaskGroup() as group:
        group.create_task(cancel_when_running())
        race = group.create_task(
            agent_loop_parallel(
                "q", base(), configs, PickFirstEvaluation(), events=events, cancel=token
            )
        )
    result = race.result()
    assert result.cancelled and result.status == "cancelled"
    assert result.selected is None and result.decision.index is None
    assert all(o.status == "cancelled" for o in result.outcomes)
    end = events.events[-1]
    assert isinstance(end, ParallelLoopEnd) and end.cancelled and end.selected_loop_id is None
    assert len(events.of_type("agent_end")) == 2
    with pytest.raises(AllBranchesFailedError, match="cancelled"):
        result.raise_for_status()


async def test_cancelling_the_race_task_propagates_after_closing_every_branch() -> None:
    running = asyncio.Event()

    def hang(request: StreamRequest) -> Hang:
        running.set()
        return Hang()

    events = Recorder()
    task = asyncio.create_task(
        agent_loop_parallel(
            "q", base(), [branch(hang), branch(hang)], PickFirstEvaluation(), events=events
        )
    )
    await running.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(events.of_type("agent_end")) == 2
    end = events.events[-1]
    assert isinstance(end, ParallelLoopEnd) and end.cancelled


async def test_an_all_failed_race_says_so_clearly() -> None:
    events = Recorder()
    configs = [branch(Fail(AuthError("key one bad"))), branch(Fail(AuthError("key two bad")))]
    result = await agent_loop_parallel("q", base(), configs, PickFirstEvaluation(), events=events)
    assert result.all_failed and result.status == "all_failed"
    assert result.selected is None and result.selected_messages == [] and result.text == ""
    assert "No branch succeeded" in result.decision.rationale
    assert events.events[-1].selected_config_index is None
    with pytest.raises(AllBranchesFailedError) as info:
        result.raise_for_status()
    assert "key one bad" in str(info.value) and "key two bad" in str(info.value)
    with pytest.raises(AllBranchesFailedError):
        adopt_winner(result)


async def test_max_concurrency_caps_branches_in_flight() -> None:
    in_flight = 0
    peak = 0

    def track(request: StreamRequest) -> Reply:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        return Reply("done", delay=0.01)

    def on_event(event: Any) -> None:
        nonlocal in_flight
        if isinstance(event, AgentEnd):
            in_flight -= 1

    configs = [branch(track) for _ in range(6)]
    result = await agent_loop_parallel(
        "q", base(), configs, PickFirstEvaluation(), events=on_event, max_concurrency=2
    )
    assert all(o.ok for o in result.outcomes)
    assert peak == 2


async def test_tool_factory_gives_each_branch_its_own_tools() -> None:
    made: list[tuple[int, Any]] = []

    def factory(index: int, config: Any) -> list[Any]:
        @tool
        def note() -> str:
            """Return a note."""
            return f"branch {index}"

        made.append((index, note))
        return [note]

    configs = [
        branch(Reply(tool_calls=[call("note")]), "a"),
        branch(Reply(tool_calls=[call("note")]), "b"),
    ]
    result = await agent_loop_parallel(
        "q", base(), configs, PickFirstEvaluation(), tool_factory=factory
    )
    assert sorted(i for i, _ in made) == [0, 1]
    tools = [o.context.tools[0] for o in result.outcomes]
    assert tools[0] is not tools[1]
    results = [m for m in result.outcomes[1].new_messages if m.role == "tool_result"]
    assert results[0].content[0].text == "branch 1"  # type: ignore[union-attr]


@tool
def lookup() -> str:
    """Look something up."""
    return "found"


async def test_early_accept_cancels_siblings_and_counts_their_partial_usage() -> None:
    slow = branch(
        Reply(tool_calls=[call("lookup")], usage=Usage(input=30, output=3)),
        Hang(partial_text="still working"),
    )
    wrong = branch(answer("the answer is 41", 7))
    right = branch(answer("the answer is 42", 9))
    context = base()
    context.tools = [lookup]
    events = Recorder()
    verifier = VerifierEvaluation(RegexCheck(r"\b42\b"), early_accept=True)
    result = await agent_loop_parallel("q", context, [slow, wrong, right], verifier, events=events)
    assert result.selected_index == 2
    assert result.decision.early_accept
    assert result.outcomes[0].status == "cancelled"
    assert "accepted early" in (result.outcomes[0].error or "")
    assert result.outcomes[0].usage.total == 33  # the finished first turn of the cancelled branch
    assert result.total_usage.total == 33 + 7 + 9
    assert not result.cancelled and result.status == "ok"
    assert result.decision.details["cancelled_siblings"] == [0]
    assert len(events.of_type("agent_end")) == 3


async def test_verifier_without_early_accept_picks_the_cheapest_passing_branch() -> None:
    configs = [branch(answer("42", 90)), branch(answer("41", 5)), branch(answer("42!", 20))]
    verifier = VerifierEvaluation(RegexCheck(r"42"))
    result = await agent_loop_parallel("q", base(), configs, verifier)
    assert result.selected_index == 2
    assert result.decision.scores == {0: 1.0, 1: 0.0, 2: 1.0}
    assert all(o.ok for o in result.outcomes)


async def test_a_custom_strategy_naming_a_missing_branch_is_an_error_and_still_ends() -> None:
    class Broken:
        async def evaluate(
            self, prompts: Any, outcomes: list[ParallelLoopOutcome], **_: Any
        ) -> EvaluationDecision:
            return EvaluationDecision(index=7, strategy="broken")

    events = Recorder()
    with pytest.raises(UserError, match=r"selected branch 7, but the race's branches are \[0, 1\]"):
        await agent_loop_parallel("q", base(), [branch("a"), branch("b")], Broken(), events=events)
    assert isinstance(events.events[-1], ParallelLoopEnd)


async def test_a_custom_strategy_can_pick_any_branch() -> None:
    class Longest:
        async def evaluate(
            self, prompts: Any, outcomes: list[ParallelLoopOutcome], **_: Any
        ) -> EvaluationDecision:
            best = max(outcomes, key=lambda o: len(o.text))
            return EvaluationDecision(index=best.config_index, rationale="longest")

    result = await agent_loop_parallel(
        "q", base(), [branch("short"), branch("much longer answer")], Longest()
    )
    assert result.selected_index == 1
    assert result.decision.strategy == "Longest"


async def test_adopt_winner_continues_with_a_fresh_loop_parented_to_the_winner() -> None:
    result = await agent_loop_parallel(
        "q1", base(), [branch("a1"), branch("b1")], PickFirstEvaluation()
    )
    context = adopt_winner(result, "q2")
    winner = result.selected
    assert winner is not None
    assert context.parent_loop_id == winner.loop_id
    assert context.loop_id not in (None, winner.loop_id)
    assert context.continuation_kind == "default"
    assert context.session_id == result.session_id
    events = Recorder()
    follow = await agent_loop_continue(context, branch("a2"), events=events)
    assert follow.text == "a2"
    start = events.of_type("agent_start")[0]
    assert isinstance(start, AgentStart) and start.parent_loop_id == winner.loop_id
    assert len(winner.context.messages) == 2  # the race's own context is untouched


async def test_async_and_queue_sinks_receive_the_whole_bracket() -> None:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    await agent_loop_parallel(
        "q", base(), [branch("a"), branch("b")], PickFirstEvaluation(), events=queue
    )
    received = [queue.get_nowait() for _ in range(queue.qsize())]
    assert received[0].type == "parallel_loop_start" and received[-1].type == "parallel_loop_end"

    seen: list[str] = []

    async def sink(event: Any) -> None:
        seen.append(event.type)

    await agent_loop_parallel("q", base(), [branch("a")], PickFirstEvaluation(), events=sink)
    assert seen[0] == "parallel_loop_start" and seen[-1] == "parallel_loop_end"


@pytest.mark.parametrize(
    "bad",
    [
        {"prompts": 123},
        {"prompts": [None]},
        {"messages": [{"role": "user", "content": "hi"}]},
        {"tools": "dup"},
    ],
)
async def test_bad_input_is_refused_before_any_branch_starts(bad):
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    provider = ScriptedProvider(default="x")
    context = AgentContext()
    if "messages" in bad:
        context.messages = bad["messages"]  # type: ignore[assignment]
    if "tools" in bad:
        context.tools = [echo, echo]
    events: list = []
    with pytest.raises(UserError):
        await agent_loop_parallel(
            bad.get("prompts", "q"),
            context,
            [AgentLoopConfig(provider=provider), AgentLoopConfig(provider=provider)],
            PickFirstEvaluation(),
            events=events.append,
        )
    assert provider.calls == 0 and events == []
