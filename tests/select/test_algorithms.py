"""Each algorithm on synthetic worlds whose best combination is known."""

from __future__ import annotations

import numpy as np
import pytest

from phi_core.errors import UserError
from phi_core.select import ALGORITHMS, Arena, SearchSpace, make_algorithm, run_algorithm

from .select_worlds import MatrixEvaluator, bernoulli_world, select

# 12 combinations; combination 7 (planner=p1 + solver=s3) is clearly best.
PROBS = [0.30, 0.35, 0.40, 0.45, 0.40, 0.50, 0.55, 0.90, 0.35, 0.45, 0.50, 0.60]
BEST = 7

# Parameters that let the budgeted searches see the whole (small) space.
FULL_COVERAGE = {
    "random": {"sample_fraction": 1.0},
    "bayesian": {"sample_fraction": 1.0},
    "hill_climbing": {"num_restarts": 12, "neighbours_per_step": 5, "patience": 5},
    "matrix_ucb": {"budget_fraction": 0.6},
    "threshold": {"threshold": 0.75},
}


@pytest.mark.parametrize(
    "name", [*sorted(ALGORITHMS), "paired_race", "regret_race", "regret_race_thrifty"]
)
async def test_every_algorithm_finds_the_clear_best_combination(
    name: str, space_3x4: SearchSpace
) -> None:
    scores = bernoulli_world(PROBS, 200, seed=1)
    for seed in range(3):
        pick, _ = await select(name, space_3x4, scores, seed=seed, **FULL_COVERAGE.get(name, {}))
        assert pick == BEST, f"{name} picked {space_3x4.name(pick)} with seed {seed}"


@pytest.mark.parametrize(
    "name",
    [
        "arm_elimination",
        "epsilon_lucb",
        "paired_race",
        "regret_race",
        "regret_race_thrifty",
        "matrix_ucb",
        "threshold",
    ],
)
async def test_adaptive_algorithms_spend_less_than_brute_force(
    name: str, space_3x4: SearchSpace
) -> None:
    scores = bernoulli_world(PROBS, 200, seed=2)
    _, arena = await select(name, space_3x4, scores, **FULL_COVERAGE.get(name, {}))
    assert 0 < arena.evaluations < 0.7 * scores.size


async def test_paired_race_carries_a_near_tie_to_the_full_dataset_and_decides_it_exactly() -> None:
    space = SearchSpace({"solver": ["a", "b", "c", "d"]})
    scores = bernoulli_world([0.70, 0.705, 0.40, 0.30], 200, seed=3, correlation=0.8)
    for seed in range(5):
        pick, arena = await select("paired_race", space, scores, seed=seed)
        assert pick == 1
        assert arena.count(0) == arena.count(1) == 200
        assert arena.count(3) < 200


@pytest.mark.parametrize("name", ["brute_force", "paired_race", "regret_race", "arm_elimination"])
async def test_exact_ties_go_to_the_cheaper_combination(name: str) -> None:
    space = SearchSpace({"solver": ["dear", "cheap", "weak"]})
    base = bernoulli_world([0.8, 0.8, 0.3], 100, seed=4)
    base[1] = base[0]  # identical answers
    costs = np.array([[0.01] * 100, [0.001] * 100, [0.001] * 100])
    for seed in range(3):
        pick, _ = await select(name, space, base, seed=seed, costs=costs)
        assert space.name(pick) == "solver=cheap"


async def test_exact_ties_in_accuracy_cost_and_latency_go_to_the_first_name() -> None:
    space = SearchSpace({"solver": ["zeta", "alpha"]})
    scores = np.ones((2, 20))
    pick, _ = await select("brute_force", space, scores)
    assert space.name(pick) == "solver=alpha"


