"""The default selector, RegretRace: regret-calibrated, cost-aware paired elimination."""

from __future__ import annotations

import asyncio
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phi_core.errors import UserError
from phi_core.select import (
    Arena,
    Evaluation,
    ModelSelector,
    Objective,
    RegretRace,
    SearchSpace,
    make_algorithm,
    run_algorithm,
)
from phi_core.select._race import (
    _beta_binomial,
    _ends_level,
    _ends_level_strata,
    _expected_excess,
    _future_margins,
)

from .agents import Counting
from .select_worlds import MatrixEvaluator, bernoulli_world, select


def test_auto_is_the_regret_race() -> None:
    assert isinstance(make_algorithm("auto"), RegretRace)


def test_expected_excess_matches_the_normal_closed_form() -> None:
    got = _expected_excess(np.array([0.0, 1.0, -3.0, 0.5]), np.array([1.0, 1.0, 1.0, 0.0]))
    # E[max(Z, 0)] = 1/sqrt(2 pi); E[max(Z + 1, 0)] = phi(1) + Phi(1); point mass at 0.5
    phi1 = math.exp(-0.5) / math.sqrt(2 * math.pi)
    assert got[0] == pytest.approx(1 / math.sqrt(2 * math.pi))
    assert got[1] == pytest.approx(phi1 + 0.5 * (1 + math.erf(1 / math.sqrt(2))))
    assert 0 < got[2] < 1e-3
    assert got[3] == 0.5


async def test_a_near_tie_world_at_high_accuracy_is_decided_within_one_question_for_a_fraction_of_the_cost() -> (
    None
):
    # 20 arms: the best at 99 %, three within a point, the rest spread down to 80 %
    probs = [0.99, 0.985, 0.985, 0.98, *np.linspace(0.97, 0.80, 16)]
    space = SearchSpace(
        {"answer": [f"a{i}" for i in range(4)], "critic": [f"c{i}" for i in range(5)]}
    )
    scores = bernoulli_world(probs, 200, seed=11, correlation=0.5)
    costs = np.repeat(np.linspace(0.001, 0.02, 20)[:, None], 200, axis=1)
    best = scores.mean(axis=1).max()
    for seed in range(5):
        pick, arena = await select("regret_race", space, scores, seed=seed, costs=costs)
        assert best - scores[pick].mean() <= 0.005 + 1e-12
        assert arena.cost_spent < 0.6 * costs.sum()


async def test_an_expensive_weak_contender_is_dropped_no_later_than_an_equally_weak_cheap_one() -> (
    None
):
    space = SearchSpace({"solver": ["best", "weak_cheap", "weak_dear"]})
    strong = bernoulli_world([0.8], 200, seed=3)[0]
    weak = bernoulli_world([0.6], 200, seed=4)[0]
    scores = np.vstack([strong, weak, weak])  # the two weak arms answer identically
    costs = np.vstack([np.full(200, 0.002), np.full(200, 0.001), np.full(200, 0.05)])
    for seed in range(5):
        pick, arena = await select("regret_race", space, scores, seed=seed, costs=costs)
        assert space.name(pick) == "solver=best"
        assert arena.count(2) <= arena.count(1)
    assert arena.count(2) < 200


async def test_a_crashing_combination_is_charged_its_failures_and_eliminated() -> None:
    class Crashy(MatrixEvaluator):
        async def evaluate(self, batch):  # type: ignore[no-untyped-def]
            out = await super().evaluate(batch)
            if 0 in out:  # combination 0 raises on every other question it is given
                out[0] = [
                    Evaluation(score=1.0, error="RuntimeError: boom") if q % 2 else ev
                    for q, ev in zip(batch[0], out[0], strict=True)
                ]
            return out

    space = SearchSpace({"solver": ["crashy", "steady", "weak"]})
    scores = np.vstack(
        [
            np.ones(200),
            bernoulli_world([0.8], 200, seed=5)[0],
            bernoulli_world([0.4], 200, seed=6)[0],
        ]
    )
    names = [space.name(k) for k in range(3)]
    arena = Arena(3, 200, Crashy(scores), seed=1, names=names)
    algorithm = make_algorithm("regret_race")
    pick = await run_algorithm(algorithm, arena, space)
    assert names[pick] == "solver=steady"
    assert arena.count(0) < 200
    crashes = [p for (k, p) in arena.errors if k == 0]
    assert crashes and all(arena.scores[0, p] == 0.0 for p in crashes)


async def test_the_recorded_expected_loss_is_bounded_by_the_tolerances(
    space_3x4: SearchSpace,
) -> None:
    scores = bernoulli_world(
        [0.3, 0.35, 0.4, 0.45, 0.4, 0.5, 0.55, 0.9, 0.35, 0.45, 0.5, 0.6], 200, seed=7
    )
    algorithm = RegretRace(eta=1e-3, cost_power=0.0)
    arena = Arena(12, 200, MatrixEvaluator(scores), seed=0)
    await run_algorithm(algorithm, arena, space_3x4)
    assert 0.0 <= algorithm.expected_loss <= 1e-3 * 11


async def test_the_same_seed_reproduces_the_regret_race(space_3x4: SearchSpace) -> None:
    scores = bernoulli_world(
        [0.5, 0.55, 0.6, 0.62, 0.4, 0.5, 0.55, 0.63, 0.35, 0.45, 0.5, 0.6], 120, seed=8
    )
    runs = []
    for _ in range(2):
        evaluator = MatrixEvaluator(scores)
        arena = Arena(12, 120, evaluator, seed=3)
        runs.append(
            (
                await run_algorithm(make_algorithm("regret_race"), arena, space_3x4),
                evaluator.requested,
            )
        )
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"eta": 0.0}, "eta"),
        ({"cost_power": -1.0}, "cost_power"),
        ({"growth": 1.0}, "growth"),
        ({"prior": -0.5}, "prior"),
        ({"n_initial": 1}, "n_initial"),
        ({"additive_prior": -1.0}, "additive_prior"),
        ({"floor": -0.1}, "floor"),
        ({"tie_questions": -1.0}, "tie_questions"),
        ({"tie_risk": -0.1}, "tie_risk"),
        ({"tie_risk": 1.0}, "tie_risk"),
        ({"strata": -1}, "strata"),
        ({"strata": 2.5}, "strata"),
        ({"scouts": 0}, "scouts"),
        ({"strata_share": 1.5}, "strata_share"),
        ({"scout_cost": -0.1}, "scout_cost"),
        ({"scout_at": -1}, "scout_at"),
        ({"perfect_look": -1}, "perfect_look"),
        ({"perfect_look": 2.5}, "perfect_look"),
        ({"perfect_arms": 0}, "perfect_arms"),
        ({"perfect_z": -0.5}, "perfect_z"),
        ({"max_correlation": -0.1}, "max_correlation"),
        ({"max_correlation": 1.5}, "max_correlation"),
        ({"complete_look": -1}, "complete_look"),
        ({"complete_look": 40.5}, "complete_look"),
        ({"complete_arms": 0}, "complete_arms"),
        ({"complete_by": "price"}, "complete_by"),
    ],
)
def test_bad_regret_race_parameters_are_user_errors(params: dict[str, float], match: str) -> None:
    with pytest.raises(UserError, match=match):
        make_algorithm("regret_race", **params)


