"""AgentOpt's newer selectors: low-rank matrix UCB and LM proposal (issue 20, point 6)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from phi_core.errors import BadRequestError
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.select import Arena, SearchSpace, make_algorithm, run_algorithm
from phi_core.select._lowrank import LowRankMatrixUCB
from phi_core.select._proposal import LMProposal, parse_proposals
from phi_core.testing import Fail, Reply, ScriptedProvider

from .select_worlds import MatrixEvaluator, bernoulli_world, select

SPACE = SearchSpace({"planner": ["gpt-4o", "gpt-4o-mini", "haiku"], "solver": ["opus", "qwen3"]})
SCRIPTED = ModelConfig(provider="scripted", id="proposer", api="scripted")


def request_text(request: StreamRequest) -> str:
    return "".join(getattr(block, "text", "") for block in request.messages[-1].content)


# --------------------------------------------------------------------------- parsing


def test_a_json_reply_inside_prose_and_code_fences_names_its_combinations() -> None:
    reply = (
        "Sure! Here are my picks:\n```json\n"
        '{"combinations": [{"planner": "haiku", "solver": "opus"},'
        ' {"planner": "GPT-4o-mini", "solver": "Qwen3"}]}\n```\nGood luck.'
    )
    assert [SPACE.name(k) for k in parse_proposals(reply, SPACE)] == [
        "planner=haiku + solver=opus",
        "planner=gpt-4o-mini + solver=qwen3",
    ]


def test_agentopts_single_combination_form_and_a_bare_list_are_read() -> None:
    single = '{"combination": {"planner": "gpt-4o", "solver": "qwen3"}, "reasoning": "cheap"}'
    bare = '[{"planner": "haiku", "solver": "qwen3"}]'
    assert [SPACE.name(k) for k in parse_proposals(single, SPACE)] == [
        "planner=gpt-4o + solver=qwen3"
    ]
    assert [SPACE.name(k) for k in parse_proposals(bare, SPACE)] == ["planner=haiku + solver=qwen3"]


def test_step_equals_candidate_text_is_read_when_there_is_no_json() -> None:
    reply = "Try planner=gpt-4o-mini + solver=opus first.\nThen planner=haiku, solver=qwen3"
    assert [SPACE.name(k) for k in parse_proposals(reply, SPACE)] == [
        "planner=gpt-4o-mini + solver=opus",
        "planner=haiku + solver=qwen3",
    ]


@pytest.mark.parametrize(
    "reply",
    [
        "I think the best model is probably a large one.",
        '{"combinations": [{"planner": "llama", "solver": "opus"}]}',  # unknown candidate
        '{"combinations": [{"planner": "haiku"}]}',  # a step missing
        '{"combinations": [{"planner": "gpt", "solver": "opus"}]}',  # ambiguous: gpt-4o(-mini)
        "{not json",
    ],
)
def test_unusable_replies_name_nothing(reply: str) -> None:
    assert parse_proposals(reply, SPACE) == []


# --------------------------------------------------------------------------- LM proposal


def world() -> tuple[np.ndarray, np.ndarray]:
    """6 combinations x 40 questions; haiku+qwen3 (index 5) best, haiku+opus (4) second."""
    scores = bernoulli_world([0.4, 0.5, 0.3, 0.45, 0.7, 0.85], 40, seed=3)
    costs = np.tile(np.array([[5.0], [1.0], [2.0], [0.5], [4.0], [0.2]]) / 1000, (1, 40))
    return scores, costs


async def test_lm_proposal_evaluates_what_the_model_proposes_and_shows_it_the_results(
    strict_loop: Any,
) -> None:
    provider = ScriptedProvider(
        [
            Reply('{"combinations": [{"planner": "haiku", "solver": "opus"}]}'),
            Reply('Next: {"combinations": [{"planner": "haiku", "solver": "qwen3"}]}'),
        ]
    )
    scores, costs = world()
    evaluator = MatrixEvaluator(scores, costs)
    arena = Arena(len(SPACE), 40, evaluator, seed=0, names=[SPACE.name(k) for k in range(6)])
    algorithm = make_algorithm(
        "lm_proposal",
        proposer=SCRIPTED,
        provider=provider,
        budget_fraction=2 / 6,
        per_round=1,
        model_prices={"opus": {"input_price": 5, "output_price": 25}},
        node_descriptions={"planner": "writes the plan"},
    )
    pick = await run_algorithm(algorithm, arena, SPACE)
    assert SPACE.name(pick) == "planner=haiku + solver=qwen3"
    assert sorted({k for k, _ in evaluator.requested}) == [4, 5]  # nothing else was run
    assert arena.count(4) == arena.count(5) == 40  # proposals run on the full dataset
    assert isinstance(algorithm, LMProposal) and algorithm.proposed == 2
    assert algorithm.warnings == []
    first, second = (request_text(r) for r in provider.requests)
    assert "opus ($5 in / $25 out per million tokens)" in first
    assert "planner (writes the plan)" in first
    assert "Results so far" not in first
    accuracy = 100 * scores[4].mean()
    assert f"{json.dumps({'planner': 'haiku', 'solver': 'opus'})}: accuracy {accuracy:.1f} %" in (
        second
    )


async def test_lm_proposal_falls_back_with_a_warning_when_replies_are_unusable(
    strict_loop: Any,
) -> None:
    provider = ScriptedProvider(default=Reply("The strongest models, obviously."))
    scores, costs = world()
    evaluator = MatrixEvaluator(scores, costs)
    arena = Arena(len(SPACE), 40, evaluator, seed=1)
    algorithm = make_algorithm(
        "lm_proposal", proposer=SCRIPTED, provider=provider, budget_fraction=0.5, per_round=2
    )
    pick = await run_algorithm(algorithm, arena, SPACE)
    evaluated = sorted({k for k, _ in evaluator.requested})
    assert len(evaluated) == 3 and pick in evaluated
    assert provider.calls == 2 * 2  # two rounds (2 + 1 combinations), two attempts each
    assert len(algorithm.warnings) == 2
    assert "gave no usable combination in 2 tries" in algorithm.warnings[0]
    assert "The strongest models" in algorithm.warnings[0]  # the reply that was unusable


async def test_a_failing_proposer_call_falls_back_and_says_why(strict_loop: Any) -> None:
    provider = ScriptedProvider(default=Fail(BadRequestError("prompt rejected")))
    scores, costs = world()
    arena = Arena(len(SPACE), 40, MatrixEvaluator(scores, costs), seed=0)
    algorithm = make_algorithm(
        "lm_proposal", proposer=SCRIPTED, provider=provider, budget_fraction=1 / 6, attempts=1
    )
    pick = await run_algorithm(algorithm, arena, SPACE)
    assert arena.count(pick) == 40
    assert len(algorithm.warnings) == 1 and "prompt rejected" in algorithm.warnings[0]


async def test_lm_proposal_warnings_reach_the_selection_result(strict_loop: Any) -> None:
    from phi_core.select import ModelSelector

    async def agent(models: dict[str, str], question: int) -> int:
        return question

    provider = ScriptedProvider(default=Reply("no idea"))
    selector = ModelSelector(
        agent,
        {"solver": ["a", "b", "c"]},
        [(1, 1), (2, 2)],
        lambda expected, actual: float(expected == actual),
        algorithm="lm_proposal",
        algorithm_params={"proposer": SCRIPTED, "provider": provider, "budget_fraction": 0.3},
        cache=False,
        journal=False,
        model_handles=False,
        seed=0,
    )
    result = await selector.select_best()
    assert any(w.startswith("lm_proposal: round 1:") for w in result.warnings)


@pytest.mark.local_model
async def test_lm_proposal_runs_on_the_embedded_model(
    strict_loop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHI_LOCAL_THREADS", "1")
    scores, costs = world()
    evaluator = MatrixEvaluator(scores, costs)
    arena = Arena(len(SPACE), 40, evaluator, seed=0)
    algorithm = make_algorithm(
        "lm_proposal", proposer="local:smollm2", budget_fraction=2 / 6, attempts=1, max_tokens=80
    )
    assert isinstance(algorithm, LMProposal)
    pick = await run_algorithm(algorithm, arena, SPACE)
    evaluated = sorted({k for k, _ in evaluator.requested})
    assert len(evaluated) == 2 and pick in evaluated
    # a 135M model's reply is either parsed or the round is recorded as a fallback
    assert algorithm.proposed + sum("chosen by rule" in w for w in algorithm.warnings) >= 1


# --------------------------------------------------------------------------- low-rank matrix UCB


def test_the_low_rank_completion_predicts_unseen_cells_better_than_row_means() -> None:
    rng = np.random.default_rng(0)
    quality = rng.uniform(0.2, 0.9, 30)
    easiness = rng.uniform(0.3, 1.0, 80)
    truth = np.clip(quality[:, None] * easiness[None, :] * 1.2, 0, 1)  # exactly rank one
    arena = Arena(30, 80, MatrixEvaluator(truth), seed=0, shuffle=False)
    seen = rng.uniform(size=truth.shape) < 0.3
    for k in range(30):
        arena.observed[k] = seen[k]
        arena.scores[k] = np.where(seen[k], truth[k], 0.0)
    algorithm = LowRankMatrixUCB(ensemble_size=8, iterations=30)
    mu, sigma = algorithm._complete(arena, np.random.default_rng(1))
    hidden = ~seen
    row_mean = (truth * seen).sum(axis=1) / seen.sum(axis=1)
    lowrank_error = np.sqrt(((mu - truth)[hidden] ** 2).mean())
    row_mean_error = np.sqrt(((row_mean[:, None] - truth)[hidden] ** 2).mean())
    assert lowrank_error < 0.5 * row_mean_error
    assert (sigma >= 0).all() and sigma[hidden].mean() > 0


async def test_low_rank_matrix_ucb_stops_at_its_budget_and_finds_the_clear_best(
    space_3x4: SearchSpace,
) -> None:
    probs = [0.30, 0.35, 0.40, 0.45, 0.40, 0.50, 0.55, 0.90, 0.35, 0.45, 0.50, 0.60]
    scores = bernoulli_world(probs, 200, seed=1)
    for seed in range(3):
        pick, arena = await select("matrix_ucb_lrf", space_3x4, scores, seed=seed)
        assert space_3x4.name(pick) == "planner=p1 + solver=s3"
        assert arena.evaluations == int(np.ceil(0.25 * scores.size))


def test_bad_low_rank_parameters_are_user_errors() -> None:
    from phi_core.errors import UserError

    with pytest.raises(UserError, match="budget_fraction"):
        make_algorithm("matrix_ucb_lrf", budget_fraction=0)
    with pytest.raises(UserError, match="drop_probability"):
        make_algorithm("matrix_ucb_lrf", drop_probability=1.0)


# --------------------------------------------------------------------------- determinism


def proposer_params() -> dict[str, Any]:
    def answer(request: StreamRequest) -> Reply:  # proposes the first untested solver
        text = request_text(request)
        for c in ("s2", "s0", "s3", "s1"):
            if f'"solver": "{c}"' not in text:
                return Reply(json.dumps({"combination": {"planner": "p1", "solver": c}}))
        return Reply("nothing left")

    return {"proposer": SCRIPTED, "provider": ScriptedProvider(default=answer)}


DETERMINISM = [
    "brute_force",
    "random",
    "hill_climbing",
    "arm_elimination",
    "threshold",
    "epsilon_lucb",
    "matrix_ucb",
    "matrix_ucb_lrf",
    "lm_proposal",
    "paired_race",
    "regret_race",
    "regret_race_thrifty",
    "auto",
]


@pytest.mark.parametrize("name", DETERMINISM)
async def test_the_same_seed_gives_the_same_selection_for_every_selector(
    name: str, space_3x4: SearchSpace
) -> None:
    scores = bernoulli_world([0.5, 0.55, 0.6, 0.58, 0.4, 0.62, 0.61, 0.63, 0.3, 0.5, 0.6, 0.6], 60)
    runs = []
    for seed in (7, 7, 8):
        params = proposer_params() if name == "lm_proposal" else {}
        evaluator = MatrixEvaluator(scores)
        arena = Arena(len(space_3x4), 60, evaluator, seed=seed)
        pick = await run_algorithm(make_algorithm(name, **params), arena, space_3x4)
        runs.append((pick, evaluator.requested, arena.order))
    assert runs[0] == runs[1]
    assert runs[0][2] != runs[2][2]  # another seed really is another run


async def test_a_proposer_behind_an_openai_compatible_server_is_not_billed_to_a_combination(
    monkeypatch: pytest.MonkeyPatch, strict_loop: Any
) -> None:
    """The agent calls the server through the official SDK (intercepted, attributed per
    combination); the proposer calls it through phi's provider. The proposer's replies
    ("right"/"wrong") are unusable, so every round falls back with a warning, and none of its
    tokens lands on a combination."""
    from phi_core.select import ModelSelector

    from .llm_server import LlmServer

    async with LlmServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        client = server.openai(api_key="sk-test")

        class Agent:
            def __init__(self, models: dict[str, str]) -> None:
                self.model = models["solver"]

            async def run(self, question: str) -> str:
                reply = await client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": question}]
                )
                return reply.choices[0].message.content or ""

        dataset = [(f"q{i}", "right") for i in range(6)]
        result = await ModelSelector(
            Agent,
            {"solver": ["model-a", "model-b", "model-c"]},
            dataset,
            lambda expected, actual: float(expected == actual.strip()),
            algorithm="lm_proposal",
            algorithm_params={
                "proposer": "openai:gpt-4o",
                "budget_fraction": 0.5,
                "per_round": 1,
                "attempts": 1,
            },
            cache=False,
            journal=False,
            model_handles=False,
            seed=0,
        ).select_best()
    proposer = [b for b in server.reported if b.model == "gpt-4o"]
    agent = [b for b in server.reported if b.model != "gpt-4o"]
    assert len(proposer) == 2  # two rounds (one combination each), one try each
    assert all("Propose 1 new combination" in b.prompt for b in proposer)
    assert sum(c.input_tokens for c in result.combinations) == sum(b.input for b in agent)
    assert sum(c.output_tokens for c in result.combinations) == sum(b.output for b in agent)
    assert len([w for w in result.warnings if "chosen by rule" in w]) == 2
    assert result.evaluations == 2 * len(dataset)
