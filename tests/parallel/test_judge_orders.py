"""Order-debiased listwise judging and visible fallbacks (issue 17): a judge asked under several
answer orders, its picks aggregated; a position-only judge yields a tie; every strategy that falls
back emits exactly one Warning event with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from phi_core.events import Warning
from phi_core.loop import AgentContext, AgentLoopConfig
from phi_core.parallel import (
    ExecVoteEvaluation,
    LlmJudgeEvaluation,
    MajorityVoteEvaluation,
    PairwiseJudgeEvaluation,
    RegexCheck,
    RubricJudgeEvaluation,
    VerifierEvaluation,
    agent_loop_parallel,
    default_orders,
    shown_candidates,
    strategy_from_name,
)
from phi_core.parallel._strategies import BaseEvaluation
from phi_core.providers import StreamRequest
from phi_core.testing import Reply
from phi_core.types import TextContent, UserMessage

from .helpers import Recorder, answer, branch, provider_of

pytestmark = pytest.mark.usefixtures("strict_loop")


def base() -> AgentContext:
    return AgentContext(session_id="ses")


def names_the_response_containing(word: str):  # type: ignore[no-untyped-def]
    """A content-following judge: replies with the number of the response holding ``word``."""

    def reply(request: StreamRequest) -> Reply:
        last = request.messages[-1]
        assert isinstance(last, UserMessage)
        prompt = "\n".join(c.text for c in last.content if isinstance(c, TextContent))
        shown = shown_candidates(prompt)
        return Reply(str(next(n for n, text in shown.items() if word in text)))

    return reply


async def test_a_judge_that_always_answers_1_yields_a_tie_under_both_orders() -> None:
    judge = branch(default="1", name="judgeprov")
    events = Recorder()
    result = await agent_loop_parallel(
        "q",
        base(),
        [branch(answer("A", 20)), branch(answer("B", 10))],
        LlmJudgeEvaluation(judge, orders=2),
        events=events,
    )
    decision = result.decision
    assert provider_of(judge).calls == 2
    assert decision.tie and decision.details["follows_position"] is True
    assert decision.details["orders"] == [[0, 1], [1, 0]]
    assert decision.details["picks"] == [0, 1]
    assert decision.details["pick_share"] == {0: 0.5, 1: 0.5}
    assert decision.details["position_consistency"] == 0.5
    assert decision.index == 1  # the tie is broken by cost: branch 1 used fewer tokens
    assert "follows position" in decision.rationale and not decision.fallback
    assert decision.trust()["position_consistency"] == 0.5 and decision.trust()["orders"] == 2
    # Both judge calls ran in the race's session under their own deterministic loop ids.
    judge_ends = [e.loop_id for e in events.of_type("agent_end") if ".judgeprov." in e.loop_id]
    assert sorted(judge_ends) == ["ses.judgeprov.m.3", "ses.judgeprov.m.4"]


async def test_a_position_only_judge_ties_among_three_answers_under_three_rotations() -> None:
    judge = branch(default="1")
    result = await agent_loop_parallel(
        "q",
        base(),
        [branch("A"), branch("B"), branch("C")],
        LlmJudgeEvaluation(judge, orders=3),
    )
    decision = result.decision
    assert decision.tie and sorted(decision.details["picks"]) == [0, 1, 2]
    assert decision.details["position_consistency"] == pytest.approx(1 / 3)


async def test_a_judge_that_follows_content_wins_under_every_order() -> None:
    judge = branch(default=names_the_response_containing("right"))
    result = await agent_loop_parallel(
        "q",
        base(),
        [branch("wrong one"), branch("the right one"), branch("wrong two")],
        LlmJudgeEvaluation(judge, orders=3),
    )
    decision = result.decision
    assert decision.index == 1 and not decision.tie
    assert decision.details["picks"] == [1, 1, 1]
    assert decision.details["position_consistency"] == 1.0
    assert decision.details["follows_position"] is False


def test_default_orders_rotate_for_a_local_judge_and_ask_a_vendor_once() -> None:
    local = AgentLoopConfig(model="local:smollm2")
    vendor = AgentLoopConfig(model="openai:gpt-4o-mini")
    assert [default_orders(local, n) for n in (1, 2, 3, 6)] == [1, 2, 3, 4]
    assert [default_orders(vendor, n) for n in (2, 3)] == [1, 1]
    assert LlmJudgeEvaluation(local).orders_for(3) == 3
    assert LlmJudgeEvaluation(vendor, orders=5).orders_for(3) == 3  # at most one per rotation
    with pytest.raises(ValueError, match="orders must be >= 1"):
        LlmJudgeEvaluation(vendor, orders=0)
    built = strategy_from_name("judge", judge_model="local:smollm2", judge_orders=2)
    assert isinstance(built, LlmJudgeEvaluation) and built.orders_for(3) == 2


def rubric_reply(first: float, second: float) -> str:
    entry = (
        '{{"answer": {n}, "reason": "r", "relevance": {v}, "coverage": {v}, "faithfulness": {v}}}'
    )
    return '{"scores": [' + entry.format(n=1, v=first) + ", " + entry.format(n=2, v=second) + "]}"


async def test_a_rubric_judge_that_favours_the_first_answer_ties_under_two_orders() -> None:
    judge = branch(default=rubric_reply(0.9, 0.1))
    result = await agent_loop_parallel(
        "q",
        base(),
        [branch(answer("A", 20)), branch(answer("B", 10))],
        RubricJudgeEvaluation(judge, shuffle=False, orders=2),
    )
    decision = result.decision
    assert provider_of(judge).calls == 2
    assert decision.scores == {0: pytest.approx(0.5), 1: pytest.approx(0.5)}
    assert decision.tie and decision.index == 1  # cheaper
    assert decision.details["position_consistency"] == 0.5
    assert decision.details["orders"] == [[0, 1], [1, 0]]


async def test_a_rubric_judge_that_follows_content_is_consistent_over_orders() -> None:
    def reply(request: StreamRequest) -> Reply:
        last = request.messages[-1]
        assert isinstance(last, UserMessage)
        prompt = "\n".join(c.text for c in last.content if isinstance(c, TextContent))
        good_first = prompt.index("good") < prompt.index("bad")
        return Reply(rubric_reply(0.8, 0.2) if good_first else rubric_reply(0.2, 0.8))

    result = await agent_loop_parallel(
        "q",
        base(),
        [branch("bad answer"), branch("good answer")],
        RubricJudgeEvaluation(branch(default=reply), shuffle=False, orders=2),
    )
    decision = result.decision
    assert decision.index == 1 and not decision.tie
    assert decision.details["position_consistency"] == 1.0
    assert decision.scores[1] == pytest.approx(0.8)


# ------------------------------------------------------------------- fallbacks warn exactly once


GARBAGE = "I cannot decide, both are lovely."


def fallback_cases() -> list[tuple[str, BaseEvaluation, list[str], int, str]]:
    """(name, strategy, branch answers, documented fallback branch, words of the reason)."""
    return [
        ("judge", LlmJudgeEvaluation(branch(default=GARBAGE)), ["A", "B"], 0, "names no response"),
        (
            "judge, three orders",
            LlmJudgeEvaluation(branch(default=GARBAGE), orders=3),
            ["A", "B", "C"],
            0,
            "any of the 3 orders",
        ),
        (
            "rubric",
            RubricJudgeEvaluation(branch(default=GARBAGE), seed=1),
            ["A", "B"],
            0,
            "no usable scores",
        ),
        (
            "pairwise",
            PairwiseJudgeEvaluation(branch(default=GARBAGE)),
            ["A", "B"],
            0,
            "no judge verdict",
        ),
        ("vote", MajorityVoteEvaluation(extract=r"\d+"), ["none", "at all"], 0, "non-empty answer"),
        ("verifier", VerifierEvaluation(RegexCheck(r"\d")), ["x", "y"], 0, "passed verification"),
        ("exec-vote", ExecVoteEvaluation(), ["prose", "more prose"], 0, "runnable Python"),
    ]


@pytest.mark.parametrize("case", fallback_cases(), ids=lambda c: c[0])
async def test_every_fallback_emits_exactly_one_warning_with_the_reason(
    case: tuple[str, BaseEvaluation, list[str], int, str],
) -> None:
    _, strategy, texts, expected, words = case
    events = Recorder()
    result = await agent_loop_parallel(
        "q", base(), [branch(answer(t, 10)) for t in texts], strategy, events=events
    )
    warnings = [e for e in events.events if isinstance(e, Warning)]
    assert len(warnings) == 1
    assert words in warnings[0].message and "fell back" in warnings[0].message
    assert result.decision.fallback and result.selected_index == expected
    assert words in result.decision.rationale


async def test_a_decision_that_did_not_fall_back_emits_no_warning() -> None:
    events = Recorder()
    await agent_loop_parallel(
        "q",
        base(),
        [branch("A"), branch("B")],
        LlmJudgeEvaluation(branch(default="2"), orders=2),
        events=events,
    )
    assert not [e for e in events.events if isinstance(e, Warning)]


async def test_a_judge_reply_cut_short_is_no_verdict_even_when_it_names_a_response() -> None:
    """Cancelled while the judge streams "Response 1 is wrong; the best is", the race must
    not read that as a vote for response 1."""
    from phi_core.cancel import CancelToken
    from phi_core.testing import Hang

    cancel = CancelToken()
    events = Recorder()

    def on_event(event: Any) -> None:
        events(event)
        if event.type == "message_update" and ".judge" in event.loop_id:
            cancel.cancel("user")

    judge = LlmJudgeEvaluation(branch(Hang("Response 1 is wrong; the best is"), name="judge"))
    result = await agent_loop_parallel(
        "q", base(), [branch("A"), branch("B")], judge, events=on_event, cancel=cancel
    )
    assert result.cancelled
    assert result.decision.fallback
    assert "the judge run ended with cancelled" in result.decision.rationale


async def test_a_judge_that_raises_falls_back_and_keeps_the_paid_answers() -> None:
    def broken(request: StreamRequest) -> Reply:
        raise RuntimeError("judge bug")

    result = await agent_loop_parallel(
        "q", base(), [branch("A"), branch("B")], LlmJudgeEvaluation(branch(broken))
    )
    assert result.decision.fallback and result.selected_index == 0
    assert "RuntimeError: judge bug" in result.decision.rationale
    assert [o.text for o in result.outcomes] == ["A", "B"]
