"""AgentOpt's matrix UCB with low-rank completion (``matrix_ucb_lrf``), on numpy.

The combination x datapoint score matrix of an agent benchmark is close to low rank: question
difficulty is shared by every combination and a combination's quality scales its chance on every
question. AgentOpt (HEAD) completes the partly observed matrix with an ensemble of alternating-
least-squares factorisations and runs UCB on the completed rows (``reference/study-agentopt.md``
§2.10); its module is broken at HEAD (the factorisation code was deleted), so this is a
re-implementation of the described algorithm with torch replaced by numpy.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UserError
from ._algorithms import SelectionAlgorithm
from ._arena import Arena
from ._space import SearchSpace

__all__ = ["LowRankMatrixUCB"]


class LowRankMatrixUCB(SelectionAlgorithm):
    """UCB on a low-rank completion of the combination x datapoint matrix.

    1. *Warm-up*: random cells until ``warmup_fraction`` of the grid is observed (every
       combination gets at least two).
    2. *Completion*: an ensemble of ``ensemble_size`` rank-``rank`` factorisations
       ``x_kq ~ u_k . v_q`` (a combination's strength times a question's easiness) fitted by ridge alternating least squares (``regularizer``) on the
       observed cells, each member from its own random start near the mean score and with every observed cell dropped
       with probability ``drop_probability`` (bootstrap diversity). Member ``e`` predicts
       ``mu_e[k, q]``; the ensemble gives a per-cell mean ``mu`` and spread ``sigma``. The first
       fit runs ``iterations`` sweeps, later ones start from the previous factors and run
       ``refit_iterations``.
    3. *UCB*: a cell's bound is its observed value, or ``mu + eta * sigma`` when unobserved; a
       row's bound is the mean of its cells' bounds. The row with the highest bound has its
       ``cells_per_step`` unobserved cells with the largest ``sigma`` evaluated.
    4. Stop when ``budget_fraction`` of all cells are observed (AgentOpt's default 1.0 fills the
       whole grid and saves nothing, hence 0.25 here, as for :class:`MatrixUCB`).
    5. *Pick*: the combination with the highest completed mean (observed cells, completed
       estimates for the rest), ties by the arena's ranking (cost, latency, name).

    Defaults follow AgentOpt's (rank 1, warm-up 5 %, regulariser 0.1, drop 5 %, 10 sweeps,
    eta 5) except ``ensemble_size`` (16 instead of 64: four times less arithmetic for a spread
    estimate that, on AgentOpt's HotpotQA matrices, picks the same rows) and the budget.
    """

    name = "matrix_ucb_lrf"

    def __init__(
        self,
        rank: int = 1,
        ensemble_size: int = 16,
        warmup_fraction: float = 0.05,
        regularizer: float = 0.1,
        drop_probability: float = 0.05,
        iterations: int = 10,
        refit_iterations: int = 2,
        eta: float = 5.0,
        budget_fraction: float = 0.25,
        cells_per_step: int = 20,
    ) -> None:
        super().__init__()
        if not 0 < budget_fraction <= 1:
            raise UserError(f"budget_fraction must be in (0, 1], got {budget_fraction!r}.")
        if not 0 <= warmup_fraction <= budget_fraction:
            raise UserError(
                f"warmup_fraction must be in [0, budget_fraction], got {warmup_fraction!r}."
            )
        if rank < 1 or ensemble_size < 2 or cells_per_step < 1:
            raise UserError("rank and cells_per_step must be >= 1 and ensemble_size >= 2.")
        if not 0 <= drop_probability < 1:
            raise UserError(f"drop_probability must be in [0, 1), got {drop_probability!r}.")
        if regularizer <= 0 or iterations < 1 or refit_iterations < 1 or eta < 0:
            raise UserError(
                "regularizer must be > 0, iterations and refit_iterations >= 1, eta >= 0."
            )
        self.rank = rank
        self.ensemble_size = ensemble_size
        self.warmup_fraction = warmup_fraction
        self.regularizer = regularizer
        self.drop_probability = drop_probability
        self.iterations = iterations
        self.refit_iterations = refit_iterations
        self.eta = eta
        self.budget_fraction = budget_fraction
        self.cells_per_step = cells_per_step
        self._factors: tuple[np.ndarray, np.ndarray] | None = None

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        k_all, total = arena.n_combos, arena.n_datapoints
        target = min(k_all * total, math.ceil(self.budget_fraction * k_all * total))
        self._factors = None
        seed = arena.rng.randrange(2**31)
        rng = np.random.default_rng(seed)
        await self._warm_up(arena, min(target, math.ceil(self.warmup_fraction * k_all * total)))
        while arena.evaluations < target:
            mu, sigma = self._complete(arena, rng)
            observed = arena.observed
            bound = np.where(observed, arena.scores, mu + self.eta * sigma).mean(axis=1)
            bound[observed.all(axis=1)] = -np.inf
            row = int(np.argmax(bound))
            if bound[row] == -np.inf:
                break
            free = np.flatnonzero(~observed[row])
            take = min(self.cells_per_step, len(free), target - arena.evaluations)
            chosen = free[np.argsort(-sigma[row, free], kind="stable")[:take]]
            await arena.evaluate({row: [int(q) for q in chosen]})
        mu, _ = self._complete(arena, rng)
        completed = np.where(arena.observed, arena.scores, mu).mean(axis=1)
        return arena.best(np.flatnonzero(completed >= completed.max() - 1e-9).tolist())

    async def _warm_up(self, arena: Arena, cells: int) -> None:
        """At least two random cells per combination, then random cells up to ``cells``."""
        k_all, total = arena.n_combos, arena.n_datapoints
        first = {k: arena.rng.sample(range(total), min(2, total)) for k in range(k_all)}
        await arena.evaluate(first)
        free = [(k, q) for k in range(k_all) for q in range(total) if not arena.observed[k, q]]
        more = max(0, cells - arena.evaluations)
        batch: dict[int, list[int]] = {}
        for k, q in arena.rng.sample(free, min(more, len(free))):
            batch.setdefault(k, []).append(q)
        if batch:
            await arena.evaluate(batch)

    def _complete(self, arena: Arena, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Ensemble mean and spread of every cell's completed score."""
        observed = arena.observed
        x = np.where(observed, arena.scores, 0.0)
        k_all, total = x.shape
        e, r, lam = self.ensemble_size, self.rank, self.regularizer
        keep = observed[None] & (rng.uniform(size=(e, k_all, total)) >= self.drop_probability)
        m = keep.astype(float)
        y = x[None] * m
        if self._factors is None:
            scale = math.sqrt(max(float(x[observed].mean()), 1e-3) / r) if observed.any() else 0.1
            u = scale * (1 + rng.normal(0, 0.1, (e, k_all, r)))
            v = scale * (1 + rng.normal(0, 0.1, (e, total, r)))
            sweeps = self.iterations
        else:
            u, v = self._factors
            sweeps = self.refit_iterations
        eye = lam * np.eye(r)
        for _ in range(sweeps):
            u = _ridge(m, y, v, eye)
            v = _ridge(m.transpose(0, 2, 1), y.transpose(0, 2, 1), u, eye)
        self._factors = (u, v)
        pred = np.einsum("ekr,eqr->ekq", u, v)
        pred = np.clip(pred, 0.0, 1.0)
        return pred.mean(axis=0), pred.std(axis=0)


def _ridge(mask: np.ndarray, y: np.ndarray, other: np.ndarray, eye: np.ndarray) -> np.ndarray:
    """Row factors solving ``min sum_q mask (y - u . other_q)^2 + lam |u|^2`` for every member."""
    e, q, r = other.shape
    outer = (other[:, :, :, None] * other[:, :, None, :]).reshape(e, q, r * r)
    gram = np.matmul(mask, outer).reshape(e, mask.shape[1], r, r) + eye
    rhs = np.matmul(y, other)
    if r == 1:
        single: np.ndarray = rhs / gram[..., 0]
        return single
    out: np.ndarray = np.linalg.solve(gram, rhs[..., None])[..., 0]
    return out
