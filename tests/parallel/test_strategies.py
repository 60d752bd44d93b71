"""Cheap strategies, verifiers, majority vote and strategy_from_name (issue 5)."""

from __future__ import annotations

import asyncio

import pytest

from phi_core.cancel import CancelToken
from phi_core.errors import AuthError, UserError
from phi_core.events import Emitter
from phi_core.loop import AgentContext
from phi_core.parallel import (
    STRATEGY_NAMES,
    ElaborateEvaluation,
    JsonSchemaCheck,
    LlmJudgeEvaluation,
    MajorityVoteEvaluation,
    PairwiseJudgeEvaluation,
    PickFirstEvaluation,
    PredicateCheck,
    PythonTestsCheck,
    RegexCheck,
    RubricJudgeEvaluation,
    TokenEfficientEvaluation,
    TransparentEvaluation,
    VerifierEvaluation,
    agent_loop_parallel,
    strategy_from_name,
)
from phi_core.parallel._types import ParallelLoopOutcome
from phi_core.testing import Fail, ScriptedProvider
from phi_core.types import AssistantMessage, TextContent, Usage

from .helpers import answer, branch

pytestmark = pytest.mark.usefixtures("strict_loop")


def base() -> AgentContext:
    return AgentContext(session_id="ses", agent_id="agent")


def outcome(
    index: int, text: str = "x", tokens: int = 0, status: str = "ok"
) -> ParallelLoopOutcome:
    return ParallelLoopOutcome(
        config_index=index,
        loop_id=f"ses.m.{index + 1}",
        context=base(),
        config=branch("unused"),
        new_messages=[AssistantMessage(content=[TextContent(text=text)])],
        usage=Usage(total=tokens),
        status=status,  # type: ignore[arg-type]
        error=None if status == "ok" else "it failed",
    )


async def evaluate(strategy: object, outcomes: list[ParallelLoopOutcome]) -> int | None:
    decision = await strategy.evaluate([], outcomes, events=Emitter(), cancel=CancelToken())  # type: ignore[attr-defined]
    return decision.index  # type: ignore[no-any-return]


async def test_phi_core_unit_examples_for_the_token_strategies() -> None:
    usages = [outcome(i, tokens=t) for i, t in enumerate([500, 50, 200])]
    assert (
        await evaluate(PickFirstEvaluation(), [outcome(0, tokens=300), outcome(1, tokens=50)]) == 0
    )
    assert await evaluate(TokenEfficientEvaluation(), usages) == 1
    assert await evaluate(ElaborateEvaluation(), usages) == 0
    assert await evaluate(TransparentEvaluation(), [outcome(0)]) == 0


async def test_token_ties_go_first_for_efficient_and_last_for_elaborate() -> None:
    tied = [outcome(i, tokens=0) for i in range(3)]
    assert await evaluate(TokenEfficientEvaluation(), tied) == 0
    assert await evaluate(ElaborateEvaluation(), tied) == 2


async def test_built_ins_never_pick_a_failed_branch_while_one_succeeded() -> None:
    mixed = [
        outcome(0, tokens=0, status="error"),
        outcome(1, tokens=90),
        outcome(2, tokens=999, status="timeout"),
    ]
    for strategy in (
        PickFirstEvaluation(),
        TokenEfficientEvaluation(),
        ElaborateEvaluation(),
        MajorityVoteEvaluation(),
    ):
        assert await evaluate(strategy, mixed) == 1


async def test_built_ins_select_nothing_when_every_branch_failed() -> None:
    failed = [outcome(0, status="error"), outcome(1, status="cancelled")]
    for strategy in (PickFirstEvaluation(), TokenEfficientEvaluation(), MajorityVoteEvaluation()):
        assert await evaluate(strategy, failed) is None