def _additive_world(seed: int) -> tuple[SearchSpace, np.ndarray]:
    """6 planners x 6 solvers whose accuracies are additive (no interaction), near-tied on top."""
    planner = np.array([0.0, -0.004, -0.01, -0.05, -0.1, -0.15])
    solver = np.array([0.0, -0.006, -0.02, -0.06, -0.12, -0.2])
    probs = (0.97 + planner[:, None] + solver[None, :]).ravel()
    space = SearchSpace(
        {"planner": [f"p{i}" for i in range(6)], "solver": [f"s{i}" for i in range(6)]}
    )
    return space, bernoulli_world(list(probs), 300, seed=seed, correlation=0.5)


async def test_the_additive_prior_pays_for_less_at_a_small_regret_on_an_additive_grid() -> None:
    spent = {"plain": 0.0, "additive": 0.0}
    regret = {"plain": 0.0, "additive": 0.0}
    for seed in range(4):
        space, scores = _additive_world(seed)
        best = scores.mean(axis=1).max()
        for label, params in (("plain", {}), ("additive", {"additive_prior": 4.0})):
            pick, arena = await select("regret_race", space, scores, seed=seed, eta=3e-5, **params)
            spent[label] += arena.cost_spent
            regret[label] += (best - scores[pick].mean()) / 4
    assert spent["additive"] < 0.75 * spent["plain"]
    assert regret["additive"] <= 0.005


async def test_the_additive_prior_is_ignored_on_a_one_step_space() -> None:
    scores = bernoulli_world([0.9, 0.88, 0.8, 0.7, 0.6, 0.85], 150, seed=2)
    space = SearchSpace({"solver": [f"s{i}" for i in range(6)]})
    runs = []
    for params in ({"eta": 3e-5}, {"eta": 3e-5, "additive_prior": 4.0}):
        evaluator = MatrixEvaluator(scores)
        arena = Arena(6, 150, evaluator, seed=1)
        pick = await run_algorithm(make_algorithm("regret_race", **params), arena, space)
        runs.append((pick, evaluator.requested))
    assert runs[0] == runs[1]


async def test_a_perfect_expensive_arm_is_not_dropped_on_a_streak_of_agreement() -> None:
    """Four cheap arms one or two questions behind a perfect, 10x dearer one: without the
    disagreement floor the race drops the best once the arms have agreed for a while (the
    tie-risk guard and point 14's certificate, which also keep it, are off to test the floor
    alone)."""
    space = SearchSpace({"solver": ["best", "a", "b", "c", "d"]})
    scores = bernoulli_world([1.0, 0.995, 0.995, 0.99, 0.99], 200, seed=12)
    costs = np.array([[0.01] * 200] + [[0.001] * 200] * 4)
    found = {}
    for floor in (0.5, 0.0):
        picks = [
            (
                await select(
                    "regret_race",
                    space,
                    scores,
                    seed=s,
                    costs=costs,
                    floor=floor,
                    tie_risk=0.0,
                    complete_look=0,
                )
            )[0]
            for s in range(20)
        ]
        found[floor] = sum(p == 0 for p in picks)
    assert found[0.5] >= 18  # the floor finds it (the miss: one question out of 200)
    assert found[0.0] < found[0.5] - 5
    # the default, certificate on, finds it on every seed
    for s in range(20):
        assert (await select("regret_race", space, scores, seed=s, costs=costs))[0] == 0


async def test_a_cheaper_arm_that_ties_the_leader_is_kept_and_wins_the_tie() -> None:
    """Two arms with the same full-data accuracy: brute force picks the cheaper; the race must
    not drop it while it trails by a question on the prefix."""
    space = SearchSpace({"solver": ["dear", "cheaper", "w1", "w2", "w3"]})
    scores = bernoulli_world([0.97, 0.97, 0.77, 0.72, 0.67], 200, seed=11)
    costs = np.array([[0.012] * 200, [0.01] * 200] + [[0.001] * 200] * 3)
    picks = {}
    for tie in (1.0, 0.0):
        picks[tie] = [
            space.name(
                (
                    await select(
                        "regret_race", space, scores, seed=s, costs=costs, tie_questions=tie
                    )
                )[0]
            )
            for s in range(20)
        ]
    assert set(picks[1.0]) == {"solver=cheaper"}
    assert "solver=dear" in picks[0.0]  # without the tie rule a seed drops the cheaper twin


