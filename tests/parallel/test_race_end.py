"""How a race ends: ``ParallelLoopEnd`` carries the race's loop id and status, and a race
cancelled while its strategy is deciding has no winner.

Defects covered: a race cancelled while its judge ran reported ``cancelled`` yet had the winner
the judge's fallback picked (``raise_for_status`` and ``adopt_winner`` accepted it);
``ParallelLoopEnd`` had ``loop_id=""`` while ``ParallelLoopStart`` carried the session id; and
``ParallelLoopEnd`` carried no status, so its readers had to guess one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phi_core.cancel import CancelToken
from phi_core.errors import AllBranchesFailedError, ServerError, UserError
from phi_core.events import AGENT_EVENT_ADAPTER, ParallelLoopEnd, Warning
from phi_core.loop import AgentContext
from phi_core.metering import Budget
from phi_core.parallel import (
    EvaluationDecision,
    LlmJudgeEvaluation,
    PickFirstEvaluation,
    VerifierEvaluation,
    adopt_winner,
    agent_loop_parallel,
)
from phi_core.providers import StreamRequest
from phi_core.testing import Fail, Hang, Reply

from .helpers import Recorder, answer, branch

KEY = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4"


def base() -> AgentContext:
    return AgentContext(session_id="ses")


def the_end(recorder: Recorder) -> ParallelLoopEnd:
    (end,) = recorder.of_type("parallel_loop_end")
    assert isinstance(end, ParallelLoopEnd)
    return end


class CancelsWhileDeciding:
    """A strategy whose decision comes after the race's token was cancelled mid-evaluation."""

    name = "cancels"

    async def evaluate(
        self, prompts: Any, outcomes: Any, *, events: Any, cancel: CancelToken
    ) -> EvaluationDecision:
        await asyncio.sleep(0)
        cancel.cancel("the user pressed stop")
        await asyncio.sleep(0)
        return EvaluationDecision(index=1, rationale="branch 1 reads best")


class Raises:
    name = "raises"

    async def evaluate(self, *args: Any, **kwargs: Any) -> EvaluationDecision:
        raise RuntimeError(f"strategy exploded with {KEY}")


# ------------------------------------------------------------------ cancelled while deciding


async def test_a_race_cancelled_while_its_strategy_decides_has_no_winner() -> None:
    recorder = Recorder()
    token = CancelToken()
    result = await agent_loop_parallel(
        "Hi",
        base(),
        [branch(answer("A"), name="a"), branch(answer("B"), name="b")],
        CancelsWhileDeciding(),
        events=recorder,
        cancel=token,
    )
    assert result.status == "cancelled" and result.cancelled
    assert result.selected is None and result.selected_index is None
    assert "cancelled while the strategy was deciding" in result.decision.rationale
    assert "branch 1" in result.decision.rationale  # the dropped pick is named
    with pytest.raises(AllBranchesFailedError):
        result.raise_for_status()
    with pytest.raises(AllBranchesFailedError):
        adopt_winner(result)
    end = the_end(recorder)
    assert end.cancelled and end.status == "cancelled"
    assert end.selected_config_index is None and end.selected_loop_id is None


async def test_a_race_cancelled_while_its_judge_runs_has_no_fallback_winner() -> None:
    """The auditor's case: the judge is cut short, falls back to the first successful branch;
    that fallback must not become the winner of a cancelled race."""
    token = CancelToken()

    def cancel_then_hang(request: StreamRequest) -> Hang:
        token.cancel()
        return Hang("2")

    recorder = Recorder()
    result = await agent_loop_parallel(
        "Hi",
        base(),
        [branch(answer("A"), name="a"), branch(answer("B"), name="b")],
        LlmJudgeEvaluation(branch(cancel_then_hang, name="judge")),
        events=recorder,
        cancel=token,
    )
    assert result.status == "cancelled"
    assert result.selected is None
    assert result.decision.fallback  # what the judge did is still reported
    end = the_end(recorder)
    assert end.status == "cancelled" and end.selected_config_index is None


async def test_the_wall_clock_running_out_while_the_judge_runs_leaves_no_winner() -> None:
    result = await agent_loop_parallel(
        "Hi",
        base(),
        [branch(answer("A"), name="a"), branch(answer("B"), name="b")],
        LlmJudgeEvaluation(branch(default=Hang("1"), name="judge")),
        budget=Budget(max_wall_s=0.2),
    )
    assert result.timed_out and not result.cancelled
    assert result.selected is None and result.status == "timeout"
    assert "wall-clock budget ran out while the strategy was deciding" in (
        result.decision.rationale
    )


async def test_a_decision_made_before_the_cancellation_keeps_its_winner() -> None:
    """A branch accepted early was chosen before the caller cancelled the race."""
    token = CancelToken()

    def accept_then_cancel(text: str) -> bool:
        token.cancel()  # the caller stops the race as the check passes
        return "42" in text

    result = await agent_loop_parallel(
        "Hi",
        base(),
        [branch(answer("42"), name="fast"), branch(default=Hang("..."), name="slow")],
        VerifierEvaluation(accept_then_cancel, early_accept=True),
        cancel=token,
    )
    assert result.cancelled and result.decision.early_accept
    assert result.selected is not None and result.selected.config_index == 0


