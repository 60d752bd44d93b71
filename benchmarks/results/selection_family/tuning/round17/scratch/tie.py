"""Scratch: how often the race keeps the cheaper exact twin of the tie-rule unit test (40 seeds),
with the default's looks and with looks every 3 %."""

import asyncio
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[6]))  # the checkout (tests.select)
from tests.select.select_worlds import bernoulli_world, select

from phi_core.select import SearchSpace

space = SearchSpace({"solver": ["dear", "cheaper", "w1", "w2", "w3"]})
scores = bernoulli_world([0.97, 0.97, 0.77, 0.72, 0.67], 200, seed=11)
costs = np.array([[0.012] * 200, [0.01] * 200] + [[0.001] * 200] * 3)
for params in ({"growth": 1.2, "eta": 1e-4}, {"growth": 1.03, "eta": 6.5e-5}):
    picks = [
        space.name(
            asyncio.run(select("regret_race", space, scores, seed=s, costs=costs, **params))[0]
        )
        for s in range(40)
    ]
    print(params, sum(p == "solver=cheaper" for p in picks), "of 40 keep the cheaper twin")