async def test_a_crashing_combination_scores_zero_on_its_failures_and_loses() -> None:
    class Crashy(MatrixEvaluator):
        async def evaluate(self, batch):  # type: ignore[no-untyped-def]
            out = await super().evaluate(batch)
            from phi_core.select import Evaluation

            out[0] = (
                [
                    Evaluation(score=1.0, error="RuntimeError: boom") if i % 2 else e
                    for i, e in zip(batch[0], out[0], strict=True)
                ]
                if 0 in out
                else []
            )
            if 0 not in batch:
                out.pop(0, None)
            return out

    space = SearchSpace({"solver": ["crashy", "steady"]})
    scores = np.vstack(
        [np.ones(20), np.r_[np.ones(15), np.zeros(5)]]
    )  # crashy answers 100% when it runs
    arena = Arena(2, 20, Crashy(scores), seed=0, names=[space.name(k) for k in range(2)])
    pick = await run_algorithm(make_algorithm("brute_force"), arena, space)
    assert space.name(pick) == "solver=steady"
    assert arena.mean(0) == pytest.approx(0.5)
    assert len([key for key in arena.errors if key[0] == 0]) == 10


async def test_the_same_seed_reproduces_the_run_and_another_seed_reorders_the_data(
    space_3x4: SearchSpace,
) -> None:
    scores = bernoulli_world(PROBS, 120, seed=5)
    runs = []
    for seed in (11, 11, 12):
        evaluator = MatrixEvaluator(scores)
        arena = Arena(len(space_3x4), 120, evaluator, seed=seed)
        pick = await run_algorithm(make_algorithm("epsilon_lucb"), arena, space_3x4)
        runs.append((pick, evaluator.requested, arena.order))
    assert runs[0] == runs[1]
    assert runs[0][2] != runs[2][2]
    assert sorted(runs[2][2]) == list(range(120))


async def test_the_budget_caps_evaluations_and_still_recommends(space_3x4: SearchSpace) -> None:
    scores = bernoulli_world(PROBS, 100, seed=6)
    evaluator = MatrixEvaluator(scores)
    arena = Arena(len(space_3x4), 100, evaluator, seed=0, max_evaluations=150)
    algorithm = make_algorithm("brute_force")
    pick = await run_algorithm(algorithm, arena, space_3x4)
    assert arena.evaluations == 150
    assert arena.count(pick) > 0


def test_unknown_algorithm_names_the_choices() -> None:
    with pytest.raises(UserError, match="paired_race"):
        make_algorithm("grid")


def test_bad_algorithm_parameters_are_a_user_error() -> None:
    with pytest.raises(UserError, match="arm_elimination"):
        make_algorithm("arm_elimination", no_such_option=1)
    with pytest.raises(UserError, match="delta"):
        make_algorithm("paired_race", delta=2.0)
    with pytest.raises(UserError, match="z must be > 0"):
        make_algorithm("paired_race", z=0.0)


def test_a_parameter_of_the_wrong_type_is_named() -> None:
    """A spec's ``max_correlation = "high"`` or ``exact_guard = 1`` names the parameter and
    what it takes (before: "'<=' not supported between instances of 'int' and 'str'")."""
    for params, says in (
        (
            {"max_correlation": "high"},
            "'max_correlation' of algorithm 'regret_race' must be a number",
        ),
        ({"eta": True}, "'eta' of algorithm 'regret_race' must be a number, got True"),
        ({"exact_guard": 1}, "'exact_guard' of algorithm 'regret_race' must be true or false"),
    ):
        with pytest.raises(UserError, match=says):
            make_algorithm("regret_race", **params)
    # numpy numbers are numbers; None stays the constructors' business (n_initial=None: default)
    race = make_algorithm("regret_race", perfect_look=np.int64(30), eta=np.float64(2e-4))
    assert (race.perfect_look, race.eta) == (30, 2e-4)  # type: ignore[attr-defined]
    assert make_algorithm("arm_elimination", n_initial=None).name == "arm_elimination"


