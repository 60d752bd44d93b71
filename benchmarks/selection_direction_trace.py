"""Trace a ``RegretRace`` direction-prior candidate (point 12) against the default on the world
family: the fitted prior per look, where the evaluations go, and every run in which the
candidate loses brute force's pick that the default keeps — when, on what record, under which
prior. Tuning worlds only (world seeds 0..K-1), the same selector seeds as
``selection_family.py``.

Usage::

    .venv/bin/python benchmarks/selection_direction_trace.py --worlds mathqa,hotpotqa \\
        --candidate direction_prior=10 --candidate direction_loss=1
"""

from __future__ import annotations

import argparse
import asyncio
from collections import defaultdict
from typing import Any

import numpy as np

from phi_core.select import Arena, RegretRace, run_algorithm
from phi_core.select._race import _ends_level
from selection_replay import Matrices, ReplayEvaluator
from selection_worlds import make_world

BUCKETS = ((0, 2), (3, 7), (8, 20), (21, 10**6))


class TracingRace(RegretRace):
    """A ``RegretRace`` that records every elimination: look, arm, record against the leader,
    the fitted direction prior and the chance of ending level under it and under Jeffreys'."""

    def __init__(self, full: np.ndarray, **params: Any) -> None:
        super().__init__(**params)
        self.full = full
        """Every combination's full-data 0/1 scores (to measure the true share)."""
        self.drops: list[dict[str, Any]] = []
        self.shares: dict[int, tuple[float, float]] = {}
        """Per look: the survivors' pooled share of disagreements won against the leader, on
        the prefix (in sample) and on the full data (the truth the prior estimates)."""

    def _judge(self, arena: Arena, active: list[int], n: int) -> tuple[np.ndarray, np.ndarray, int]:
        loss, tolerance, leader = super()._judge(arena, active, n)
        drop = loss < tolerance
        drop[leader] = False
        prior = self.direction_priors[-1] if self.direction_priors else (n, 0.5, 0.5)
        if prior[0] != n:
            prior = (n, 0.5, 0.5)
        x = arena.scores[np.asarray(active, dtype=np.int64), :n]
        wins = ((x == 1.0) & (x[leader] == 0.0)).sum(axis=1).astype(float)
        losses = ((x == 0.0) & (x[leader] == 1.0)).sum(axis=1).astype(float)
        y = self.full[np.asarray(active, dtype=np.int64)]
        true_wins = ((y == 1.0) & (y[leader] == 0.0)).sum()
        true_splits = (y != y[leader]).sum()
        self.shares[n] = (
            float(wins.sum()) / max(float((wins + losses).sum()), 1.0),
            float(true_wins) / max(float(true_splits), 1.0),
        )
        rows = np.flatnonzero(drop)
        total = arena.n_datapoints
        plain = _ends_level(wins[rows], losses[rows], n, total)
        fitted = _ends_level(wins[rows], losses[rows], n, total, (prior[1], prior[2]))
        for r, pj, pe in zip(rows, plain, fitted, strict=True):
            self.drops.append(
                {
                    "n": n,
                    "arm": active[r],
                    "leader": active[leader],
                    "record": (int(wins[r]), int(losses[r])),
                    "prior": (round(prior[1], 2), round(prior[2], 2)),
                    "p_level_jeffreys": float(pj),
                    "p_level_prior": float(pe),
                    "loss": float(loss[r]),
                    "tolerance": float(tolerance[r]),
                }
            )
        return loss, tolerance, leader


class OracleTracingRace(TracingRace):
    """Diagnosis only, not a selector: the direction prior at each look is Jeffreys' plus
    ``direction_prior`` pseudo-disagreements at the survivors' *true* (full-data) share of
    disagreements won against the leader — what the best possible estimate of that share
    would give."""

    def _direction(self, x: np.ndarray, cost: np.ndarray, n: int) -> tuple[float, float]:
        share = self._oracle_share
        a = 0.5 + self.direction_prior * share
        b = 0.5 + self.direction_prior * (1 - share)
        self.direction_priors.append((n, a, b))
        return a, b

    def _judge(self, arena: Arena, active: list[int], n: int) -> tuple[np.ndarray, np.ndarray, int]:
        y = self.full[np.asarray(active, dtype=np.int64)]
        leader = active.index(self._leader(arena, active))
        splits = float((y != y[leader]).sum())
        self._oracle_share = float(((y == 1.0) & (y[leader] == 0.0)).sum()) / max(splits, 1.0)
        return super()._judge(arena, active, n)


