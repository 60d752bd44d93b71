"""LLM, pairwise and rubric judges with scripted judge models (study §2.5, §4.9, issue 5)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from phi_core.errors import AuthError, UserError
from phi_core.events import AgentEnd, ParallelLoopEnd, Warning
from phi_core.loop import AgentContext
from phi_core.parallel import (
    CompositeEvaluation,
    Criterion,
    LlmJudgeEvaluation,
    PairwiseJudgeEvaluation,
    RegexCheck,
    RubricJudgeEvaluation,
    agent_loop_parallel,
    shown_candidates,
)
from phi_core.providers import StreamRequest
from phi_core.testing import Fail, Reply
from phi_core.types import AssistantMessage, TextContent, Usage, UserMessage

from .helpers import Recorder, answer, branch, provider_of

pytestmark = pytest.mark.usefixtures("strict_loop")


def base() -> AgentContext:
    return AgentContext(session_id="ses", agent_id="agent")


def prompt_of(request: StreamRequest) -> str:
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    return "\n".join(c.text for c in last.content if isinstance(c, TextContent))


def shown_responses(prompt: str, label: str = "Response") -> dict[int, str]:
    """``{number: text}`` of the candidates shown in a judge prompt."""
    return shown_candidates(prompt, label)


# --------------------------------------------------------------------------- LlmJudgeEvaluation


async def test_judge_replying_2_selects_the_second_branch_in_the_same_session() -> None:
    judge = branch(answer("2", 11), name="judgeprov")
    events = Recorder()
    result = await agent_loop_parallel(
        "Explain entanglement.",
        base(),
        [branch(answer("A", 3)), branch(answer("B", 4))],
        LlmJudgeEvaluation(judge),
        events=events,
    )
    assert result.selected_index == 1 and len(result.all_outcomes) == 1
    starts = events.of_type("agent_start")
    assert len(starts) == 3
    assert {s.session_id for s in starts} == {"ses"}
    assert starts[-1].loop_id == "ses.judgeprov.m.3" == result.decision.details["judge_loop_id"]
    end = events.events[-1]
    assert isinstance(end, ParallelLoopEnd) and end.selected_config_index == 1
    assert end.evaluation_usage.total == 11
    assert result.total_usage.total == 3 + 4 + 11
    # Judge events come after every branch's AgentEnd and before ParallelLoopEnd.
    judge_positions = [i for i, e in enumerate(events.events) if e.loop_id == "ses.judgeprov.m.3"]
    branch_ends = [
        i
        for i, e in enumerate(events.events)
        if isinstance(e, AgentEnd) and e.loop_id in result.loop_ids
    ]
    assert max(branch_ends) < min(judge_positions) and max(judge_positions) < len(events.events) - 1
    request = provider_of(judge).requests[0]
    assert request.tools == []
    prompt = prompt_of(request)
    assert prompt.startswith("Original query:\nExplain entanglement.\n\n")
    assert shown_responses(prompt) == {1: "A", 2: "B"}
    assert prompt.endswith(
        'Which response is best? Reply with ONLY the response number (e.g., "1" or "2").'
    )
    assert "impartial judge" in (request.system_prompt or "")


async def test_a_judge_replying_garbage_falls_back_to_the_first_success_and_says_why() -> None:
    judge = branch("I cannot decide, both are lovely.")
    result = await agent_loop_parallel(
        "q", base(), [branch("A"), branch("B")], LlmJudgeEvaluation(judge)
    )
    decision = result.decision
    assert decision.index == 0 and decision.fallback
    assert "names no response 1..2" in decision.rationale
    assert decision.details["reply"] == "I cannot decide, both are lovely."


async def test_a_failing_judge_falls_back_and_reports_the_judge_error() -> None:
    judge = branch(Fail(AuthError("judge key revoked")))
    result = await agent_loop_parallel(
        "q", base(), [branch("A"), branch("B")], LlmJudgeEvaluation(judge)
    )
    assert result.decision.fallback and result.selected_index == 0
    assert "judge key revoked" in result.decision.rationale


async def test_the_judge_never_sees_failed_branches_and_they_cannot_win() -> None:
    judge = branch("1")
    configs = [branch(Fail(AuthError("down"))), branch("B answer"), branch("C answer")]
    result = await agent_loop_parallel("q", base(), configs, LlmJudgeEvaluation(judge))
    shown = shown_responses(prompt_of(provider_of(judge).requests[0]))
    assert shown == {1: "B answer", 2: "C answer"}
    assert result.selected_index == 1


async def test_one_successful_branch_wins_without_calling_the_judge() -> None:
    judge = branch("2")
    result = await agent_loop_parallel(
        "q", base(), [branch(Fail(AuthError("x"))), branch("only")], LlmJudgeEvaluation(judge)
    )
    assert result.selected_index == 1
    assert provider_of(judge).calls == 0
    assert result.decision.details == {"judge_called": False}


async def test_continue_mode_judge_reads_last_user_message_and_prior_transcript() -> None:
    context = base()
    context.messages += [
        UserMessage.text("What is QM?"),
        AssistantMessage(content=[TextContent(text="Physics of the small.")]),
        UserMessage.text("And entanglement?"),
    ]
    judge = branch("1")
    await agent_loop_parallel([], context, [branch("A"), branch("B")], LlmJudgeEvaluation(judge))
    prompt = prompt_of(provider_of(judge).requests[0])
    assert prompt.startswith(
        "Prior conversation context:\nUser: What is QM?\nAssistant: Physics of the small.\n\n"
        "Original query:\nAnd entanglement?\n\n"
    )


async def test_over_budget_judge_compacts_and_warns_best_effort() -> None:
    long = "\n\n".join(f"paragraph {i} " + "word " * 200 for i in range(20))
    judge = branch("2")
    events = Recorder()
    result = await agent_loop_parallel(
        "q",
        base(),
        [branch(long), branch(long + " end"), branch(long + " fin")],
        LlmJudgeEvaluation(judge, max_context_tokens=100),
        events=events,
    )
    warnings = [e for e in events.events if isinstance(e, Warning)]
    assert len(warnings) == 1
    assert warnings[0].loop_id == result.decision.details["judge_loop_id"]
    assert "budget of 100 tokens" in warnings[0].message
    assert events.events.index(warnings[0]) < len(events.events) - 1
    assert "outputs:tier3" in result.decision.details["compaction"]
    # budget 80: context floor 200 chars; outputs cut to max(200, 600 * 4 // 3) = 800 chars
    prompt = prompt_of(provider_of(judge).requests[0])
    assert all(len(shown) <= 800 for shown in shown_responses(prompt).values())
    assert len(long) > 20_000 and len(prompt) < 3 * 800 + 600  # framing and fences
    assert result.selected_messages[-1].content[0].text == long + " end"  # type: ignore[union-attr]


async def test_within_budget_judge_sees_everything_and_does_not_warn() -> None:
    judge = branch("1")
    events = Recorder()
    await agent_loop_parallel(
        "q",
        base(),
        [branch("short A"), branch("short B")],
        LlmJudgeEvaluation(judge, max_context_tokens=10_000),
        events=events,
    )
    assert not [e for e in events.events if isinstance(e, Warning)]
    assert shown_responses(prompt_of(provider_of(judge).requests[0])) == {
        1: "short A",
        2: "short B",
    }


async def test_shuffled_judge_keeps_the_mapping_back_to_branches() -> None:
    def pick_best(request: StreamRequest) -> Reply:
        shown = shown_responses(prompt_of(request))
        return Reply(str(next(n for n, text in shown.items() if text == "the best")))

    for seed in range(4):
        judge = branch(pick_best)
        result = await agent_loop_parallel(
            "q",
            base(),
            [branch("meh"), branch("okay"), branch("the best"), branch("poor")],
            LlmJudgeEvaluation(judge, shuffle=True, seed=seed),
        )
        assert result.selected_index == 2


def test_judge_rejects_a_nonpositive_budget() -> None:
    with pytest.raises(ValueError, match="max_context_tokens must be >= 1"):
        LlmJudgeEvaluation("scripted:judge", max_context_tokens=0)


# --------------------------------------------------------------------------- pairwise


async def test_a_judge_that_always_says_1_has_full_flip_rate_and_only_ties() -> None:
    judge = branch(name="judge", default="1")
    configs = [branch(answer("A", 30)), branch(answer("B", 10)), branch(answer("C", 20))]
    events = Recorder()
    result = await agent_loop_parallel(
        "q", base(), configs, PairwiseJudgeEvaluation(judge), events=events
    )
    decision = result.decision
    assert decision.details["flip_rate"] == 1.0
    assert all(p["winner"] is None and p["flipped"] for p in decision.details["pairs"])
    assert decision.tie
    assert decision.scores == {0: 1.0, 1: 1.0, 2: 1.0}
    assert result.selected_index == 1  # all tied: the cheapest branch wins
    assert "flip rate 100%" in decision.rationale
    assert decision.details["judge_calls"] == 6 == provider_of(judge).calls
    judge_ids = sorted({e.loop_id for e in events.of_type("agent_start")} - set(result.loop_ids))
    assert judge_ids == [f"ses.judge.m.{n}" for n in range(4, 10)]


async def test_a_consistent_pairwise_judge_finds_the_best_answer_in_both_orders() -> None:
    def prefer_good(request: StreamRequest) -> Reply:
        shown = shown_responses(prompt_of(request))
        if "GOOD" in shown[1]:
            winner = 1
        elif "GOOD" in shown[2]:
            winner = 2
        else:
            winner = 0
        return Reply(json.dumps({"reason": "more correct", "winner": winner}))

    judge = branch(name="judge", default=prefer_good)
    configs = [branch("bad"), branch("GOOD answer"), branch("also bad")]
    result = await agent_loop_parallel("q", base(), configs, PairwiseJudgeEvaluation(judge))
    decision = result.decision
    assert result.selected_index == 1 and not decision.tie
    assert decision.details["flip_rate"] == 0.0
    assert decision.scores == {0: 0.5, 1: 2.0, 2: 0.5}
    assert provider_of(judge).requests[0].response_format is not None


async def test_many_branches_run_a_knockout() -> None:
    def prefer_longer(request: StreamRequest) -> Reply:
        shown = shown_responses(prompt_of(request))
        return Reply("1" if len(shown[1]) > len(shown[2]) else "2")

    judge = branch(name="judge", default=prefer_longer)
    texts = ["a", "bbb", "cc", "dddddd", "eeee"]
    result = await agent_loop_parallel(
        "q",
        base(),
        [branch(t) for t in texts],
        PairwiseJudgeEvaluation(judge, round_robin_max=3),
    )
    assert result.decision.details["mode"] == "knockout"
    assert result.selected_index == 3
    assert result.decision.details["judge_calls"] == 2 * 4  # 2 + 1 + 1 pairs, two orders each


async def test_a_garbage_pairwise_judge_is_reported_as_a_fallback() -> None:
    judge = branch(name="judge", default="no idea")
    result = await agent_loop_parallel(
        "q",
        base(),
        [branch(answer("A", 9)), branch(answer("B", 4))],
        PairwiseJudgeEvaluation(judge),
    )
    assert result.decision.fallback and result.decision.details["flip_rate"] is None
    assert result.selected_index == 1


# --------------------------------------------------------------------------- rubric


def rubric_reply(scores_by_text: dict[str, tuple[float, float, float]]) -> Any:
    def reply(request: StreamRequest) -> Reply:
        shown = shown_responses(prompt_of(request), label="Answer")
        entries = [
            {
                "answer": n,
                "reason": "because",
                "relevance": scores_by_text[text][0],
                "coverage": scores_by_text[text][1],
                "faithfulness": scores_by_text[text][2],
            }
            for n, text in shown.items()
        ]
        return Reply(json.dumps({"scores": entries}), usage=Usage(input=50, output=20))

    return reply


async def test_rubric_scores_come_back_per_branch_despite_shuffling() -> None:
    reply = rubric_reply({"A": (0.2, 0.2, 0.2), "B": (1.0, 0.7, 0.9), "C": (0.5, 0.5, 0.5)})
    for seed in range(3):
        judge = branch(reply, name="judge")
        result = await agent_loop_parallel(
            "q",
            base(),
            [branch("A"), branch("B"), branch("C")],
            RubricJudgeEvaluation(judge, seed=seed),
        )
        decision = result.decision
        assert result.selected_index == 1
        assert decision.scores == pytest.approx({0: 0.2, 1: 2.6 / 3, 2: 0.5})
        assert decision.details["per_criterion"][1] == {
            "relevance": 1.0,
            "coverage": 0.7,
            "faithfulness": 0.9,
        }
        assert decision.usage.total == 70
        request = provider_of(judge).requests[0]
        assert request.response_format is not None
        schema = request.response_format.schema_ or {}
        item = schema["properties"]["scores"]["items"]
        assert list(item["properties"])[:2] == ["answer", "reason"]  # reason before scores


async def test_rubric_weights_change_the_winner() -> None:
    reply = rubric_reply({"A": (1.0, 0.0, 0.0), "B": (0.0, 0.0, 1.0)})
    criteria = [
        Criterion("relevance", 1.0),
        Criterion("coverage", 1.0),
        Criterion("faithfulness", 5.0),
    ]
    result = await agent_loop_parallel(
        "q", base(), [branch("A"), branch("B")], RubricJudgeEvaluation(branch(reply), criteria)
    )
    assert result.selected_index == 1


async def test_a_garbage_rubric_reply_falls_back_and_says_so() -> None:
    result = await agent_loop_parallel(
        "q", base(), [branch("A"), branch("B")], RubricJudgeEvaluation(branch("great answers!"))
    )
    assert result.decision.fallback and result.selected_index == 0
    assert "no usable scores" in result.decision.rationale
    assert result.decision.details["unscored"] == [0, 1]


def test_rubric_refuses_bad_criteria_at_construction() -> None:
    with pytest.raises(UserError, match="unique"):
        RubricJudgeEvaluation("scripted:j", [Criterion("a"), Criterion("a")])
    with pytest.raises(UserError, match="weights"):
        RubricJudgeEvaluation("scripted:j", [Criterion("a", -1.0)])
    with pytest.raises(UserError, match="at least one criterion"):
        RubricJudgeEvaluation("scripted:j", [])


# --------------------------------------------------------------------------- composite


async def test_composite_filters_cheaply_then_judges_only_the_survivors() -> None:
    judge = branch("2")
    strategy = CompositeEvaluation([RegexCheck(r"\d")], then=LlmJudgeEvaluation(judge))
    configs = [branch("no digits"), branch("answer 4"), branch("no"), branch("answer four=4")]
    result = await agent_loop_parallel("q", base(), configs, strategy)
    shown = shown_responses(prompt_of(provider_of(judge).requests[0]))
    assert shown == {1: "answer 4", 2: "answer four=4"}
    assert result.selected_index == 3
    assert result.decision.strategy == "composite(judge)"
    assert result.decision.details["survivors"] == [1, 3]


async def test_composite_with_a_single_survivor_skips_the_judge() -> None:
    judge = branch("1")
    strategy = CompositeEvaluation([lambda text: "yes" in text], then=LlmJudgeEvaluation(judge))
    result = await agent_loop_parallel("q", base(), [branch("no"), branch("yes")], strategy)
    assert result.selected_index == 1 and provider_of(judge).calls == 0
