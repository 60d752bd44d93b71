"""Scratch (sixteenth session): where a RegretRace variant spends its money on a world type.

Usage: .venv/bin/python benchmarks/results/selection_family/tuning/round16/scratch/phases.py \
    mathqa "{'complete_look': 40, 'complete_arms': 1, 'probe': 0}" 8 6
(world type, RegretRace parameters as a Python dict, tuning world seeds, selector seeds). It
wraps private methods of RegretRace, so it follows the code it was written against.
"""

import asyncio
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
from phi_core.select._algorithms import run_algorithm
from phi_core.select._arena import Arena
from phi_core.select._race import RegretRace
from selection_replay import Matrices, ReplayEvaluator
from selection_worlds import make_world


def main():
    kind = sys.argv[1]
    params = dict(eval(sys.argv[2])) if len(sys.argv) > 2 else {}
    worlds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    seeds = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    phases: dict[str, float] = {}
    comps: dict[str, float] = {}
    saved, found = [], []
    for ws in range(worlds):
        m = Matrices.from_world(make_world(kind, seed=ws))
        n_combos, n_q = m.shape
        names = [m.space.name(k) for k in range(n_combos)]
        grid = float(m.cost.sum())
        for seed in range(seeds):
            arena = Arena(n_combos, n_q, ReplayEvaluator(m), seed=seed, names=names)
            algo = RegretRace(**params)
            state = {"phase": "prefix<certificate"}
            orig_eval = arena.evaluate
            orig_certain = algo._certain_look

            async def ev(batch, _orig=orig_eval, _a=arena, _s=state, _grid=grid):
                before = _a.cost_spent
                await _orig(batch)
                phases[_s["phase"]] = (
                    phases.get(_s["phase"], 0.0) + (_a.cost_spent - before) / _grid
                )

            async def certain(a, active, n, _orig=orig_certain, _s=state):
                _s["phase"] = "certificate look"
                out = await _orig(a, active, n)
                _s["phase"] = (
                    "prefix after" if a.observed.all(axis=1).any() else "prefix<certificate"
                )
                return out

            orig_probe = algo._probe_batch

            def probe(a, rows, best, _orig=orig_probe, _s=state):
                _s["phase"] = "probes"
                return _orig(a, rows, best)

            orig_complete = algo._complete

            async def complete(a, k, best, _orig=orig_complete, _s=state, _m=m):
                before = a.cost_spent
                await _orig(a, k, best)
                full = bool(a.observed[k].all())
                tag = ("first " if best == float("-inf") else "later ") + (
                    "full" if full else "stopped"
                )
                if full and k == _m.best():
                    tag += " best"
                comps[tag] = comps.get(tag, 0) + 1
                comps[tag + " $"] = comps.get(tag + " $", 0) + (a.cost_spent - before) / float(
                    _m.cost.sum()
                )

            algo._complete = complete
            arena.evaluate = ev
            algo._certain_look = certain
            algo._probe_batch = probe
            pick = asyncio.run(run_algorithm(algo, arena, m.space))
            saved.append(100 * (1 - arena.cost_spent / grid))
            found.append(pick == m.best())
    runs = worlds * seeds
    print(kind, params, f"found {100 * np.mean(found):.1f} saved {np.mean(saved):.1f}")
    for k, v in sorted(comps.items()):
        print(
            f"  completion {k:<22} {v / runs:6.3f} per run"
            + (" (share of grid)" if "$" in k else "")
        )
    for k, v in sorted(phases.items()):
        print(f"  {k:<22} {100 * v / runs:5.1f} % of the grid")


main()