async def test_majority_vote_normalises_answers_and_breaks_ties_by_cost() -> None:
    votes = [
        outcome(0, "42", 9),
        outcome(1, "  42. ", 5),
        outcome(2, "Forty", 1),
        outcome(3, "41", 2),
    ]
    strategy = MajorityVoteEvaluation()
    decision = await strategy.evaluate([], votes, events=Emitter(), cancel=CancelToken())
    assert decision.index == 1  # cheapest branch of the winning answer
    assert decision.votes == {"42": 2, "forty": 1, "41": 1} and not decision.tie
    tie = [outcome(0, "a", 9), outcome(1, "b", 3), outcome(2, "a", 7), outcome(3, "b", 8)]
    decision = await strategy.evaluate([], tie, events=Emitter(), cancel=CancelToken())
    assert decision.tie and decision.index == 1


async def test_majority_vote_can_extract_the_final_number() -> None:
    strategy = MajorityVoteEvaluation(extract=r"-?\d+")
    answers = [outcome(0, "So 3 + 4 = 7"), outcome(1, "The result is 7."), outcome(2, "I get 8")]
    assert await evaluate(strategy, answers) == 0
    with pytest.raises(UserError, match="not a valid regex"):
        MajorityVoteEvaluation(extract="(")


async def test_python_tests_check_runs_the_answer_in_a_subprocess() -> None:
    tests = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
    check = PythonTestsCheck(tests, timeout=20)
    good = outcome(0, "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\n")
    bad = outcome(1, "```python\ndef add(a, b):\n    return a - b\n```")
    token = CancelToken()
    passed, failed = await asyncio.gather(
        check.check(good, cancel=token), check.check(bad, cancel=token)
    )
    assert passed.passed, passed.reason
    assert not failed.passed and "AssertionError" in failed.reason


async def test_python_tests_check_kills_an_answer_that_never_ends() -> None:
    check = PythonTestsCheck("assert True", timeout=0.5)
    result = await check.check(outcome(0, "while True:\n    pass\n"), cancel=CancelToken())
    assert not result.passed and "timed out after 0.5s" in result.reason


def test_checks_refuse_bad_configuration_at_construction() -> None:
    with pytest.raises(UserError, match="do not compile"):
        PythonTestsCheck("assert (")
    with pytest.raises(UserError, match="timeout must be > 0"):
        PythonTestsCheck("assert True", timeout=0)
    with pytest.raises(UserError, match="invalid JSON schema"):
        JsonSchemaCheck({"type": "no-such-type"})
    with pytest.raises(UserError, match="not a valid regex"):
        RegexCheck("[")
    with pytest.raises(UserError, match="at least one check"):
        VerifierEvaluation()


async def test_json_schema_check_reads_fenced_or_embedded_json() -> None:
    check = JsonSchemaCheck(
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    )
    token = CancelToken()
    fenced = await check.check(outcome(0, 'Result:\n```json\n{"n": 3}\n```'), cancel=token)
    embedded = await check.check(outcome(1, 'It is {"n": 4} indeed'), cancel=token)
    wrong = await check.check(outcome(2, '{"n": "three"}'), cancel=token)
    missing = await check.check(outcome(3, "no json here"), cancel=token)
    assert fenced.passed and embedded.passed
    assert not wrong.passed and "n" in wrong.reason
    assert not missing.passed and "no JSON" in missing.reason


async def test_predicates_may_be_async_and_a_raising_predicate_fails_the_answer() -> None:
    async def contains_yes(text: str) -> bool:
        return "yes" in text

    def explode(text: str) -> bool:
        raise KeyError("boom")

    token = CancelToken()
    assert (await PredicateCheck(contains_yes).check(outcome(0, "yes"), cancel=token)).passed
    failed = await PredicateCheck(explode).check(outcome(0, "yes"), cancel=token)
    assert not failed.passed and "raised KeyError" in failed.reason