async def test_an_arm_one_question_behind_a_streak_is_kept_while_it_may_still_end_level() -> None:
    """The best (199/200, one early miss, dearer: the tie rule does not cover it) trails a streak
    (perfect for 175 questions, 198/200 at the end) by one question for most of the race. Without
    the tie-risk guard the race drops it on that one question; with it, the best is kept while
    it may still end level (continuity-corrected odds above ``tie_risk``) and wins."""
    n = 200
    scores = np.ones((5, n))
    scores[0, [175, 199]] = 0.0  # the streak
    scores[1, 10] = 0.0  # the best
    rng = np.random.default_rng(0)
    for k in (2, 3, 4):
        scores[k, rng.choice(n, 12 + 6 * k, replace=False)] = 0.0
    costs = np.full((5, n), 0.001)
    costs[1] = 0.002
    space = SearchSpace({"solver": ["streak", "best", "w1", "w2", "w3"]})
    names = [space.name(k) for k in range(5)]
    seen = {}
    for risk in (0.05, 0.0):
        arena = Arena(5, n, MatrixEvaluator(scores, costs), seed=0, shuffle=False, names=names)
        race = RegretRace(tie_risk=risk, complete_look=0)  # the guard alone
        pick = await run_algorithm(race, arena, space)
        seen[risk] = (space.name(pick), arena.count(1))
    assert seen[0.05] == ("solver=best", n)  # kept to the full data, and found
    assert seen[0.0][0] == "solver=streak"  # without the guard: dropped one question behind
    assert seen[0.0][1] < 176  # ... before the streak's first miss


def test_the_tie_risk_guard_keeps_only_arms_that_may_still_end_level() -> None:
    """On a prefix of 150 questions: an arm one question behind a perfect leader (one
    disagreement, 50 questions left) may still end level - kept whatever its expected loss; an
    arm 12 questions behind is judged by its expected loss alone, guard or not."""
    n = 200
    scores = np.ones((3, n))
    scores[1, 20] = 0.0
    scores[2, np.arange(0, 144, 12)] = 0.0
    losses = {}
    for risk in (0.05, 0.0):
        arena = Arena(3, n, MatrixEvaluator(scores), seed=0, shuffle=False)
        asyncio.run(arena.evaluate_prefix(range(3), 150))
        loss, tolerance, leader = RegretRace(tie_risk=risk)._judge(arena, [0, 1, 2], 150)
        assert leader == 0
        losses[risk] = (loss, tolerance)
    guarded, plain = losses[0.05][0], losses[0.0][0]
    assert math.isinf(guarded[1]) and plain[1] < losses[0.0][1][1]  # the guard decides
    assert guarded[2] == plain[2] < losses[0.0][1][2]  # a clear loser is still dropped


def test_a_pair_that_fails_together_is_credited_with_at_most_the_capped_correlation() -> None:
    """On 120 questions the leader misses 10; ``together`` misses the same 10 and two more (two
    disagreements: a paired variance near zero, correlation about 0.9); ``opposite`` misses 12
    others (22 disagreements). Without the cap, ``together`` is dropped on its two losses; with
    it, the pair's own variances decide and it is kept. ``opposite`` is left alone (its paired
    variance is above the capped one already)."""
    n = 200
    scores = np.ones((3, n))
    scores[0, 0:10] = 0.0
    scores[1, 0:12] = 0.0  # together
    scores[2, 10:22] = 0.0  # opposite
    judged = {}
    for cap in (0.4, 1.0):
        arena = Arena(3, n, MatrixEvaluator(scores), seed=0, shuffle=False)
        asyncio.run(arena.evaluate_prefix(range(3), 120))
        race = RegretRace(max_correlation=cap, tie_risk=0.0)  # the guard off: the cap alone
        loss, tolerance, leader = race._judge(arena, [0, 1, 2], 120)
        assert leader == 0
        judged[cap] = (loss, tolerance)
    (capped, tolerance), (plain, _) = judged[0.4], judged[1.0]
    assert plain[1] < tolerance[1] < capped[1]  # dropped without the cap, kept with it
    assert capped[2] == plain[2]  # independent enough: untouched


def test_the_beta_binomial_pmf_matches_its_closed_form() -> None:
    def closed(k: int, t: int, a: float, b: float) -> float:
        def log_beta(x: float, y: float) -> float:
            return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

        return math.comb(t, k) * math.exp(log_beta(k + a, t - k + b) - log_beta(a, b))

    got = _beta_binomial(np.array([5.0, 3.0]), np.array([1.5, 0.7]), np.array([2.0, 3.3]), 6)
    assert got[0, :6] == pytest.approx([closed(k, 5, 1.5, 2.0) for k in range(6)])
    assert got[1, :4] == pytest.approx([closed(k, 3, 0.7, 3.3) for k in range(4)])
    assert got[0, 6] == 0 and (got[1, 4:] == 0).all()  # nothing beyond the number of trials


def test_the_exact_end_game_matches_the_closed_form_with_one_question_left() -> None:
    """With one question left the margin moves by at most one: an arm one question behind ends
    level only if the last question splits the pair (Jeffreys: (d + 1/2) / (n + 1)) in its
    favour ((w + 1/2) / (d + 1)); a level arm stays level unless it loses that question."""
    n, total = 199, 200
    wins = np.array([0.0, 2.0, 3.0, 1.0, 0.0])
    losses = np.array([1.0, 3.0, 3.0, 0.0, 2.0])
    got = _ends_level(wins, losses, n, total)
    d = wins + losses
    split = (d + 0.5) / (n + 1)
    won = (wins + 0.5) / (d + 1)
    assert got[0] == pytest.approx(split[0] * won[0])  # one behind: must win the last one
    assert got[1] == pytest.approx(split[1] * won[1])
    assert got[2] == pytest.approx(1 - split[2] * (1 - won[2]))  # level: must not lose it
    assert got[3] == pytest.approx(1.0)  # one ahead: level at worst
    assert got[4] == pytest.approx(0.0)  # two behind: cannot catch up


def _one_miss_behind_a_perfect_leader(n: int, partial: bool = False) -> Arena:
    """Two arms, 200 questions in order: the leader perfect, the other wrong on question 20."""
    scores = np.ones((2, 200))
    scores[1, 20] = 0.0
    if partial:  # one partial-credit answer: the scores are no longer 0/1
        scores[0, 30] = 0.9
    arena = Arena(2, 200, MatrixEvaluator(scores), seed=0, shuffle=False)
    asyncio.run(arena.evaluate_prefix(range(2), n))
    return arena


