"""Scratch: at which look is brute force's pick dropped (hotpotqa-like worlds)?"""

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
from phi_core.select._algorithms import run_algorithm
from phi_core.select._arena import Arena
from phi_core.select._race import RegretRace
from selection_replay import Matrices, ReplayEvaluator
from selection_worlds import make_world

kind = sys.argv[1]
worlds = int(sys.argv[2])
seeds = int(sys.argv[3])
for label, params in (
    ("default", dict(growth=1.2, eta=1e-4)),
    ("g103_e85", dict(growth=1.03, eta=8.5e-5)),
):
    where = []
    misses = 0
    for ws in range(worlds):
        m = Matrices.from_world(make_world(kind, seed=ws))
        n_combos, n_q = m.shape
        names = [m.space.name(k) for k in range(n_combos)]
        best = m.best()
        for seed in range(seeds):
            arena = Arena(n_combos, n_q, ReplayEvaluator(m), seed=seed, names=names)
            race = RegretRace(**params)
            pick = asyncio.run(run_algorithm(race, arena, m.space))
            if pick != best:
                misses += 1
                where.append(arena.count(best))
    print(label, "misses", misses, "best seen when dropped", sorted(where))