def run(
    m: Matrices, seed: int, params: dict[str, Any], oracle: bool = False
) -> tuple[int, Arena, TracingRace]:
    names = [m.space.name(k) for k in range(m.shape[0])]
    arena = Arena(m.shape[0], m.shape[1], ReplayEvaluator(m), seed=seed, names=names)
    kind = OracleTracingRace if oracle and params else TracingRace
    race = kind(m.accuracy[np.asarray(m.rows)], **params)
    pick = asyncio.run(run_algorithm(race, arena, m.space))
    return pick, arena, race


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worlds", default="mathqa,near_tie_expensive,correlated_difficulty")
    parser.add_argument("--world-seeds", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--candidate", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--oracle", action="store_true", help="diagnosis: the prior at the true full-data share"
    )
    args = parser.parse_args(argv)
    params: dict[str, Any] = {}
    for item in args.candidate:
        key, _, value = item.partition("=")
        try:
            params[key] = float(value)
        except ValueError:
            params[key] = value
    print(f"candidate: {params}")
    for kind in args.worlds.split(","):
        looks: dict[int, list[tuple[float, ...]]] = defaultdict(list)
        evals = {"default": np.zeros(len(BUCKETS)), "candidate": np.zeros(len(BUCKETS))}
        found = {"default": 0, "candidate": 0}
        saved = {"default": 0.0, "candidate": 0.0}
        misses: list[str] = []
        runs = 0
        for ws in range(args.world_seeds):
            m = Matrices.from_world(make_world(kind, seed=ws))
            acc = m.accuracy.sum(axis=1)
            best = m.best()
            behind = np.array([acc[m.rows[best]] - acc[m.rows[k]] for k in range(m.shape[0])])
            for seed in range(args.seeds):
                runs += 1
                picks = {}
                for label, p in (("default", {}), ("candidate", params)):
                    pick, arena, race = run(m, seed, p, args.oracle)
                    picks[label] = (pick, race)
                    found[label] += pick == best
                    saved[label] += 100 * (1 - arena.cost_spent / float(m.cost.sum()))
                    counts = np.array([arena.count(k) for k in range(m.shape[0])])
                    for b, (lo, hi) in enumerate(BUCKETS):
                        sel = (behind >= lo - 1e-9) & (behind <= hi + 1e-9)
                        evals[label][b] += counts[sel].sum()
                traced = picks["candidate"][1]
                for n, a, b_ in traced.direction_priors:
                    looks[n].append((a, b_, *traced.shares[n]))
                if picks["default"][0] == best and picks["candidate"][0] != best:
                    event = [d for d in picks["candidate"][1].drops if d["arm"] == best]
                    where = event[0] if event else "not dropped (tie broken otherwise)"
                    if event:
                        e = event[0]
                        where = (
                            f"n={e['n']} record {e['record']} vs leader "
                            f"({behind[e['leader']]:+.0f} q at the end), prior {e['prior']}, "
                            f"P(level) Jeffreys {e['p_level_jeffreys']:.3f} / prior "
                            f"{e['p_level_prior']:.3f}, loss {e['loss']:.1e} < tol "
                            f"{e['tolerance']:.1e}"
                        )
                    misses.append(
                        f"  ws {ws} seed {seed}: pick {behind[picks['candidate'][0]]:.0f} q behind; "
                        f"best dropped at {where}"
                    )
        print(f"\n## {kind} ({runs} runs)")
        print(
            f"found: default {found['default']}, candidate {found['candidate']}; saved %: "
            f"default {saved['default'] / runs:.1f}, candidate {saved['candidate'] / runs:.1f}"
        )
        print("evaluations per run by full-data distance to the best (0-2, 3-7, 8-20, 21+ q):")
        for label, e in evals.items():
            print(f"  {label}: " + ", ".join(f"{v / runs:.0f}" for v in e))
        print(
            "per look, means over the runs (n: prior a/(a+b), prior strength a+b; the survivors' "
            "share of disagreements won against the leader in sample / on the full data; looks):"
        )
        for n in sorted(looks):
            ab = np.array(looks[n])
            if n in (6, 10, 21, 44, 64, 92, 133, 159, 191):
                prior = ab[:, 0] / (ab[:, 0] + ab[:, 1])
                print(
                    f"  n={n}: {prior.mean():.3f}, {(ab[:, 0] + ab[:, 1]).mean():.2f}; "
                    f"{ab[:, 2].mean():.3f} / {ab[:, 3].mean():.3f} ({len(ab)})"
                )
        print("runs the candidate misses and the default finds:")
        print("\n".join(misses) or "  none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