def test_the_exact_guard_lets_an_arm_go_that_the_normal_tail_would_keep() -> None:
    """One loss, no win, 20 questions left: the arm ends level only if the pair splits again
    (about one chance in ten) and the arm wins that split - 3.5 % exactly, under ``tie_risk``;
    the normal approximation with its floor and continuity correction says 7.8 % and keeps it.
    Its expected loss is far below the tolerance, so the exact guard drops it."""
    arena = _one_miss_behind_a_perfect_leader(180)
    exact, tolerance, leader = RegretRace()._judge(arena, [0, 1], 180)
    normal, _, _ = RegretRace(exact_guard=False)._judge(arena, [0, 1], 180)
    assert leader == 0
    level = _ends_level(np.array([0.0]), np.array([1.0]), 180, 200)[0]
    assert 0.02 < level < 0.05
    assert exact[1] < tolerance[1]  # dropped
    assert math.isinf(normal[1])  # kept by the normal guard
    # earlier, with 50 questions left, the exact guard keeps it too (7.7 % > 5 %)
    early, _, _ = RegretRace()._judge(_one_miss_behind_a_perfect_leader(150), [0, 1], 150)
    assert math.isinf(early[1])


def test_the_exact_guard_falls_back_to_the_normal_tail_for_partial_credit() -> None:
    arena = _one_miss_behind_a_perfect_leader(180, partial=True)
    exact, _, _ = RegretRace()._judge(arena, [0, 1], 180)
    normal, _, _ = RegretRace(exact_guard=False)._judge(arena, [0, 1], 180)
    assert np.array_equal(exact, normal)


async def test_the_race_stops_paying_for_an_arm_that_can_no_longer_end_level() -> None:
    """180 questions, one miss behind a perfect leader: at the look at n = 159 (21 questions
    left) the exact end game lets the arm go; the normal guard pays for it to the end."""
    space = SearchSpace({"solver": ["perfect", "one_miss"]})
    scores = np.ones((2, 180))
    scores[1, 25] = 0.0
    counts = {}
    for exact in (True, False):
        names = [space.name(k) for k in range(2)]
        arena = Arena(2, 180, MatrixEvaluator(scores), seed=0, shuffle=False, names=names)
        race = RegretRace(exact_guard=exact, complete_look=0)  # the end game alone
        assert await run_algorithm(race, arena, space) == 0
        counts[exact] = arena.count(1)
    assert counts[True] < counts[False] == 180
    # with the certificate from look 40 the perfect leader (the miss at 25 has been seen) is
    # run to the end there, and the arm, whose ceiling is then 179 < 180, goes at once
    arena = Arena(2, 180, MatrixEvaluator(scores), seed=0, shuffle=False, names=names)
    race = RegretRace(complete_look=40, complete_arms=1, probe=0)
    assert await run_algorithm(race, arena, space) == 0
    assert arena.count(1) < counts[True]