def test_space_neighbours_differ_in_exactly_one_step(space_3x4: SearchSpace) -> None:
    k = space_3x4.find({"planner": "p1", "solver": "s2"})
    for other in space_3x4.neighbours(k):
        diff = [a != b for a, b in zip(space_3x4.coords(k), space_3x4.coords(other), strict=True)]
        assert sum(diff) == 1
    assert len(space_3x4.neighbours(k)) == (3 - 1) + (4 - 1)


async def test_matrix_ucb_stops_at_its_budget_fraction(space_3x4: SearchSpace) -> None:
    scores = bernoulli_world(PROBS, 100, seed=7)
    _, arena = await select("matrix_ucb", space_3x4, scores, budget_fraction=0.3)
    assert arena.evaluations == 360  # ceil(0.3 * 12 * 100)


async def test_bayesian_optimisation_is_reproducible_with_a_seed(space_3x4: SearchSpace) -> None:
    scores = bernoulli_world(PROBS, 50, seed=8)
    picks = []
    for _ in range(2):
        evaluator = MatrixEvaluator(scores)
        arena = Arena(len(space_3x4), 50, evaluator, seed=5)
        picks.append(
            (await run_algorithm(make_algorithm("bayesian"), arena, space_3x4), evaluator.requested)
        )
    assert picks[0] == picks[1]
    assert len({k for k, _ in picks[0][1]}) == 3  # ceil(0.25 * 12) combinations on the full data


def _degenerate_worlds() -> list[tuple[str, np.ndarray, np.ndarray, int]]:
    """(label, scores, costs, brute force's pick): tiny, flat and partial-credit worlds."""
    rng = np.random.default_rng(5)
    thirds = np.round(rng.random((6, 13)) * 3) / 3
    thirds_cost = rng.random((6, 13)) + 0.1
    thirds_best = min(range(6), key=lambda k: (-thirds[k].mean(), thirds_cost[k].mean()))
    return [
        ("one combination, one question", np.ones((1, 1)), np.ones((1, 1)), 0),
        ("one question", np.array([[0.0], [1.0], [0.0]]), np.ones((3, 1)), 1),
        (
            "all wrong: the cheapest",
            np.zeros((4, 2)),
            np.array([[3.0], [1.0], [2.0], [4.0]]) * np.ones((4, 2)),
            1,
        ),
        (
            "all right: the cheapest",
            np.ones((5, 7)),
            np.array([[5.0], [4.0], [3.0], [0.5], [1.0]]) * np.ones((5, 7)),
            3,
        ),
        ("identical: the first name", np.array([[1.0, 0.0, 1.0]] * 2), np.ones((2, 3)), 0),
        ("partial credit", thirds, thirds_cost, thirds_best),
        (
            "free combinations",
            np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]]),
            np.zeros((2, 4)),
            0,
        ),
    ]


@pytest.mark.parametrize(
    "name",
    [*sorted(ALGORITHMS), "paired_race", "regret_race", "regret_race_thrifty", "matrix_ucb_lrf"],
)
async def test_every_algorithm_survives_tiny_flat_and_partial_credit_worlds(name: str) -> None:
    """No division by zero (RuntimeWarnings are errors here), a valid pick, never a cell
    evaluated twice or beyond the grid; the exact selectors also pick brute force's best, ties
    going to the cheaper combination and then to the first name."""
    for label, scores, costs, best in _degenerate_worlds():
        space = SearchSpace({"config": [f"c{k}" for k in range(scores.shape[0])]})
        pick, arena = await select(name, space, scores, costs=costs)
        assert 0 <= pick < scores.shape[0], label
        assert arena.evaluations <= scores.size, label
        requested = arena.evaluator.requested  # type: ignore[attr-defined]
        assert len(requested) == len(set(requested)), f"{label}: a cell evaluated twice"
        if name in ("brute_force", "paired_race", "regret_race"):
            assert pick == best, f"{label}: {name} picked c{pick}, brute force c{best}"
