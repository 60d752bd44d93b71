"""Whatever a branch or a judge call raises stays inside the race (study §2.5, audit).

A provider, tool or tool factory raising a ``BaseException`` that is not an ``Exception`` (a custom
one, ``GeneratorExit``) or a stray ``CancelledError`` fails that branch (status ``error``); the
other branches go on, exactly one ``ParallelLoopEnd`` is emitted and the caller's
``Task.cancelling()`` is unchanged. The defect this covers: such an exception escaped the race's
task group as ``BaseExceptionGroup('unhandled errors in a TaskGroup', ...)`` and, on Python 3.11,
left the caller's ``cancelling()`` one higher each time. ``KeyboardInterrupt`` and ``SystemExit``
still stop the race: every branch (or judge call) ends first, then the race raises them again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from phi_core.events import AgentEnd
from phi_core.loop import AgentContext
from phi_core.parallel import (
    LlmJudgeEvaluation,
    PairwiseJudgeEvaluation,
    PickFirstEvaluation,
    VerifierEvaluation,
    agent_loop_parallel,
)
from phi_core.providers import StreamRequest
from phi_core.testing import Hang, Reply, call
from phi_core.tools import tool

from .helpers import Recorder, answer, branch


class Boom(BaseException):
    """Not an Exception: ``except Exception`` lets it through."""


def raising(exc: Callable[[], BaseException]) -> Callable[[StreamRequest], Reply]:
    """A scripted turn whose provider raises ``exc()`` instead of replying."""

    def play(request: StreamRequest) -> Reply:
        raise exc()

    return play


def base() -> AgentContext:
    return AgentContext(session_id="s", agent_id="a")


def cancelling() -> int:
    task = asyncio.current_task()
    assert task is not None
    return task.cancelling()


def ends_by_loop(recorder: Recorder) -> dict[str, list[AgentEnd]]:
    ends: dict[str, list[AgentEnd]] = {}
    for event in recorder.of_type("agent_end"):
        ends.setdefault(event.loop_id, []).append(event)
    return ends


def assert_every_loop_ended_once(recorder: Recorder) -> None:
    started = {e.loop_id for e in recorder.of_type("agent_start")}
    ends = ends_by_loop(recorder)
    assert started <= set(ends)
    assert all(len(v) == 1 for v in ends.values()), ends
    assert len(recorder.of_type("parallel_loop_end")) == 1


FAULTS: dict[str, tuple[Callable[[], BaseException], str]] = {
    "custom BaseException": (lambda: Boom("kaboom"), "Boom: kaboom"),
    "GeneratorExit": (GeneratorExit, "GeneratorExit"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_provider_raising_a_base_exception_fails_only_its_branch(fault, strict_loop):
    make, text = FAULTS[fault]
    recorder = Recorder()
    configs = [
        branch(default=raising(make), name="bad"),
        branch(answer("one", delay=0.02), name="g1"),
        branch(answer("two", delay=0.02), name="g2"),
    ]
    result = await agent_loop_parallel(
        "Hi", base(), configs, PickFirstEvaluation(), events=recorder
    )
    bad, g1, g2 = result.outcomes
    assert bad.status == "error" and bad.error == text and bad.error_kind == "internal"
    assert (g1.status, g2.status) == ("ok", "ok")
    assert result.selected_index == 1
    assert_every_loop_ended_once(recorder)
    assert ends_by_loop(recorder)[bad.loop_id][0].reason == "error"
    assert cancelling() == 0

    # A later race still tells a provider's stray CancelledError from a real cancellation.
    recorder = Recorder()
    configs = [
        branch(default=raising(asyncio.CancelledError), name="stray"),
        branch(answer("fine"), name="good"),
    ]
    result = await agent_loop_parallel(
        "Hi", base(), configs, PickFirstEvaluation(), events=recorder
    )
    stray, good = result.outcomes
    assert stray.status == "error" and "CancelledError" in (stray.error or "")
    assert good.ok and result.selected_index == 1 and not result.cancelled
    assert_every_loop_ended_once(recorder)
    assert cancelling() == 0


async def test_a_tool_raising_a_base_exception_fails_only_its_call(strict_loop):
    @tool
    def explode() -> str:
        """Raise a BaseException."""
        raise Boom("from a tool")

    recorder = Recorder()
    configs = [
        branch(Reply(tool_calls=[call("explode")]), "recovered", name="bad"),
        branch(answer("fine", delay=0.02), name="good"),
    ]
    context = base()
    context.tools = [explode]
    result = await agent_loop_parallel(
        "Hi", context, configs, PickFirstEvaluation(), events=recorder
    )
    bad, good = result.outcomes
    # like any exception a tool raises: an error result the model sees, and the branch goes on
    [failed] = [m for m in bad.new_messages if m.role == "tool_result"]
    assert failed.is_error and failed.content[0].text == "Tool explode failed: Boom: from a tool"
    assert bad.ok and bad.text == "recovered"
    assert good.ok
    assert_every_loop_ended_once(recorder)
    assert cancelling() == 0


async def test_a_tool_factory_raising_a_base_exception_gets_a_synthesised_end(strict_loop):
    def factory(index: int, config: Any) -> list[Any]:
        if index == 0:
            raise Boom("no tools for you")
        return []

    recorder = Recorder()
    configs = [branch(answer("a"), name="a"), branch(answer("b"), name="b")]
    result = await agent_loop_parallel(
        "Hi", base(), configs, PickFirstEvaluation(), events=recorder, tool_factory=factory
    )
    first, second = result.outcomes
    assert first.status == "error" and first.error == "Boom: no tools for you"
    assert second.ok and result.selected_index == 1
    (end,) = ends_by_loop(recorder)[first.loop_id]
    assert end.reason == "error" and end.error == "Boom: no tools for you"
    assert len(recorder.of_type("parallel_loop_end")) == 1
    assert cancelling() == 0


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_judge_raising_a_base_exception_falls_back(fault, strict_loop):
    make, text = FAULTS[fault]
    recorder = Recorder()
    judge = branch(default=raising(make), name="judge")
    configs = [branch(answer("one"), name="g1"), branch(answer("two"), name="g2")]
    result = await agent_loop_parallel(
        "Hi", base(), configs, LlmJudgeEvaluation(judge, orders=2), events=recorder
    )
    decision = result.decision
    assert decision.fallback and result.selected_index == 0
    assert text in decision.rationale
    assert decision.details["judge_calls"] == 2
    assert_every_loop_ended_once(recorder)
    assert cancelling() == 0


async def test_a_real_cancellation_still_cancels_the_race(strict_loop):
    recorder = Recorder()
    configs = [branch(default=Hang("..."), name="a"), branch(default=Hang("..."), name="b")]
    task = asyncio.create_task(
        agent_loop_parallel("Hi", base(), configs, PickFirstEvaluation(), events=recorder)
    )
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    ends = ends_by_loop(recorder)
    assert len(ends) == 2 and all(v[0].reason == "cancelled" for v in ends.values())
    (end,) = recorder.of_type("parallel_loop_end")
    assert end.cancelled
    assert cancelling() == 0


# KeyboardInterrupt/SystemExit: run in an event loop of their own, so one escaping the loop (the
# old behaviour) fails the test instead of interrupting the test session.


def run_alone(scenario: Callable[[], Any]) -> Any:
    try:
        return asyncio.run(scenario())
    except BaseException as exc:
        pytest.fail(f"{type(exc).__name__} escaped the race's event loop: {exc!r}")


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_a_stop_ends_every_branch_then_stops_the_race(stop):
    recorder = Recorder()

    async def scenario() -> tuple[BaseException | None, int]:
        configs = [
            branch(default=Hang("working"), name="slow"),
            branch(default=raising(lambda: stop("stop now")), name="bad"),
            branch(default=Hang("working"), name="slow2"),
        ]
        raised: BaseException | None = None
        try:
            await agent_loop_parallel("Hi", base(), configs, PickFirstEvaluation(), events=recorder)
        except BaseException as exc:
            raised = exc
        return raised, cancelling()

    raised, count = run_alone(scenario)
    assert type(raised) is stop and str(raised) == "stop now"
    assert count == 0
    assert_every_loop_ended_once(recorder)
    reasons = {loop_id.split(".")[1]: v[0].reason for loop_id, v in ends_by_loop(recorder).items()}
    assert reasons == {"slow": "cancelled", "bad": "error", "slow2": "cancelled"}
    (end,) = recorder.of_type("parallel_loop_end")
    assert end.selected_config_index is None


def test_a_stop_ends_branches_still_waiting_for_a_slot():
    recorder = Recorder()

    async def scenario() -> BaseException | None:
        configs = [
            branch(default=raising(lambda: KeyboardInterrupt()), name="bad"),
            branch(answer("a"), name="a"),
            branch(answer("b"), name="b"),
        ]
        try:
            await agent_loop_parallel(
                "Hi", base(), configs, PickFirstEvaluation(), events=recorder, max_concurrency=1
            )
        except BaseException as exc:
            return exc
        return None

    raised = run_alone(scenario)
    assert isinstance(raised, KeyboardInterrupt)
    ends = ends_by_loop(recorder)
    assert len(ends) == 3 and all(len(v) == 1 for v in ends.values())
    waiting = [v[0] for k, v in ends.items() if ".bad." not in k]
    assert all(e.reason == "cancelled" for e in waiting)
    assert all("branch 0 raised KeyboardInterrupt" in (e.error or "") for e in waiting)
    assert len(recorder.of_type("parallel_loop_end")) == 1


def test_a_judge_raising_keyboard_interrupt_ends_the_other_judge_calls_then_stops():
    recorder = Recorder()
    calls = 0

    def judge_turn(request: StreamRequest) -> Reply | Hang:
        nonlocal calls
        calls += 1
        if calls == 2:  # the first call is under way (hanging) by then
            raise KeyboardInterrupt("judge stopped")
        return Hang("thinking")

    async def scenario() -> tuple[BaseException | None, int]:
        judge = branch(default=judge_turn, name="judge")
        configs = [branch(answer("one"), name="g1"), branch(answer("two"), name="g2")]
        try:
            await agent_loop_parallel(
                "Hi", base(), configs, LlmJudgeEvaluation(judge, orders=2), events=recorder
            )
        except BaseException as exc:
            return exc, cancelling()
        return None, cancelling()

    raised, count = run_alone(scenario)
    assert isinstance(raised, KeyboardInterrupt) and count == 0
    assert_every_loop_ended_once(recorder)
    judge_ends = {k: v[0].reason for k, v in ends_by_loop(recorder).items() if ".judge." in k}
    assert sorted(judge_ends.values()) == ["cancelled", "error"]


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_pairwise_judge_raising_a_base_exception_has_no_verdict(fault, strict_loop):
    make, _ = FAULTS[fault]
    recorder = Recorder()
    judge = branch(default=raising(make), name="judge")
    configs = [branch(answer("one"), name="g1"), branch(answer("two"), name="g2")]
    result = await agent_loop_parallel(
        "Hi", base(), configs, PairwiseJudgeEvaluation(judge), events=recorder
    )
    # both orders failed: no verdict, so the cheaper answer goes through, as for a tie
    assert result.selected_index in (0, 1) and result.outcomes[result.selected_index].ok
    assert_every_loop_ended_once(recorder)
    assert cancelling() == 0


def test_a_pairwise_judge_raising_keyboard_interrupt_stops_the_race_with_it():
    recorder = Recorder()

    async def scenario() -> tuple[BaseException | None, int]:
        judge = branch(default=raising(lambda: KeyboardInterrupt("judge stopped")), name="judge")
        configs = [branch(answer("one"), name="g1"), branch(answer("two"), name="g2")]
        try:
            await agent_loop_parallel(
                "Hi", base(), configs, PairwiseJudgeEvaluation(judge), events=recorder
            )
        except BaseException as exc:
            return exc, cancelling()
        return None, cancelling()

    raised, count = run_alone(scenario)
    assert type(raised) is KeyboardInterrupt and str(raised) == "judge stopped"
    assert count == 0
    assert_every_loop_ended_once(recorder)


async def test_a_check_raising_a_base_exception_fails_that_answer_only(strict_loop):
    def picky(text: str) -> bool:
        if "one" in text:
            raise Boom("check broke")
        return True

    configs = [branch(answer("one"), name="g1"), branch(answer("two"), name="g2")]
    result = await agent_loop_parallel("Hi", base(), configs, VerifierEvaluation(picky))
    assert result.selected_index == 1 and not result.decision.fallback
    assert cancelling() == 0


@pytest.mark.parametrize("judged", ["llm", "pairwise"])
async def test_a_judge_whose_key_is_not_set_stops_the_race_as_the_usage_error_it_is(
    judged, strict_loop
):
    from phi_core.errors import MissingApiKeyError

    judge = branch(default=raising(lambda: MissingApiKeyError("acme", "ACME_API_KEY")), name="j")
    strategy = (
        LlmJudgeEvaluation(judge, orders=2) if judged == "llm" else PairwiseJudgeEvaluation(judge)
    )
    recorder = Recorder()
    configs = [branch(answer("one"), name="g1"), branch(answer("two"), name="g2")]
    with pytest.raises(MissingApiKeyError, match="ACME_API_KEY"):
        await agent_loop_parallel("Hi", base(), configs, strategy, events=recorder)
    assert_every_loop_ended_once(recorder)
    assert cancelling() == 0