def test_long_end_games_are_left_to_the_normal_tail() -> None:
    """5000 questions: an arm with 610 disagreements in 1000 has thousands still to come (the
    normal tail is accurate there and the exact sum would cost millions of terms): NaN, the
    caller's cue for the normal tail; a one-loss record is still summed exactly."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings leak out of the sums
        got = _ends_level(np.array([0.0, 300.0]), np.array([1.0, 310.0]), 1000, 5000)
    assert 0 < got[0] < 1
    assert math.isnan(got[1])
    assert len(_ends_level(np.array([]), np.array([]), 150, 200)) == 0


def _hard_questions_world(
    cheap_scouts: bool = True,
) -> tuple[SearchSpace, np.ndarray, np.ndarray, np.ndarray]:
    """Ten arms on 200 questions: a perfect one, six also-rans each wrong on 6 of the 30 hard
    questions, and three arms (cheap unless ``cheap_scouts`` is false) wrong on all 30."""
    rng = np.random.default_rng(0)
    hard = rng.choice(200, 30, replace=False)
    scores = np.ones((10, 200))
    costs = np.full((10, 200), 0.01)
    for k in range(1, 7):
        scores[k, rng.choice(hard, 6, replace=False)] = 0.0
    scores[7:, hard] = 0.0
    if cheap_scouts:
        costs[7:] = 0.0001
    return SearchSpace({"solver": [f"s{k}" for k in range(10)]}), scores, costs, hard


async def _race(
    space: SearchSpace, scores: np.ndarray, costs: np.ndarray, seed: int, **params: float
) -> tuple[int, Arena, RegretRace, list[tuple[int, int]]]:
    evaluator = MatrixEvaluator(scores, costs)
    names = [space.name(k) for k in range(len(space))]
    arena = Arena(len(space), scores.shape[1], evaluator, seed=seed, names=names)
    algorithm = RegretRace(**{"strata": 4, **params})  # type: ignore[arg-type]
    pick = await run_algorithm(algorithm, arena, space)
    return pick, arena, algorithm, evaluator.requested


async def test_scouted_strata_show_the_also_rans_losses_sooner() -> None:
    """The also-rans lose only on the questions the cheap arms fail: the scouts' full rows put
    those 30 in their own stratum, the race samples it more densely (its pairs disagree more)
    and drops the also-rans on far fewer evaluations than on a plain random prefix."""
    space, scores, costs, hard = _hard_questions_world()
    totals = []
    for seed in range(4):
        pick, arena, race, _ = await _race(space, scores, costs, seed)
        plain_pick, plain, _, _ = await _race(space, scores, costs, seed, strata=0, complete_look=0)
        assert pick == plain_pick == 0
        assert race.strata_sizes == [170, 30]  # the easy questions, then the hard ones
        totals.append((int(arena.observed[1:7].sum()), int(plain.observed[1:7].sum())))
        assert totals[-1][0] < totals[-1][1]
        # the scouts (the three cheapest) ran every question, and the run paid for them
        assert (arena.observed[7:].sum(axis=1) == 200).all()
        assert arena.cost_spent == pytest.approx(float((costs * arena.observed).sum()))
        hard_positions = [p for p, q in enumerate(arena.order) if q in set(hard.tolist())]
        assert arena.observed[1, hard_positions].mean() > arena.observed[1].mean()
    assert sum(s for s, _ in totals) < 0.8 * sum(p for _, p in totals)


async def test_no_scouting_when_the_scouts_would_cost_a_large_share() -> None:
    """Three of ten equally priced arms on every question would be 30 % of the race: the race
    does not scout and is the plain race, cell for cell."""
    space, scores, costs, _ = _hard_questions_world(cheap_scouts=False)
    pick, _, race, requested = await _race(space, scores, costs, 2)
    plain_pick, _, _, plain_requested = await _race(space, scores, costs, 2, strata=0)
    assert race.strata_sizes == []
    assert (pick, requested) == (plain_pick, plain_requested)


async def test_the_stratified_race_is_reproducible() -> None:
    space, scores, costs, _ = _hard_questions_world()
    first = await _race(space, scores, costs, 5)
    second = await _race(space, scores, costs, 5)
    assert first[2].strata_sizes == second[2].strata_sizes == [170, 30]
    assert (first[0], first[3]) == (second[0], second[3])


def test_the_stratified_end_game_is_the_convolution_of_the_strata() -> None:
    """One stratum reproduces the unstratified sum; two strata with their records split give
    the probability of the summed margin, here checked by brute-force enumeration over the
    per-stratum future margins."""
    wins, losses = np.array([[1.0], [0.0]]), np.array([[2.0], [1.0]])
    one = _ends_level_strata(wins, losses, [150], [200])
    assert one == pytest.approx(_ends_level(wins[:, 0], losses[:, 0], 150, 200))
    w2, l2 = np.array([[0.0, 1.0]]), np.array([[1.0, 1.0]])
    got = _ends_level_strata(w2, l2, [100, 40], [150, 50])[0]
    a = _future_margins(w2[:, 0], l2[:, 0], 100, 150)[0]
    b = _future_margins(w2[:, 1], l2[:, 1], 40, 50)[0]
    ta, tb = (len(a) - 1) // 2, (len(b) - 1) // 2
    brute = sum(
        pa * pb for i, pa in enumerate(a) for j, pb in enumerate(b) if -1 + (i - ta) + (j - tb) >= 0
    )
    assert got == pytest.approx(brute)
    assert 0 < got < 1


def _matrix_agent(scores: np.ndarray, stop_after: int | None = None) -> Counting:
    """Answers from a 0/1 score matrix (row = the solver's index, ``m<row>``)."""
    return Counting(
        lambda solver, q: "right" if scores[int(solver[1:]), q] else "wrong", stop_after
    )


async def test_an_interrupted_stratified_race_resumes_to_the_same_result(
    tmp_path: Path, strict_loop: Any
) -> None:
    _, scores, _, _ = _hard_questions_world()
    journal = tmp_path / "runs.sqlite"

    def selector(agent: Counting, journal: Path | bool) -> ModelSelector:
        return ModelSelector(
            agent,
            # unpriced calls: the scouts are the first survivors listed, so list s7-s9 first
            {"solver": [f"s{k}" for k in (7, 8, 9, 0, 1, 2, 3, 4, 5, 6)]},
            [(q, "right") for q in range(200)],
            lambda expected, actual: float(expected == actual),
            algorithm="regret_race",
            algorithm_params={"strata": 4, "scout_at": 0},
            max_concurrent=4,
            seed=3,
            cache=False,
            model_handles=False,
            journal=journal,
        )

    reference_agent = _matrix_agent(scores)
    reference = await selector(reference_agent, journal=False).select_best()
    assert reference.params["strata_sizes"] == [170, 30]  # the race did stratify
    first = _matrix_agent(scores, stop_after=len(reference_agent.runs) // 2)
    task = asyncio.create_task(selector(first, journal).select_best())
    await first.reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    second = _matrix_agent(scores)
    resumed = await selector(second, journal).select_best(resume=True)
    assert resumed.resumed >= len(reference_agent.runs) // 2 - 4
    assert len(set(second.runs) & set(first.runs)) <= 4  # at most those in flight at the cut
    assert len(second.runs) + resumed.resumed == len(reference_agent.runs)
    assert resumed.params["strata_sizes"] == reference.params["strata_sizes"]
    assert resumed.best.name == reference.best.name
    assert [(c.name, c.evaluations) for c in resumed.combinations] == [
        (c.name, c.evaluations) for c in reference.combinations
    ]


def _field_of_perfect_arms(
    perfect: int, missing: int, seed: int, misses: tuple[int, ...] = (42, 43)
) -> tuple[SearchSpace, Arena]:
    """``perfect`` arms right on all 200 questions, then ``missing`` arms wrong on the questions
    at ``misses`` of the race's order (by default the two it sees just before its look at 44)
    and right everywhere else; the cheapest perfect arm is brute force's pick."""
    k = perfect + missing
    scores = np.ones((k, 200))
    costs = np.repeat(np.linspace(0.001, 0.002, k)[:, None], 200, axis=1)
    space = SearchSpace({"solver": [f"m{i:02d}" for i in range(k)]})
    names = [space.name(i) for i in range(k)]
    arena = Arena(k, 200, MatrixEvaluator(scores, costs), seed=seed, names=names)
    scores[perfect:, [arena.order[m] for m in misses]] = 0.0  # filled before any evaluation
    return space, arena


@pytest.mark.parametrize("seed", [0, 1])
async def test_behind_a_field_of_perfect_arms_two_misses_drop_an_arm_at_the_perfect_look(
    seed: int,
) -> None:
    # the race alone keeps an arm two losses behind a perfect leader for a while (point 10);
    # point 14's certificate, which would drop it at 44 too, is off to test point 12 alone
    space, arena = _field_of_perfect_arms(8, 6, seed)
    pick = await run_algorithm(RegretRace(complete_look=0, perfect_look=0), arena, space)
    kept = [arena.count(k) for k in range(8, 14)]
    assert min(kept) > 44 and space.name(pick) == "solver=m00"
    # behind eight perfect arms the bet is taken at the first look of >= 40 questions (44)
    space, arena = _field_of_perfect_arms(8, 6, seed)
    pick = await run_algorithm(
        RegretRace(complete_look=0, perfect_look=40, perfect_arms=8), arena, space
    )
    assert [arena.count(k) for k in range(8, 14)] == [44] * 6
    assert space.name(pick) == "solver=m00"


async def test_with_perfect_every_the_bet_is_taken_at_every_look_behind_a_perfect_field() -> None:
    """Misses at positions 60 and 61 come after the first look of >= 20 questions (21): taken
    once, the bet finds nothing to drop; taken at every look, it drops the arms at the first
    look that has seen both misses (64)."""
    once = RegretRace(complete_look=0, perfect_look=20, perfect_arms=8)
    space, arena = _field_of_perfect_arms(8, 6, 0, misses=(60, 61))
    assert space.name(await run_algorithm(once, arena, space)) == "solver=m00"
    assert min(arena.count(k) for k in range(8, 14)) > 64
    every = RegretRace(complete_look=0, perfect_look=20, perfect_arms=8, perfect_every=True)
    space, arena = _field_of_perfect_arms(8, 6, 0, misses=(60, 61))
    assert space.name(await run_algorithm(every, arena, space)) == "solver=m00"
    assert [arena.count(k) for k in range(8, 14)] == [64] * 6


async def test_perfect_z_below_one_drops_on_a_single_miss_behind_a_perfect_field() -> None:
    """Mean plus one standard error of an arm with one miss is exactly 1 (kept); at
    ``perfect_z=0.5`` the same arm is dropped at the look."""
    space, arena = _field_of_perfect_arms(8, 6, 0, misses=(42,))
    await run_algorithm(RegretRace(complete_look=0, perfect_look=40, perfect_arms=8), arena, space)
    assert min(arena.count(k) for k in range(8, 14)) > 44
    space, arena = _field_of_perfect_arms(8, 6, 0, misses=(42,))
    pick = await run_algorithm(
        RegretRace(complete_look=0, perfect_look=40, perfect_arms=8, perfect_z=0.5), arena, space
    )
    assert [arena.count(k) for k in range(8, 14)] == [44] * 6
    assert space.name(pick) == "solver=m00"


async def test_the_thrifty_race_is_the_default_where_no_field_is_perfect() -> None:
    """A noisy 24-arm world (best 80 %): the same pick and the same cells, arm for arm."""
    space = SearchSpace({"solver": [f"m{i:02d}" for i in range(24)]})
    scores = bernoulli_world(np.linspace(0.55, 0.8, 24), 200, seed=3)
    default_pick, default = await select("regret_race", space, scores, seed=1)
    thrifty_pick, thrifty = await select("regret_race_thrifty", space, scores, seed=1)
    assert thrifty_pick == default_pick
    assert [thrifty.count(k) for k in range(24)] == [default.count(k) for k in range(24)]


async def test_the_thrifty_race_drops_one_miss_behind_a_perfect_field_the_race_keeps() -> None:
    """Twelve perfect arms and six that miss one question, seen at position 25: the race
    without its certificate carries the six past the look; the thrifty race drops them at the
    first look that saw the miss (30) and still picks the cheapest perfect arm. (The default
    drops them no later, by the certificate of a perfect arm it completed at 10.)"""
    space, arena = _field_of_perfect_arms(12, 6, 0, misses=(25,))
    race = RegretRace(complete_look=0)
    assert space.name(await run_algorithm(race, arena, space)) == "solver=m00"
    assert min(arena.count(k) for k in range(12, 18)) > 30
    space, arena = _field_of_perfect_arms(12, 6, 0, misses=(25,))
    assert space.name(await run_algorithm(make_algorithm("auto"), arena, space)) == "solver=m00"
    assert max(arena.count(k) for k in range(12, 18)) <= 30
    space, arena = _field_of_perfect_arms(12, 6, 0, misses=(25,))
    thrifty = make_algorithm("regret_race_thrifty")
    assert space.name(await run_algorithm(thrifty, arena, space)) == "solver=m00"
    assert [arena.count(k) for k in range(12, 18)] == [30] * 6
    # eleven perfect arms are not a field of twelve: no drop at 30
    space, arena = _field_of_perfect_arms(11, 6, 0, misses=(25,))
    await run_algorithm(make_algorithm("regret_race_thrifty"), arena, space)
    assert min(arena.count(k) for k in range(11, 17)) > 30


async def test_behind_too_few_perfect_arms_the_bet_is_not_taken() -> None:
    space, arena = _field_of_perfect_arms(7, 6, 0)  # seven perfect arms, eight asked for
    await run_algorithm(RegretRace(complete_look=0, perfect_look=40, perfect_arms=8), arena, space)
    with_bet_off = [arena.count(k) for k in range(7, 13)]
    space, arena = _field_of_perfect_arms(7, 6, 0)
    await run_algorithm(RegretRace(complete_look=0, perfect_look=0), arena, space)
    assert with_bet_off == [arena.count(k) for k in range(7, 13)]
    assert min(with_bet_off) > 44


class _CertainSpy(RegretRace):
    """Records what point 14 does: the configurations it runs to the end, in order, and the
    ones its certificate drops (not the race's other drops)."""

    completed: list[int]
    dropped: list[int]

    async def _certain_look(self, arena: Arena, active: list[int], n: int) -> list[int]:
        before = arena.observed.all(axis=1)
        kept = await super()._certain_look(arena, active, n)
        self.completed.extend(int(k) for k in np.flatnonzero(arena.observed.all(axis=1) & ~before))
        self.dropped.extend(k for k in active if k not in kept)
        return kept


async def test_the_certificate_never_drops_an_arm_that_can_still_be_the_best() -> None:
    """Near-perfect worlds with 0/1 scores and with partial credit: every arm point 14 drops
    ends strictly below the best whole-dataset score, so brute force's pick is never among them."""
    drops = await _certificate_drops(0, 24, 0.3, complete_look=10, complete_arms=1, probe=0)
    assert drops > 100  # the certificate did the work, not only the race's statistics


async def _certificate_drops(first: int, arms: int, correlation: float, **params: Any) -> int:
    """Eight near-perfect worlds (0/1 scores, and partial credit in every other one), two seeds
    each: assert that every arm points 14-15 drop ends strictly below the best whole-dataset
    score, and count the drops."""
    drops = 0
    for world in range(8):
        rng = np.random.default_rng(first + world)
        probs = np.concatenate([np.ones(world % 3), rng.uniform(0.9, 1.0, arms)])
        scores = bernoulli_world(list(probs), 120, seed=world, correlation=correlation)
        if world % 2:  # partial credit: a right answer earns 0.7-1
            scores = scores * rng.uniform(0.7, 1.0, scores.shape)
        space = SearchSpace({"solver": [f"m{i:02d}" for i in range(len(probs))]})
        totals = scores.sum(axis=1)
        for seed in range(2):
            race = _CertainSpy(**params)
            race.completed, race.dropped = [], []
            names = [space.name(k) for k in range(len(probs))]
            arena = Arena(len(probs), 120, MatrixEvaluator(scores), seed=seed, names=names)
            await run_algorithm(race, arena, space)
            assert all(totals[k] < totals.max() - 1e-9 for k in race.dropped)
            drops += len(race.dropped)
    return drops


async def test_behind_a_complete_perfect_leader_every_arm_with_a_miss_is_dropped() -> None:
    """One arm right everywhere, six that miss the question at position 5 of the race's order:
    the race alone carries them past 44 questions (a single loss may still end level); with
    ``complete_look=40`` the perfect leader is run on all 200 questions at the first look of
    >= 40 (44) and the six, whose ceiling is 199 < 200, go at that look."""
    space, arena = _field_of_perfect_arms(1, 6, 0, misses=(5,))
    await run_algorithm(RegretRace(perfect_look=0, complete_look=0), arena, space)
    assert min(arena.count(k) for k in range(1, 7)) > 44
    space, arena = _field_of_perfect_arms(1, 6, 0, misses=(5,))
    race = RegretRace(perfect_look=0, complete_look=40, complete_arms=1, probe=0)
    assert space.name(await run_algorithm(race, arena, space)) == "solver=m00"
    assert arena.count(0) == 200
    assert [arena.count(k) for k in range(1, 7)] == [44] * 6


async def test_a_leader_with_a_miss_is_not_completed_and_the_race_is_unchanged() -> None:
    """No arm is perfect: point 14 never runs a leader ahead, so the race is cell for cell the
    race without it (the noisy benchmarks)."""
    space = SearchSpace({"solver": [f"m{i:02d}" for i in range(16)]})
    scores = bernoulli_world(list(np.linspace(0.6, 0.85, 16)), 200, seed=5)
    _, plain = await select("regret_race", space, scores, seed=2, complete_look=0)
    _, certain = await select("regret_race", space, scores, seed=2, complete_look=40)
    assert [certain.count(k) for k in range(16)] == [plain.count(k) for k in range(16)]


async def test_no_certificate_under_a_cost_weighted_objective() -> None:
    """A weighted objective is rescaled as cells arrive, so a whole-dataset score is no bound
    on later ones: point 14 leaves the race alone, cell for cell."""
    counts = []
    for complete_look in (0, 40):
        space, arena = _field_of_perfect_arms(1, 6, 0, misses=(5,))
        arena.objective = Objective(cost_weight=0.5)
        await run_algorithm(RegretRace(perfect_look=0, complete_look=complete_look), arena, space)
        counts.append([arena.count(k) for k in range(7)])
    assert counts[0] == counts[1] and counts[0][0] < 200


async def test_the_certificate_completes_the_perfect_survivor_whose_steps_do_best() -> None:
    """4 planners x 4 solvers. (p0, s0) is right everywhere and the dearest; the six others with
    p0 or s0 are perfect for 100 questions, then miss twice; the nine without either miss three
    of the first 30. The cheapest perfect survivor is one of the six: run to the end, it leaves
    a two-miss certificate, and the race runs the next one, and the next. By the main effects,
    (p0, s0) is the likeliest perfect survivor: run to the end first, its certificate is the
    last one needed."""
    planners, solvers = [f"p{i}" for i in range(4)], [f"s{i}" for i in range(4)]
    space = SearchSpace({"planner": planners, "solver": solvers})
    names = [space.name(k) for k in range(16)]
    costs = np.full((16, 200), 0.001)
    scores = np.ones((16, 200))
    completed = {}
    for by in ("cost", "effects"):
        arena = Arena(16, 200, MatrixEvaluator(scores, costs), seed=0, names=names)
        at = arena.order  # the race's order: misses placed by the position it sees them
        for k in range(16):
            labels = space.labels(k)
            strong = (labels["planner"] == "p0") + (labels["solver"] == "s0")
            if strong == 2:
                costs[k] = 0.01
            elif strong == 1:
                scores[k, [at[100 + k], at[150 + k]]] = 0.0
                costs[k] = 0.001 + 0.0001 * k
            else:
                scores[k, [at[5 + k], at[15 + k], at[25]]] = 0.0
        race = _CertainSpy(complete_by=by)
        race.completed, race.dropped = [], []
        pick = await run_algorithm(race, arena, space)
        assert space.name(pick) == "planner=p0 + solver=s0"
        completed[by] = [space.name(k) for k in race.completed]
    assert completed["effects"] == ["planner=p0 + solver=s0"]
    assert completed["cost"][0] != "planner=p0 + solver=s0" and len(completed["cost"]) > 1


# ---------------------------------------------------------------- point 15: probing


def _staged_field(
    misses: list[tuple[int, ...]], costs: list[float], n: int = 200
) -> tuple[SearchSpace, Arena, MatrixEvaluator]:
    """One-step arms right everywhere except on the given positions of the race's order."""
    k = len(misses)
    scores = np.ones((k, n))
    space = SearchSpace({"solver": [f"m{i:02d}" for i in range(k)]})
    evaluator = MatrixEvaluator(scores, np.repeat(np.asarray(costs)[:, None], n, axis=1))
    names = [space.name(i) for i in range(k)]
    arena = Arena(k, n, evaluator, seed=0, names=names)
    for arm, positions in enumerate(misses):
        scores[arm, [arena.order[p] for p in positions]] = 0.0  # before any evaluation
    return space, arena, evaluator


def _probing_field() -> tuple[SearchSpace, Arena, MatrixEvaluator]:
    """m00 (cheapest) misses position 150 only; m01 misses 150 and 13; m02 is right everywhere
    (the pick); m03-m08 (dearest) miss 150 and 190. The race's own prefix sees none of the
    misses before its look at 12."""
    stages = [(150,), (150, 13), ()] + [(150, 190)] * 6
    return _staged_field(stages, [0.001, 0.002, 0.003] + [0.005] * 6)


async def test_probes_ask_where_a_complete_arm_lost_and_drop_the_arms_that_lose_there() -> None:
    """m00 is completed first (a certificate of 199), then m01 and m02 (200). Without probes
    m03-m08, perfect on the prefix, are carried until the prefix reaches position 150; with
    probes each is asked position 150 (the question the complete arms lost) at once and goes."""
    space, arena, _ = _probing_field()
    race = RegretRace(complete_look=10, complete_arms=1, perfect_look=0, probe=0)
    assert space.name(await run_algorithm(race, arena, space)) == "solver=m02"
    assert min(arena.count(k) for k in range(3, 9)) > 150

    space, arena, evaluator = _probing_field()
    race = RegretRace(complete_look=10, complete_arms=1, perfect_look=0, probe=1, probe_slack=1)
    assert space.name(await run_algorithm(race, arena, space)) == "solver=m02"
    assert max(arena.count(k) for k in range(3, 9)) <= 20
    hard = arena.order[150]
    for k in range(3, 9):
        asked = [i for arm, i in evaluator.requested if arm == k]
        assert hard in asked and len(asked) == arena.count(k)


async def test_a_later_leader_is_completed_hardest_first_and_stops_below_the_certificate() -> None:
    """After m00's certificate (199), m01 is the cheapest perfect survivor: without probes it is
    run on all 200 questions; with them its completion starts with position 150 and the race's
    next questions (13 among them) and stops after one chunk, two misses down."""
    space, arena, _ = _probing_field()
    race = RegretRace(complete_look=10, complete_arms=1, perfect_look=0, probe=0)
    await run_algorithm(race, arena, space)
    assert arena.count(1) == 200

    space, arena, _ = _probing_field()
    race = RegretRace(complete_look=10, complete_arms=1, perfect_look=0, probe=1, probe_slack=1)
    await run_algorithm(race, arena, space)
    assert arena.count(1) <= 12 + 20  # the prefix at that look, then one chunk of 10 %
    assert arena.observed[1, 150] and arena.observed[1, 13]


async def test_probing_never_drops_an_arm_that_can_still_be_the_best() -> None:
    """Near-perfect worlds with shared difficulty, 0/1 scores and partial credit: every arm that
    point 14 and its probes drop ends strictly below the best whole-dataset score."""
    for cheapest in (1.0, 0.5):
        drops = await _certificate_drops(
            100, 30, 0.6, complete_look=10, complete_arms=8, probe=1, probe_cheapest=cheapest
        )
        assert drops > 150


async def test_on_a_near_perfect_field_with_shared_difficulty_probing_finds_the_same_best_for_less() -> (
    None
):
    """40 arms at 93-100 % whose misses gather on hard questions: with probes the race picks
    the same configuration on every seed and spends less on every seed."""
    rng = np.random.default_rng(7)
    probs = [1.0, *rng.uniform(0.93, 0.995, 39)]
    scores = bernoulli_world(probs, 200, seed=7, correlation=0.7)
    costs = np.repeat(rng.uniform(0.001, 0.02, 40)[:, None], 200, axis=1)
    space = SearchSpace({"solver": [f"m{i:02d}" for i in range(40)]})
    for seed in range(3):
        params: dict[str, Any] = {"complete_look": 10, "complete_arms": 8}
        plain_pick, plain = await select(
            "regret_race", space, scores, seed=seed, costs=costs, probe=0, **params
        )
        probe_pick, probed = await select(
            "regret_race", space, scores, seed=seed, costs=costs, probe=1, **params
        )
        assert probe_pick == plain_pick == 0
        assert probed.cost_spent < 0.9 * plain.cost_spent


async def test_a_small_near_perfect_space_is_completed_with_fewer_survivors_than_asked() -> None:
    """Three perfect-looking arms and ``complete_arms=8``: all three survivors are perfect,
    which is as many as there are, so the leader is completed at the look of 10 and the
    certificate rules out the two others by their misses at 150 and 160 (the race alone
    carries both past them)."""
    space, arena, _ = _staged_field([(), (150,), (160,)], [0.001, 0.002, 0.003])
    race = _CertainSpy(complete_look=10, complete_arms=8, perfect_look=0, probe=1)
    race.completed, race.dropped = [], []
    assert space.name(await run_algorithm(race, arena, space)) == "solver=m00"
    assert race.completed == [0] and 1 in race.dropped
    assert arena.count(1) < 200 and arena.count(2) < 200
    space, arena, _ = _staged_field([(), (150,), (160,)], [0.001, 0.002, 0.003])
    await run_algorithm(RegretRace(complete_look=0, perfect_look=0), arena, space)
    assert min(arena.count(1), arena.count(2)) > 150


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"probe": -1}, "probe"),
        ({"probe_rounds": 0}, "probe_rounds"),
        ({"probe_slack": 0}, "probe_slack"),
        ({"complete_chunk": 0}, "complete_chunk"),
        ({"complete_chunk": 1.5}, "complete_chunk"),
    ],
)
def test_probe_parameters_out_of_range_are_refused_by_name(
    params: dict[str, Any], words: str
) -> None:
    with pytest.raises(UserError, match=words):
        RegretRace(**params)


async def test_the_cheaper_survivors_are_probed_first_and_show_the_dearer_ones_where_to_look() -> (
    None
):
    """m00 is right everywhere and completed at the look of 10; m01-m04 (cheap) and m05-m08
    (ten times dearer) all miss the question at position 30 only. Probed all together, every
    survivor walks positions 10-30 in the race's order; probed cheaper half first, the cheap
    ones find position 30 and each dear one is then asked it first."""
    counts = {}
    for cheapest in (1.0, 0.5):
        space, arena, _ = _staged_field([(), *[(30,)] * 8], [0.001, *[0.002] * 4, *[0.02] * 4])
        race = RegretRace(probe_cheapest=cheapest)
        assert space.name(await run_algorithm(race, arena, space)) == "solver=m00"
        counts[cheapest] = [arena.count(k) for k in range(1, 9)]
    assert counts[1.0] == [31] * 8
    assert counts[0.5][:4] == [31] * 4 and counts[0.5][4:] == [11] * 4


@pytest.mark.parametrize("value", [0, -0.5, 1.5])
def test_probe_cheapest_outside_0_1_is_refused(value: float) -> None:
    with pytest.raises(UserError, match="probe_cheapest"):
        RegretRace(probe_cheapest=value)
