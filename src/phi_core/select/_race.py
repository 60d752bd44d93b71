"""Our selector: paired successive elimination with finite-population confidence bounds."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from ..errors import UserError
from ._algorithms import SelectionAlgorithm, _schedule
from ._arena import Arena
from ._space import SearchSpace

__all__ = ["PairedRace"]


class PairedRace(SelectionAlgorithm):
    """Paired successive elimination with finite-population, union-bounded confidence intervals.

    **Target.** The combination a full grid search would pick: the best mean score over the
    *whole* (finite) dataset, ties broken by cost, latency and name.

    **Idea.**

    1. *Paired comparisons on shared datapoints.* All surviving combinations are evaluated on the
       same prefix of the seeded, shuffled dataset (sizes ``n_initial`` = max(5, N/40), then
       ×``growth`` = 1.2 each round, ending at the full dataset). Two combinations are compared through the per-question
       differences ``d_t = x_j,t - x_i,t``. Question difficulty is shared by all combinations, so
       the variance of ``d`` is far smaller than that of either score (on AgentOpt's HotpotQA
       matrix the top arms correlate at 0.6-0.9).
    2. *Finite-population bounds.* The dataset is finite and the prefix is a uniform sample
       without replacement, so the standard error of the mean difference carries the correction
       ``sqrt((N - n) / (N - 1))``: the interval shrinks to zero at ``n = N``, where the full-data
       means are known exactly. Near-ties are therefore never decided by noise — they are carried
       to the full dataset and decided exactly, the way brute force decides them.
    3. *No zero-width intervals.* The sample variance of ``d`` is shrunk towards the maximal
       variance by ``prior`` pseudo-observations, so streaks of identical 0/1 outcomes (which made
       AgentOpt's eps-LUCB and threshold SE stop after two datapoints) cannot fake certainty.
    4. *A delta and a union bound.* ``delta`` is split evenly over the ``R`` decision rounds and,
       within a round, over the ``m - 1`` comparisons that could eliminate any given survivor
       (``m`` survivors): ``j`` eliminates ``i`` only when the lower bound of the mean difference,
       at ``z = Phi^-1(1 - delta / (R (m - 1)))``, exceeds zero. As arms drop out the survivors
       are compared at a smaller ``z``, which is where the expensive near-ties are decided.
    5. *Deterministic, cost-aware recommendation.* Among survivors (all on the same datapoints) the
       pick is the highest mean, then the lowest cost, latency and name; with ``epsilon > 0`` the
       race also stops once the leader is within ``epsilon`` of every survivor.

    Passing ``z`` replaces the delta-derived multiplier by a fixed one (cheaper, no guarantee) —
    AgentOpt's arm elimination is in effect ``z = 1`` on unpaired intervals.

    **Guarantee.** Under the normal approximation of the (finite-population) mean difference, with
    probability at least ``1 - delta`` the full-data best combination is never eliminated, so the
    pick equals brute force's pick (or, with ``epsilon``, is within ``epsilon`` of it). The
    approximation is asymptotic, not a distribution-free bound: empirical-Bernstein or KL bounds
    with the same ``delta`` are valid for every ``n`` but, at the 100-300 datapoints typical of
    model selection, are too wide to eliminate anything before the last round. Every interval is
    exact at ``n = N``. The cost is at most that of brute force.
    """

    name = "paired_race"

    def __init__(
        self,
        delta: float = 0.1,
        epsilon: float = 0.0,
        n_initial: int | None = None,
        growth: float = 1.2,
        prior: float = 0.25,
        z: float | None = None,
    ) -> None:
        super().__init__()
        if not 0 < delta < 1:
            raise UserError(f"delta must be in (0, 1), got {delta!r}.")
        if epsilon < 0:
            raise UserError(f"epsilon must be >= 0, got {epsilon!r}.")
        if growth <= 1:
            raise UserError(f"growth must be > 1, got {growth!r}.")
        self.delta = delta
        self.epsilon = epsilon
        self.n_initial = n_initial
        self.growth = growth
        self.prior = prior
        if z is not None and z <= 0:
            raise UserError(f"z must be > 0, got {z!r}.")
        self.z = z

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        total = arena.n_datapoints
        k_all = arena.n_combos
        n0 = min(total, self.n_initial or max(5, total // 40))
        schedule = _schedule(n0, self.growth, total)
        decisions = max(1, len(schedule) - 1)  # no test is needed at n = N: the means are exact
        active = list(range(k_all))
        self.pool = set(active)
        for n in schedule:
            await arena.evaluate_prefix(active, n)
            if n >= total or len(active) == 1 or n < 2:
                continue
            z = self.z or NormalDist().inv_cdf(1 - self.delta / (decisions * (len(active) - 1)))
            active = self._eliminate(arena, active, n, z)
            self.pool = set(active)
            if len(active) == 1 or self._epsilon_stop(arena, active, n, z):
                break
        return arena.best(active)

    def _bounds(
        self, arena: Arena, active: list[int], n: int, z: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean differences ``D[j, i] = mean(x_j - x_i)`` and their half-widths on the prefix ``n``."""
        total = arena.n_datapoints
        x = arena.matrix(active, n)
        means = x.mean(axis=1)
        diff = means[:, None] - means[None, :]
        squares = (x * x).sum(axis=1)
        ss = squares[:, None] + squares[None, :] - 2.0 * (x @ x.T) - n * diff * diff
        var = (np.maximum(ss, 0.0) + self.prior) / (n - 1 + self.prior)
        fpc = math.sqrt(max(0.0, (total - n) / (total - 1)))
        half = z * np.sqrt(var) / math.sqrt(n) * fpc
        return diff, half

    def _eliminate(self, arena: Arena, active: list[int], n: int, z: float) -> list[int]:
        diff, half = self._bounds(arena, active, n, z)
        beaten = ((diff - half) > 0).any(axis=0)
        return [k for k, out in zip(active, beaten, strict=True) if not out]

    def _epsilon_stop(self, arena: Arena, active: list[int], n: int, z: float) -> bool:
        if self.epsilon <= 0:
            return False
        leader = arena.best(active)
        diff, half = self._bounds(arena, active, n, z)
        row = active.index(leader)
        lower = diff[row] - half[row]
        lower[row] = 0.0
        if bool((lower >= -self.epsilon).all()):
            self.pool = {leader}
            active[:] = [leader]
            return True
        return False
