"""Scratch: per arm (by accuracy rank), how much of the data each selector runs, and the cost."""

import asyncio
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
from phi_core.select._algorithms import ArmElimination, run_algorithm
from phi_core.select._arena import Arena
from phi_core.select._race import RegretRace
from selection_replay import Matrices, ReplayEvaluator
from selection_worlds import make_world


def main():
    kind = sys.argv[1]
    params = dict(eval(sys.argv[2])) if len(sys.argv) > 2 else {}
    worlds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    seeds = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    out = {}
    for label, make in (("ae", ArmElimination), ("rr", lambda: RegretRace(**params))):
        frac = []
        share = []
        saved = []
        batches, rounds = [], []
        found = 0
        for ws in range(worlds):
            m = Matrices.from_world(make_world(kind, seed=ws))
            n_combos, n_q = m.shape
            names = [m.space.name(k) for k in range(n_combos)]
            acc = m.accuracy[m.rows].sum(axis=1)
            cost = m.cost[m.rows]
            order = np.lexsort((cost.sum(axis=1), -acc))
            grid = float(m.cost.sum())
            best = m.best()
            for seed in range(seeds):
                arena = Arena(n_combos, n_q, ReplayEvaluator(m), seed=seed, names=names)
                tally = [0, 0]
                orig = arena.evaluate

                async def ev(batch, _o=orig, _a=arena, _t=tally):
                    before = int(_a.observed.sum())
                    await _o(batch)
                    calls = int(_a.observed.sum()) - before
                    if calls:
                        _t[0] += 1
                        _t[1] += -(-calls // 16)

                arena.evaluate = ev
                pick = asyncio.run(run_algorithm(make(), arena, m.space))
                found += pick == best
                counts = arena.observed.sum(axis=1)[order] / n_q
                frac.append(counts)
                share.append((arena.observed * cost).sum(axis=1)[order] / grid)
                batches.append(tally[0])
                rounds.append(tally[1] / -(-n_combos * n_q // 16))
                saved.append(1 - float((arena.observed * cost).sum()) / grid)
        out[label] = (
            np.mean(frac, 0),
            np.mean(share, 0),
            np.mean(saved),
            found,
            np.mean(batches),
            np.mean(rounds),
        )
    for label, (f, s, sv, fd, b, r) in out.items():
        print(
            label,
            f"saved {100 * sv:.1f} found {fd} batches {b:.1f} time at 16 {100 * r:.1f} % of brute force",
        )
        print("  frac ", " ".join(f"{v:5.2f}" for v in f[:12]))
        print("  cost%", " ".join(f"{100 * v:5.1f}" for v in s[:12]))


main()
