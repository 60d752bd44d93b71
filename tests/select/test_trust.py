"""Results you can trust: the best is the top score, ties go to cost then to latency beyond
timing noise, it is always on the Pareto front, a seed reproduces it under timing noise, and a
cost/latency-weighted objective steers the search itself."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from phi_core.config import load_race_spec
from phi_core.errors import UserError
from phi_core.select import (
    ALGORITHMS,
    Arena,
    Evaluation,
    ModelSelector,
    SearchSpace,
    make_algorithm,
    run_algorithm,
)
from phi_core.select._arena import Objective
from phi_core.select._results import build_result

from .select_worlds import bernoulli_world


class World:
    """Cells from fixed score, cost and latency matrices (latency jittered by ``noise``)."""

    def __init__(
        self,
        scores: np.ndarray,
        costs: np.ndarray,
        latencies: np.ndarray,
        noise: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        self.scores, self.costs, self.latencies = scores, costs, latencies
        self.noise = noise
        self.rng = rng or random.Random()

    async def evaluate(self, batch: Mapping[int, Sequence[int]]) -> dict[int, list[Evaluation]]:
        return {
            k: [
                Evaluation(
                    score=float(self.scores[k, i]),
                    cost_usd=float(self.costs[k, i]),
                    latency_s=float(self.latencies[k, i]) * (1 + self.noise * self.rng.random()),
                )
                for i in items
            ]
            for k, items in batch.items()
        }


async def run(
    algorithm: str,
    space: SearchSpace,
    world: World,
    seed: int,
    objective: Objective | None = None,
    **params: object,
):  # type: ignore[no-untyped-def]
    names = [space.name(k) for k in range(len(space))]
    arena = Arena(
        len(space), world.scores.shape[1], world, seed=seed, names=names, objective=objective
    )
    algo = make_algorithm(algorithm, **params)
    pick = await run_algorithm(algo, arena, space)
    result = build_result(
        arena, space, pick, algorithm=algorithm, params={}, pool=algo.pool, spent=0.0,
        wall_time=0.0, objective=objective,
    )  # fmt: skip
    return result, arena


def tied_world(n_combos: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Few accuracy levels and few prices, so exact ties in accuracy and cost are common."""
    rng = np.random.default_rng(seed)
    probs = rng.choice([0.5, 0.7, 0.7, 0.9, 0.9], size=n_combos)
    scores = bernoulli_world(list(probs), n, seed=seed)
    dup = rng.integers(0, n_combos, size=n_combos // 3)
    scores[dup] = scores[0]  # identical answers: exact accuracy ties
    costs = np.repeat(rng.choice([0.001, 0.001, 0.01], size=(n_combos, 1)), n, axis=1)
    latencies = np.repeat(rng.choice([0.2, 0.21, 0.5, 2.0], size=(n_combos, 1)), n, axis=1)
    return scores, costs, latencies


ALL = [*sorted(ALGORITHMS), "paired_race", "regret_race", "regret_race_thrifty"]
COVER = {"bayesian": {"sample_fraction": 0.5}}


@pytest.mark.parametrize("name", ALL)
async def test_the_best_is_always_on_the_pareto_front_and_nothing_in_contention_dominates_it(
    name: str,
) -> None:
    space = SearchSpace({"planner": ["p0", "p1", "p2"], "solver": ["s0", "s1", "s2"]})
    for seed in range(6):
        scores, costs, latencies = tied_world(len(space), 60, seed)
        result, arena = await run(
            name, space, World(scores, costs, latencies, noise=0.1), seed, **COVER.get(name, {})
        )
        assert result.best.pareto and result.best in result.pareto_front()
        best = space.find(result.best.models)
        contenders = [space.find(c.models) for c in result.evaluated() if c.in_contention]
        assert not any(arena.dominates(k, best) for k in contenders), (name, seed)
        # the best is the top score among the combinations with as much evidence as it has
        peers = [
            c
            for c in result.evaluated()
            if c.in_contention and c.evaluations >= result.best.evaluations
        ]
        assert result.best.accuracy == max(c.accuracy or 0.0 for c in peers)


async def test_a_clearly_faster_twin_wins_and_a_twin_within_timing_noise_does_not() -> None:
    space = SearchSpace({"solver": ["a-slow", "b-fast"]})
    scores = np.ones((2, 10))
    costs = np.full((2, 10), 0.002)
    clearly = np.array([[1.0] * 10, [0.3] * 10])
    result, _ = await run("brute_force", space, World(scores, costs, clearly), 0)
    assert result.best.name == "solver=b-fast"
    assert [c.name for c in result.pareto_front()] == ["solver=b-fast"]
    noise_only = np.array([[1.0] * 10, [0.95] * 10])
    result, _ = await run("brute_force", space, World(scores, costs, noise_only), 0)
    assert result.best.name == "solver=a-slow"  # the name decides, not 50 ms of noise
    assert {c.name for c in result.pareto_front()} == {"solver=a-slow", "solver=b-fast"}


async def test_same_seed_same_best_with_timing_noise_injected() -> None:
    """Three combinations tie on accuracy and cost; their latencies differ only by noise (up to
    +100 % per cell, fresh every run): every run with the seed names the same best, whatever the
    typical latency (several, so that noisy means straddle any fixed band edge)."""
    space = SearchSpace({"planner": ["p0", "p1"], "solver": ["s0", "s1"]})
    row = bernoulli_world([0.8], 24, seed=9)[0]
    scores = np.array([row, row, row, bernoulli_world([0.5], 24, seed=10)[0]])
    costs = np.full((4, 24), 0.001)
    for base in (0.0066, 0.19, 0.256, 0.384, 1.3):
        latencies = np.full((4, 24), base)
        for name in ("brute_force", "regret_race", "arm_elimination"):
            picks = set()
            for _ in range(10):
                world = World(scores, costs, latencies, noise=1.0)
                result, _ = await run(name, space, world, seed=5)
                picks.add(result.best.name)
            assert picks == {"planner=p0 + solver=s0"}, (base, name, picks)


async def test_the_selector_reproduces_its_pick_when_the_agent_s_timing_is_noisy() -> None:
    noise = random.Random()

    async def agent(models: dict[str, str], question: int) -> str:
        await asyncio.sleep(noise.uniform(0.0, 0.02))  # wall-clock noise, different every run
        return "right" if models["solver"] != "weak" or question % 2 else "wrong"

    picks = set()
    for _ in range(4):
        result = await ModelSelector(
            agent,
            {"solver": ["zz-strong", "strong", "weak"]},
            [(i, "right") for i in range(12)],
            lambda e, a: float(e == a),
            algorithm="brute_force",
            seed=7,
            cache=False,
            model_handles=False,
            journal=False,
        ).select_best()
        picks.add(result.best.name)
    assert picks == {"solver=strong"}


async def test_the_weighted_objective_steers_the_search_not_only_the_final_ranking() -> None:
    space = SearchSpace({"solver": ["accurate-dear", "good-cheap", "weak-cheap"]})
    scores = bernoulli_world([0.95, 0.88, 0.40], 300, seed=11)
    costs = np.array([[0.05] * 300, [0.0005] * 300, [0.0005] * 300])
    latencies = np.full((3, 300), 1.0)
    world = World(scores, costs, latencies)
    plain, plain_arena = await run("arm_elimination", space, world, 1)
    assert plain.best.name == "solver=accurate-dear"
    weighted, arena = await run(
        "arm_elimination", space, world, 1, objective=Objective(cost_weight=0.5)
    )
    assert weighted.best.name == "solver=good-cheap"
    # the expensive combination was dropped during the search (by the objective), not re-ranked
    dear = weighted.combinations[
        [c.name for c in weighted.combinations].index("solver=accurate-dear")
    ]
    assert not dear.in_contention and arena.count(0) < plain_arena.count(0)
    assert weighted.best.objective is not None and weighted.cost_weight == 0.5
    assert all(0.0 <= r.objective <= 1.0 for r in weighted.datapoints if r.objective is not None)


async def test_objective_weights_are_validated() -> None:
    with pytest.raises(UserError, match="cost_weight must be a number >= 0"):
        Objective(cost_weight=-1)
    with pytest.raises(UserError, match="latency_weight"):
        ModelSelector(
            lambda m, x: x, {"s": ["a"]}, [(1, 1)], lambda e, a: 1.0, latency_weight=float("nan")
        )


async def test_results_export_a_race_file_phi_race_reads_and_a_litellm_config(
    tmp_path: Path,
) -> None:
    space = SearchSpace(
        {"solver": ["openai:gpt-4o-mini@temperature=0.2", "gpt-4o", "local:smollm2"]}
    )
    scores = np.array([[1.0] * 8, [1.0] * 8, [0.5] * 8])
    costs = np.array([[0.001] * 8, [0.01] * 8, [0.0] * 8])
    result, _ = await run("brute_force", space, World(scores, costs, np.full((3, 8), 0.5)), 0)
    text = result.export_config(tmp_path / "race.toml", "phi-race")
    race = load_race_spec(tmp_path / "race.toml")
    assert [(b.name, b.model, b.temperature) for b in race.branches] == [
        ("openai:gpt-4o-mini@temperature=0.2", "openai:gpt-4o-mini", 0.2),
        ("local:smollm2", "local:smollm2", None),
    ]  # the Pareto front, best first (gpt-4o is dominated: as accurate, dearer)
    assert "winner" in text
    result.export_config(tmp_path / "litellm.yaml")
    litellm = (tmp_path / "litellm.yaml").read_text()
    assert "model: openai/gpt-4o-mini" in litellm and "temperature: 0.2" in litellm
    two = SearchSpace({"planner": ["openai:gpt-4o"], "solver": ["openai:gpt-4o"]})
    multi, _ = await run(
        "brute_force", two, World(np.ones((1, 2)), np.zeros((1, 2)), np.ones((1, 2))), 0
    )
    with pytest.raises(UserError, match="say which one to race"):
        multi.export_config(tmp_path / "x.toml", "phi-race")
    with pytest.raises(UserError, match="Unknown config format"):
        multi.export_config(tmp_path / "x.toml", "xml")


async def test_a_bare_model_no_vendor_lists_is_exported_with_a_guessed_provider(
    tmp_path: Path,
) -> None:
    """As AgentOpt does, a name outside the catalog is exported as an OpenAI-compatible model,
    flagged in a comment for the user to check."""
    space = SearchSpace({"solver": ["my-finetune-v3"]})
    result, _ = await run(
        "brute_force", space, World(np.ones((1, 2)), np.zeros((1, 2)), np.ones((1, 2))), 0
    )
    text = result.export_config(tmp_path / "x.yaml")
    assert "model: openai/my-finetune-v3" in text and "guessed" in text


async def test_the_summary_ranks_best_first_and_marks_the_front() -> None:
    space = SearchSpace({"solver": ["a", "b", "c"]})
    scores = np.array([[0.0] * 4, [1.0] * 4, [0.5] * 4])
    result, _ = await run("brute_force", space, World(scores, np.zeros((3, 4)), np.ones((3, 4))), 0)
    lines = result.summary().splitlines()
    assert "solver=b" in lines[1] and "best" in lines[1] and "pareto" in lines[1]
    assert lines[-1] == "best: solver=b"


async def test_a_recommendation_dominated_by_a_combination_with_as_much_evidence_is_replaced() -> (
    None
):
    from phi_core.select import SelectionAlgorithm

    class LowerBoundPick(SelectionAlgorithm):
        """Recommends the weaker arm (as a rule on lower bounds might), evaluated like the rest."""

        name = "lower_bound_pick"

        async def run(self, arena: Arena, space: SearchSpace) -> int:
            await arena.evaluate_prefix(range(arena.n_combos), arena.n_datapoints)
            self.pool = {0, 1, 2}
            return 0

    space = SearchSpace({"solver": ["weaker", "better", "partial"]})
    scores = np.array([[0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    world = World(scores, np.full((3, 4), 0.001), np.full((3, 4), 0.5))
    arena = Arena(3, 4, world, seed=0, names=[space.name(k) for k in range(3)])
    algo = LowerBoundPick()
    pick = await algo.run(arena, space)
    result = build_result(arena, space, pick, algorithm=algo.name, params={}, pool=algo.pool,
                          spent=0.0, wall_time=0.0)  # fmt: skip
    assert result.best.name == "solver=better" and result.best.pareto
    assert not next(c for c in result.combinations if c.name == "solver=weaker").pareto


def test_sampling_seeds_follow_what_a_request_says_not_its_bookkeeping_fields() -> None:
    from phi_core.providers.base import ModelConfig, StreamRequest
    from phi_core.select._meter import _derived_seed
    from phi_core.types import UserMessage

    model = ModelConfig(provider="local", id="smollm2", api="local_gguf")

    def seed(text: str, *, run: int = 0, sample: int = 0, **fields: object) -> int:
        message = UserMessage.text(text).model_copy(update=fields)
        request = StreamRequest(model=model, messages=[message], temperature=1.0)
        return _derived_seed(run, request, sample)

    base = seed("What is the capital of France?")
    # metadata a message carries (when, which turn, where it came from) does not move the seed
    assert (
        seed("What is the capital of France?", timestamp=123, turn_id="t9", provenance="memo")
        == base
    )
    assert seed("What is the capital of Spain?") != base
    assert seed("What is the capital of France?", sample=1) != base
    assert seed("What is the capital of France?", run=1) != base