async def test_verifier_prefers_the_fastest_passing_branch_when_asked() -> None:
    fast, slow = outcome(0, "ok", tokens=100), outcome(1, "ok", tokens=1)
    fast.latency_s, slow.latency_s = 0.1, 2.0
    by_latency = VerifierEvaluation(RegexCheck("ok"), prefer="latency")
    by_cost = VerifierEvaluation(RegexCheck("ok"))
    assert await evaluate(by_latency, [fast, slow]) == 0
    assert await evaluate(by_cost, [fast, slow]) == 1


async def test_verifier_with_no_passing_branch_falls_back_or_selects_nothing() -> None:
    answers = [outcome(0, "no", tokens=9), outcome(1, "nope", tokens=3)]
    cheapest = await VerifierEvaluation(RegexCheck("yes")).evaluate(
        [], answers, events=Emitter(), cancel=CancelToken()
    )
    assert cheapest.index == 1 and cheapest.fallback
    strict = VerifierEvaluation(RegexCheck("yes"), on_fail="none")
    assert await evaluate(strict, answers) is None


async def test_strategy_from_name_builds_every_listed_strategy() -> None:
    judge = ScriptedProvider(default="1", name="judge")
    built = {
        name: strategy_from_name(name, judge_model="judge:m", judge_provider=judge)
        for name in STRATEGY_NAMES
    }
    assert isinstance(built["judge"], LlmJudgeEvaluation)
    assert isinstance(built["pairwise"], PairwiseJudgeEvaluation)
    assert isinstance(built["rubric"], RubricJudgeEvaluation)
    assert isinstance(built["vote"], MajorityVoteEvaluation)
    assert isinstance(built["pick-first"], PickFirstEvaluation)
    assert isinstance(built["token-efficient"], TokenEfficientEvaluation)
    assert isinstance(built["elaborate"], ElaborateEvaluation)
    assert isinstance(strategy_from_name("Token_Efficient"), TokenEfficientEvaluation)
    result = await agent_loop_parallel("q", base(), [branch("A"), branch("B")], built["judge"])
    assert result.selected_index == 0 and judge.calls == 1


def test_strategy_from_name_suggests_the_closest_name() -> None:
    with pytest.raises(UserError, match="Did you mean 'pairwise'"):
        strategy_from_name("pairwse")
    with pytest.raises(UserError, match="Unknown provider"):
        strategy_from_name("judge", judge_model="nosuch:model")


async def test_transparent_refuses_several_outcomes_even_when_called_directly() -> None:
    with pytest.raises(UserError, match="exactly one config"):
        await evaluate(TransparentEvaluation(), [outcome(0), outcome(1)])


async def test_failed_single_branch_under_transparent_is_reported() -> None:
    result = await agent_loop_parallel(
        "q", base(), [branch(Fail(AuthError("nope")))], TransparentEvaluation()
    )
    assert result.all_failed and result.selected is None


async def test_vote_in_a_race_reports_votes_in_the_end_event() -> None:
    seen: list[object] = []
    configs = [branch(answer("Paris", 5)), branch(answer("paris.", 3)), branch(answer("Lyon", 1))]
    result = await agent_loop_parallel(
        "q", base(), configs, MajorityVoteEvaluation(), events=seen.append
    )
    assert result.selected_index == 1
    end = seen[-1]
    assert end.decision["votes"] == {"paris": 2, "lyon": 1}  # type: ignore[attr-defined]


async def test_a_check_that_raises_fails_the_answer_not_the_race() -> None:
    class Broken:
        name = "broken"

        async def check(self, outcome: ParallelLoopOutcome, *, cancel: CancelToken) -> object:
            raise OSError("no python here")

    for early in (True, False):
        verifier = VerifierEvaluation(Broken(), early_accept=early)  # type: ignore[arg-type]
        result = await agent_loop_parallel(
            "q", base(), [branch(answer("a", 5)), branch(answer("b", 2))], verifier
        )
        assert result.selected_index == 1 and result.decision.fallback
        assert "raised OSError: no python here" in result.decision.details["reasons"][0]
