"""Synthetic selection worlds: known score matrices replayed through the arena."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from phi_core.select import Arena, Evaluation, SearchSpace, make_algorithm, run_algorithm


class MatrixEvaluator:
    """Answers cells from fixed score/cost matrices; raises for cells listed in ``crash``."""

    def __init__(self, scores: np.ndarray, costs: np.ndarray | None = None) -> None:
        self.scores = scores
        self.costs = costs if costs is not None else np.full(scores.shape, 0.001)
        self.requested: list[tuple[int, int]] = []

    async def evaluate(self, batch: Mapping[int, Sequence[int]]) -> dict[int, list[Evaluation]]:
        out: dict[int, list[Evaluation]] = {}
        for k, items in batch.items():
            self.requested.extend((k, i) for i in items)
            out[k] = [
                Evaluation(score=float(self.scores[k, i]), cost_usd=float(self.costs[k, i]))
                for i in items
            ]
        return out


def bernoulli_world(
    probabilities: Sequence[float], n: int, seed: int = 0, correlation: float = 0.5
) -> np.ndarray:
    """0/1 scores whose full-data means are exactly ``probabilities`` (shared question difficulty)."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(size=n)
    rows = []
    for p in probabilities:
        latent = correlation * difficulty + (1 - correlation**2) ** 0.5 * rng.normal(size=n)
        hits = round(p * n)
        row = np.zeros(n)
        row[np.argsort(latent)[:hits]] = 1.0
        rows.append(row)
    return np.array(rows)


async def select(
    algorithm: str,
    space: SearchSpace,
    scores: np.ndarray,
    *,
    seed: int = 0,
    costs: np.ndarray | None = None,
    **params: object,
) -> tuple[int, Arena]:
    evaluator = MatrixEvaluator(scores, costs)
    names = [space.name(k) for k in range(len(space))]
    arena = Arena(len(space), scores.shape[1], evaluator, seed=seed, names=names)
    pick = await run_algorithm(make_algorithm(algorithm, **params), arena, space)
    return pick, arena