async def test_a_race_not_cancelled_keeps_the_strategy_pick() -> None:
    result = await agent_loop_parallel(
        "Hi",
        base(),
        [branch(answer("A"), name="a"), branch(answer("B"), name="b")],
        LlmJudgeEvaluation(branch(Reply("2"), name="judge")),
    )
    assert result.status == "ok" and result.selected_index == 1


# ------------------------------------------------------------------ ParallelLoopEnd


async def test_the_end_carries_the_loop_id_and_status_of_a_race_that_returned() -> None:
    recorder = Recorder()
    result = await agent_loop_parallel(
        "Hi",
        base(),
        [branch(answer("A"), name="a"), branch(answer("B"), name="b")],
        PickFirstEvaluation(),
        events=recorder,
    )
    (start,) = recorder.of_type("parallel_loop_start")
    end = the_end(recorder)
    assert end.loop_id == start.loop_id == "ses"
    assert end.status == result.status == "ok" and end.error is None
    assert end.selected_config_index == 0


async def test_the_end_says_all_failed_and_over_budget_like_the_result() -> None:
    recorder = Recorder()
    failed = await agent_loop_parallel(
        "Hi",
        base(),
        [branch(Fail(ServerError("down", status=500)), name="a")],
        PickFirstEvaluation(),
        events=recorder,
    )
    assert failed.status == "all_failed"
    assert the_end(recorder).status == "all_failed"

    recorder = Recorder()
    refused = await agent_loop_parallel(
        "Hi",
        base(),
        [branch(answer("A"), name="a", max_tokens=5)],
        PickFirstEvaluation(),
        events=recorder,
        budget=Budget(max_tokens=3),
    )
    assert refused.status == "over_budget"
    end = the_end(recorder)
    assert end.status == "over_budget" and end.loop_id == "ses"


async def test_a_strategy_that_raises_falls_back_and_still_ends_once_with_the_answers() -> None:
    recorder = Recorder()
    result = await agent_loop_parallel(
        "Hi",
        base(),
        [branch(answer("A"), name="a"), branch(answer("B"), name="b")],
        Raises(),
        events=recorder,
    )
    assert result.status == "ok" and result.text == "A"  # the first successful branch
    assert result.decision.fallback and result.decision.strategy == "raises"
    assert [o.text for o in result.outcomes] == ["A", "B"]  # the paid answers are kept
    (warning,) = [e for e in recorder.events if isinstance(e, Warning)]
    assert "raises strategy fell back" in warning.message
    assert "RuntimeError: strategy exploded" in warning.message
    assert KEY not in warning.message and KEY not in result.decision.rationale  # redacted
    assert warning.message_without_content is not None
    assert "exploded" not in warning.message_without_content
    end = the_end(recorder)
    assert end.loop_id == "ses" and end.status == "ok" and end.error is None
    assert end.selected_config_index == 0 and end.decision is not None
    assert end.decision["fallback"] is True


async def test_a_strategy_raising_a_usage_error_still_ends_the_race_with_status_error() -> None:
    class Misused:
        name = "misused"

        async def evaluate(self, *args: Any, **kwargs: Any) -> EvaluationDecision:
            raise UserError(f"the judge's key is not set ({KEY})")

    recorder = Recorder()
    with pytest.raises(UserError, match="key is not set"):
        await agent_loop_parallel(
            "Hi", base(), [branch(answer("A")), branch(answer("B"))], Misused(), events=recorder
        )
    end = the_end(recorder)
    assert end.status == "error" and not end.cancelled and end.selected_config_index is None
    assert end.error is not None and "UserError" in end.error and KEY not in end.error


async def test_a_cancelled_race_task_ends_with_status_cancelled() -> None:
    recorder = Recorder()
    task = asyncio.create_task(
        agent_loop_parallel(
            "Hi",
            base(),
            [branch(default=Hang("..."), name="a"), branch(default=Hang("..."), name="b")],
            PickFirstEvaluation(),
            events=recorder,
        )
    )
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    end = the_end(recorder)
    assert end.loop_id == "ses"
    assert end.cancelled and end.status == "cancelled" and end.error is None


def test_a_race_stopped_by_keyboard_interrupt_ends_cancelled_naming_the_branch() -> None:
    recorder = Recorder()

    def interrupt(request: StreamRequest) -> Reply:
        raise KeyboardInterrupt

    async def scenario() -> BaseException | None:
        configs = [branch(default=Hang("..."), name="slow"), branch(interrupt, name="bad")]
        try:
            await agent_loop_parallel("Hi", base(), configs, PickFirstEvaluation(), events=recorder)
        except BaseException as exc:
            return exc
        return None

    try:
        raised = asyncio.run(scenario())
    except BaseException as exc:
        pytest.fail(f"{type(exc).__name__} escaped the race's event loop: {exc!r}")
    assert isinstance(raised, KeyboardInterrupt)
    end = the_end(recorder)
    assert end.status == "cancelled" and end.cancelled
    assert end.error == "branch 1 raised KeyboardInterrupt"


def test_a_parallel_loop_end_recorded_before_the_status_field_still_loads() -> None:
    old = (
        '{"type": "parallel_loop_end", "loop_id": "", "timestamp": 1, "session_id": "s", '
        '"selected_loop_id": null, "selected_config_index": null, "cancelled": false}'
    )
    event = AGENT_EVENT_ADAPTER.validate_json(old)
    assert isinstance(event, ParallelLoopEnd)
    assert event.status is None and event.error is None
