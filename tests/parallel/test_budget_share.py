"""A token budget is shared fairly by a race's concurrent calls (red-team finding 4).

Before: the first branch reserved the whole budget as its output limit, its siblings ended
``over_budget`` and the judge was skipped, though the race used a few tokens.
"""

from __future__ import annotations

import pytest

from phi_core.loop import AgentContext
from phi_core.metering import Budget, CallRecord, Meter, reserve, settle, sharing
from phi_core.parallel import LlmJudgeEvaluation, PickFirstEvaluation, agent_loop_parallel
from phi_core.testing import Reply
from phi_core.types import Usage

from .helpers import Recorder, answer, branch, provider_of

pytestmark = pytest.mark.usefixtures("strict_loop")


def base() -> AgentContext:
    return AgentContext(session_id="ses")


async def test_a_generous_token_budget_runs_every_branch_and_the_judge() -> None:
    judge = branch(default="2", name="judge")
    result = await agent_loop_parallel(
        "Capital of France?",
        base(),
        [branch(answer("Lyon.", 8)), branch(answer("Paris.", 8)), branch(answer("Nice.", 8))],
        LlmJudgeEvaluation(judge),
        budget=Budget(max_tokens=2000),
    )
    assert [o.status for o in result.outcomes] == ["ok", "ok", "ok"]
    assert provider_of(judge).calls == 1 and result.selected_index == 1
    assert not result.decision.fallback
    assert result.total_usage.total <= 2000


async def test_branches_that_write_all_they_may_still_never_exceed_the_budget() -> None:
    """Each branch writes until its output limit: every branch gets a share, none the whole."""
    long = "word " * 4000
    events = Recorder()
    configs = [branch(default=Reply(long), name=f"b{k}") for k in range(3)]
    result = await agent_loop_parallel(
        "Write a lot.",
        base(),
        configs,
        LlmJudgeEvaluation(branch(default="1", name="judge")),
        budget=Budget(max_tokens=3000),
        events=events,
    )
    assert [o.status for o in result.outcomes] == ["ok", "ok", "ok"]
    limits = [provider_of(c).requests[0].max_tokens for c in configs]
    assert all(limit is not None and limit < 3000 // 2 for limit in limits)
    assert result.total_usage.total <= 3000


def test_concurrent_reservations_split_what_is_left() -> None:
    meter = Meter(Budget(max_tokens=1000))
    with sharing(4):
        held = [
            reserve(
                input_tokens=10,
                max_output=None,
                model_max_output=None,
                pricing=None,
                meters=(meter,),
            )
            for _ in range(3)
        ]
    caps = [r.max_output for r in held]
    assert all(cap is not None and 200 <= cap <= 250 for cap in caps)
    assert sum(r.tokens for r in held) <= 1000
    for r in held:
        settle(r, CallRecord(model="m", usage=Usage(input=10, output=5), cost_usd=0.0, latency_s=0))
    # what the calls did not use is free again: a later lone call may take the rest
    alone = reserve(
        input_tokens=10, max_output=None, model_max_output=None, pricing=None, meters=(meter,)
    )
    assert alone.max_output == 1000 - 3 * 15 - 10


async def test_without_a_judge_the_branches_share_the_budget_between_themselves() -> None:
    configs = [branch(answer("A")), branch(answer("B"))]
    await agent_loop_parallel(
        "q", base(), configs, PickFirstEvaluation(), budget=Budget(max_tokens=1000)
    )
    first, second = (provider_of(c).requests[0].max_tokens for c in configs)
    assert first is not None and second is not None
    assert 400 <= first <= 500 and 400 <= second <= 500
