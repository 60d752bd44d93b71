"""Selection algorithms: which combinations to evaluate on which datapoints, and which to recommend.

Every algorithm works on an :class:`~phi_core.select.Arena` (never on an agent) and returns the
index of the combination it recommends. The baselines follow AgentOpt's selectors as
``reference/study-agentopt.md`` describes them, with their defects fixed: the dataset order is
shuffled per seed, failures score 0, ties are broken by accuracy, cost, latency and name, all
randomness comes from the arena's seeded generator, and the recommendation is taken among the
combinations the algorithm still believes in (never an eliminated arm's lucky early mean).
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ..errors import BudgetExhausted, MissingExtraError, UserError
from ._arena import Arena
from ._space import SearchSpace

__all__ = [
    "ALGORITHMS",
    "ArmElimination",
    "BayesianOptimization",
    "BruteForce",
    "EpsilonLUCB",
    "HillClimbing",
    "MatrixUCB",
    "RandomSearch",
    "SelectionAlgorithm",
    "ThresholdSuccessiveElimination",
    "make_algorithm",
    "run_algorithm",
]


class SelectionAlgorithm(ABC):
    """One best-arm identification strategy. A fresh instance is used for every run."""

    name: ClassVar[str]

    def __init__(self) -> None:
        self.pool: set[int] | None = None
        """Combinations still in contention (``None``: all evaluated ones); used when the budget ends."""
        self.warnings: list[str] = []
        """What the caller should know about this run (e.g. a proposer's unusable replies)."""

    @abstractmethod
    async def run(self, arena: Arena, space: SearchSpace) -> int:
        """Evaluate through ``arena`` and return the recommended combination index."""

    def params(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in vars(self).items()
            if not k.startswith("_") and k not in ("pool", "warnings")
        }


async def run_algorithm(algorithm: SelectionAlgorithm, arena: Arena, space: SearchSpace) -> int:
    """Run ``algorithm``; when the budget runs out, recommend the best of its remaining pool."""
    try:
        return await algorithm.run(arena, space)
    except BudgetExhausted:
        return arena.best(algorithm.pool)


def _se(arena: Arena, k: int) -> float:
    """AgentOpt's standard error: sample std / sqrt(n), with std fixed at 0.5 below two samples."""
    n = arena.count(k)
    sd = arena.std(k) if n >= 2 else 0.5
    return sd / math.sqrt(max(n, 1))


# --------------------------------------------------------------------------- full-data searches


class BruteForce(SelectionAlgorithm):
    """Every combination on every datapoint: the ground truth, at full price."""

    name = "brute_force"

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        await arena.evaluate_prefix(range(arena.n_combos), arena.n_datapoints)
        return arena.best()


class RandomSearch(SelectionAlgorithm):
    """``ceil(sample_fraction * combos)`` combinations drawn without replacement, each on all data."""

    name = "random"

    def __init__(self, sample_fraction: float = 0.25) -> None:
        super().__init__()
        if not 0 < sample_fraction <= 1:
            raise UserError(f"sample_fraction must be in (0, 1], got {sample_fraction!r}.")
        self.sample_fraction = sample_fraction

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        m = max(1, math.ceil(self.sample_fraction * arena.n_combos))
        chosen = arena.rng.sample(range(arena.n_combos), m)
        self.pool = set(chosen)
        await arena.evaluate_prefix(chosen, arena.n_datapoints)
        return arena.best(self.pool)


class HillClimbing(SelectionAlgorithm):
    """Local search over combinations that differ in one step, with random restarts.

    Each restart starts at an unvisited random combination; each iteration evaluates up to
    ``neighbours_per_step`` unvisited neighbours on the full dataset and moves to the best one if
    it ranks strictly better. A restart ends after ``patience`` iterations without a move or
    ``max_iterations`` iterations.
    """

    name = "hill_climbing"

    def __init__(
        self,
        max_iterations: int = 20,
        num_restarts: int = 3,
        patience: int = 3,
        neighbours_per_step: int = 1,
    ) -> None:
        super().__init__()
        self.max_iterations = max_iterations
        self.num_restarts = num_restarts
        self.patience = patience
        self.neighbours_per_step = neighbours_per_step

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        rng = arena.rng
        visited: set[int] = set()
        self.pool = visited
        full = arena.n_datapoints
        for _ in range(self.num_restarts):
            unvisited = [k for k in range(arena.n_combos) if k not in visited]
            if not unvisited:
                break
            current = rng.choice(unvisited)
            visited.add(current)
            await arena.evaluate_prefix([current], full)
            stale = 0
            for _ in range(self.max_iterations):
                options = [k for k in space.neighbours(current) if k not in visited]
                if not options:
                    break
                batch = rng.sample(options, min(self.neighbours_per_step, len(options)))
                visited.update(batch)
                await arena.evaluate_prefix(batch, full)
                candidate = arena.best(batch)
                if arena.rank_key(candidate) < arena.rank_key(current):
                    current, stale = candidate, 0
                else:
                    stale += 1
                    if stale >= self.patience:
                        break
        return arena.best(visited)


class BayesianOptimization(SelectionAlgorithm):
    """Optuna's TPE sampler over the categorical space (one categorical per step).

    ``max(2, ceil(sample_fraction * combos))`` distinct combinations are evaluated on the full
    dataset; the first ``n_startup`` are random. The sampler is seeded from the arena's generator.
    Needs the ``bayes`` extra (optuna).
    """

    name = "bayesian"

    def __init__(
        self, sample_fraction: float = 0.25, n_startup: int | None = None, batch_size: int = 1
    ) -> None:
        super().__init__()
        if not 0 < sample_fraction <= 1:
            raise UserError(f"sample_fraction must be in (0, 1], got {sample_fraction!r}.")
        self.sample_fraction = sample_fraction
        self.n_startup = n_startup
        self.batch_size = max(1, batch_size)

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        try:
            import optuna
        except ImportError as error:
            raise MissingExtraError("The `bayesian` selection algorithm", "bayes") from error
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        budget = min(arena.n_combos, max(2, math.ceil(self.sample_fraction * arena.n_combos)))
        startup = (
            self.n_startup
            if self.n_startup is not None
            else min(budget, 2 * (len(space.steps) + 1))
        )
        sampler = optuna.samplers.TPESampler(
            seed=arena.rng.randrange(2**31), n_startup_trials=startup
        )
        study = optuna.create_study(direction="maximize", sampler=sampler)
        choices = [list(range(len(c))) for c in space.candidates]
        seen: set[int] = set()
        self.pool = seen
        attempts = 0
        while len(seen) < budget and attempts < 50 * budget:
            trials = []
            fresh: list[int] = []
            for _ in range(min(self.batch_size, budget - len(seen))):
                trial = study.ask()
                attempts += 1
                coords = [
                    trial.suggest_categorical(step, choices[i])
                    for i, step in enumerate(space.steps)
                ]
                k = space.index(coords)
                trials.append((trial, k))
                if k not in seen and k not in fresh:
                    fresh.append(k)
            seen.update(fresh)
            await arena.evaluate_prefix(fresh, arena.n_datapoints)
            for trial, k in trials:
                study.tell(trial, arena.mean(k))
            if not fresh and attempts >= 10 * budget:
                # the sampler keeps proposing known combinations: finish with random unseen ones
                rest = [k for k in range(arena.n_combos) if k not in seen]
                extra = arena.rng.sample(rest, min(len(rest), budget - len(seen)))
                seen.update(extra)
                await arena.evaluate_prefix(extra, arena.n_datapoints)
        return arena.best(seen)


# --------------------------------------------------------------------------- bandits


def _schedule(n0: int, growth: float, total: int) -> list[int]:
    """Cumulative sample sizes n0, n0*g, n0*g^2, ... capped at ``total`` (strictly increasing)."""
    out: list[int] = []
    n = float(max(1, n0))
    while int(n) < total:
        if not out or int(n) > out[-1]:
            out.append(int(n))
        n = max(n * growth, n + 1)
    out.append(total)
    return out


class ArmElimination(SelectionAlgorithm):
    """AgentOpt's default: successive elimination with ``mean +- c*SE`` intervals on growing batches.

    Batches of ``n_initial`` (default n/10), then ``growth`` times larger, on consecutive slices of
    the shuffled dataset; after each batch an arm is dropped when its upper bound lies below some
    other active arm's lower bound. No ``delta``/union-bound correction (that is the algorithm).
    The recommendation is the best surviving arm.
    """

    name = "arm_elimination"

    def __init__(
        self, n_initial: int | None = None, growth_factor: float = 2.0, confidence: float = 1.0
    ) -> None:
        super().__init__()
        self.n_initial = n_initial
        self.growth_factor = growth_factor
        self.confidence = confidence

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        total = arena.n_datapoints
        n0 = self.n_initial or max(1, total // 10)
        active = list(range(arena.n_combos))
        self.pool = set(active)
        seen = 0
        batch = n0
        while seen < total and len(active) > 1:
            seen = min(total, seen + batch)
            batch = int(batch * self.growth_factor)
            await arena.evaluate_prefix(active, seen)
            c = self.confidence
            bounds = {
                k: (arena.mean(k) - c * _se(arena, k), arena.mean(k) + c * _se(arena, k))
                for k in active
            }
            best_lower = max(lo for lo, _ in bounds.values())
            active = [k for k in active if bounds[k][1] >= best_lower]
            self.pool = set(active)
        return arena.best(active)


class ThresholdSuccessiveElimination(SelectionAlgorithm):
    """Classify arms as above/below ``threshold``; recommend the above-arm with the best lower bound.

    An initial batch for every arm, then one more datapoint per round for each arm whose interval
    still straddles the threshold. Intervals use a shrunk SE that cannot collapse to zero width.
    """

    name = "threshold"

    def __init__(
        self, threshold: float = 0.75, n_initial: int | None = None, confidence: float = 1.96
    ) -> None:
        super().__init__()
        self.threshold = threshold
        self.n_initial = n_initial
        self.confidence = confidence

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        total = arena.n_datapoints
        n0 = min(total, self.n_initial or max(2, total // 10))
        await arena.evaluate_prefix(range(arena.n_combos), n0)
        c = self.confidence
        above: set[int] = set()
        ambiguous = list(range(arena.n_combos))
        self.pool = set(ambiguous)
        while True:
            _, mean, se = arena.stats()
            still = [
                k for k in ambiguous if mean[k] - c * se[k] <= self.threshold <= mean[k] + c * se[k]
            ]
            above.update(k for k in ambiguous if mean[k] - c * se[k] > self.threshold)
            ambiguous = [k for k in still if arena.prefix(k) < total]
            self.pool = above | set(still) or None
            if not ambiguous:
                break
            await arena.evaluate({k: [arena.prefix(k)] for k in ambiguous})
        _, mean, se = arena.stats()
        pool = sorted(above or set(still) or range(arena.n_combos))
        best_lower = max(mean[k] - c * se[k] for k in pool)
        return arena.best(k for k in pool if mean[k] - c * se[k] >= best_lower - 1e-12)


class EpsilonLUCB(SelectionAlgorithm):
    """LUCB: sample the empirical leader and its strongest challenger until they are eps-separated.

    Stops when ``UCB(challenger) - LCB(leader) <= epsilon`` or data runs out. Uses the shrunk SE of
    :meth:`Arena.stats` (no zero-width intervals after 0/1 streaks, which made AgentOpt's version
    stop after two or three datapoints) with ``confidence`` standard errors.
    """

    name = "epsilon_lucb"

    def __init__(self, epsilon: float = 0.01, n_initial: int = 1, confidence: float = 1.96) -> None:
        super().__init__()
        self.epsilon = epsilon
        self.n_initial = n_initial
        self.confidence = confidence

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        total = arena.n_datapoints
        await arena.evaluate_prefix(range(arena.n_combos), min(total, self.n_initial))
        c = self.confidence
        if arena.n_combos == 1:
            return 0
        while True:
            leader = arena.best()
            _, mean, se = arena.stats()
            ucb = mean + c * se
            ucb[leader] = -np.inf
            challenger = int(np.argmax(ucb))
            if ucb[challenger] - (mean[leader] - c * se[leader]) <= self.epsilon:
                return leader
            pending = [k for k in (leader, challenger) if arena.prefix(k) < total]
            if not pending:
                return leader
            await arena.evaluate({k: [arena.prefix(k)] for k in pending})


class MatrixUCB(SelectionAlgorithm):
    """UCB over rows of the combination x datapoint matrix, with an observation budget.

    Row bound = mean + sqrt(a / count) (unobserved rows first). Each step evaluates up to
    ``cells_per_step`` random unobserved cells of the row with the highest bound, until
    ``budget_fraction`` of all cells is observed. Recommends the best observed row.
    """

    name = "matrix_ucb"

    def __init__(
        self, a: float = 1.0, budget_fraction: float = 0.25, cells_per_step: int = 20
    ) -> None:
        super().__init__()
        if not 0 < budget_fraction <= 1:
            raise UserError(f"budget_fraction must be in (0, 1], got {budget_fraction!r}.")
        self.a = a
        self.budget_fraction = budget_fraction
        self.cells_per_step = cells_per_step

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        total = arena.n_datapoints
        target = math.ceil(self.budget_fraction * arena.n_combos * total)
        while arena.evaluations < target:
            counts = arena.observed.sum(axis=1)
            sums = (arena.scores * arena.observed).sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                bound = np.where(
                    counts > 0,
                    sums / np.maximum(counts, 1) + np.sqrt(self.a / np.maximum(counts, 1)),
                    np.inf,
                )
            bound[counts >= total] = -np.inf
            row = int(np.argmax(bound))
            if bound[row] == -np.inf:
                break
            free = np.flatnonzero(~arena.observed[row]).tolist()
            take = min(self.cells_per_step, len(free), target - arena.evaluations)
            await arena.evaluate({row: arena.rng.sample(free, take)})
        return arena.best()


ALGORITHMS: dict[str, type[SelectionAlgorithm]] = {
    cls.name: cls
    for cls in (
        BruteForce,
        RandomSearch,
        HillClimbing,
        ArmElimination,
        ThresholdSuccessiveElimination,
        EpsilonLUCB,
        BayesianOptimization,
        MatrixUCB,
    )
}


def make_algorithm(algorithm: str | SelectionAlgorithm, **params: Any) -> SelectionAlgorithm:
    """An algorithm instance from a name (``"auto"`` = our regret race) or an instance."""
    if isinstance(algorithm, SelectionAlgorithm):
        if params:
            raise UserError(
                "Pass parameters to the algorithm's constructor, not alongside an instance."
            )
        return algorithm
    from ._lowrank import LowRankMatrixUCB
    from ._proposal import LMProposal
    from ._race import PairedRace, RegretRace, ThriftyRegretRace

    registry: dict[str, type[SelectionAlgorithm]] = {
        **ALGORITHMS,
        PairedRace.name: PairedRace,
        RegretRace.name: RegretRace,
        ThriftyRegretRace.name: ThriftyRegretRace,
        LowRankMatrixUCB.name: LowRankMatrixUCB,
        LMProposal.name: LMProposal,
        "auto": RegretRace,
    }
    try:
        cls = registry[algorithm]
    except KeyError:
        raise UserError(
            f"Unknown selection algorithm {algorithm!r}; choose one of {sorted(registry)!r}."
        ) from None
    signature = inspect.signature(cls.__init__).parameters
    accepted = [
        name
        for name, parameter in signature.items()
        if name != "self" and parameter.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        hints = [difflib.get_close_matches(name, accepted, n=1) for name in unknown]
        guesses = [
            f"{name!r} (did you mean {hint[0]!r}?)"
            for name, hint in zip(unknown, hints, strict=True)
            if hint
        ]
        raise UserError(
            f"Unknown parameter(s) {', '.join(map(repr, unknown))} for algorithm {algorithm!r}"
            + (f": {'; '.join(guesses)}" if guesses else "")
            + f". It accepts: {', '.join(accepted) or 'no parameters'}."
        )
    for name, value in params.items():
        default = signature[name].default
        if isinstance(default, bool) and not isinstance(value, bool):
            raise UserError(
                f"Parameter {name!r} of algorithm {algorithm!r} must be true or false, "
                f"got {value!r}."
            )
        if (
            isinstance(default, int | float)
            and not isinstance(default, bool)
            and (isinstance(value, bool) or not isinstance(value, numbers.Real))
        ):
            raise UserError(
                f"Parameter {name!r} of algorithm {algorithm!r} must be a number, got {value!r}."
            )
    try:
        return cls(**params)
    except TypeError as error:
        raise UserError(f"Bad parameters for algorithm {algorithm!r}: {error}.") from error
