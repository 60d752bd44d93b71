"""Scratch (sixteenth session): what the certificate costs with perfect foresight of the best,
by the order its questions are asked in (random; three cheap scouts' loss; adaptive), on tuning
world seeds 0-7 of four near-perfect types.

Usage: .venv/bin/python benchmarks/results/selection_family/tuning/round16/scratch/foresight.py
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
from selection_replay import Matrices
from selection_worlds import make_world


def rule_out_cost(x, c, misses_best, order):
    """cells evaluated (cost) until misses > misses_best, in the given question order."""
    miss = 1 - x[order]
    cum = np.cumsum(miss)
    hit = np.flatnonzero(cum > misses_best + 1e-9)
    if hit.size == 0:
        return c.sum(), False
    return c[order][: hit[0] + 1].sum(), True


def analyse(kind, seed, rng):
    m = Matrices.from_world(make_world(kind, seed=seed))
    acc = m.accuracy[m.rows]
    cost = m.cost[m.rows]
    k, n = acc.shape
    b = m.best()
    mb = n - acc[b].sum()
    grid = cost.sum()
    others = [i for i in range(k) if i != b]
    out = {}
    # R: random order per world (shared)
    order = rng.permutation(n)
    spent = cost[b].sum() + sum(rule_out_cost(acc[i], cost[i], mb, order)[0] for i in others)
    out["random"] = 100 * (1 - spent / grid)
    # S: 3 cheapest arms run fully as scouts, order by their mean loss (ties random)
    mean_cost = cost.mean(axis=1)
    scouts = [i for i in np.argsort(mean_cost) if i != b][:3]
    loss = 1 - acc[scouts].mean(axis=0)
    order_s = np.lexsort((rng.random(n), -loss))
    spent = cost[b].sum() + cost[scouts].sum()
    spent += sum(rule_out_cost(acc[i], cost[i], mb, order_s)[0] for i in others if i not in scouts)
    out["scouts3"] = 100 * (1 - spent / grid)
    # A: adaptive: arms processed cheapest first; each probes the question with the highest
    # smoothed miss rate among cells seen so far (Beta(a, b) prior), unseen by it
    seen_miss = np.zeros(n)
    seen_n = np.zeros(n)
    # the best's own cells
    seen_miss += 1 - acc[b]
    seen_n += 1
    spent = cost[b].sum()
    base = 1 - acc.mean()  # unknown in practice; use a flat small prior instead
    prior_a, prior_b = 0.05, 1.0
    for i in sorted(others, key=lambda i: mean_cost[i]):
        done = np.zeros(n, bool)
        misses = 0
        tie = rng.random(n)
        while misses <= mb and not done.all():
            rate = (seen_miss + prior_a) / (seen_n + prior_a + prior_b)
            rate[done] = -1
            q = int(np.lexsort((tie, -rate))[0])
            done[q] = True
            spent += cost[i, q]
            miss = 1 - acc[i, q]
            misses += miss
            seen_miss[q] += miss
            seen_n[q] += 1
    out["adaptive"] = 100 * (1 - spent / grid)
    out["mb"] = mb
    out["base"] = base
    return out


def main():
    rng = np.random.default_rng(1)
    for kind in ("mathqa", "near_tie_expensive", "near_perfect_95", "near_perfect_98"):
        rows = [analyse(kind, s, rng) for s in range(8)]
        keys = ("random", "scouts3", "adaptive")
        print(
            kind,
            {kk: round(float(np.mean([r[kk] for r in rows])), 1) for kk in keys},
            "best misses",
            [r["mb"] for r in rows],
        )


main()
