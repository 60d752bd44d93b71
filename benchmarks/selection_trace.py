"""Where a selector loses brute force's pick: the look at which the pick left its pool.

For every world type of ``selection_worlds.py`` and selector of ``selection_replay.PHI_SELECTORS``
this runs the same worlds and selector seeds as ``selection_family.py`` (``--split``,
``--world-seeds``, ``--seeds``) and, for each run that misses brute force's pick, records how
many questions the selector had looked at when the pick left its ``pool`` (the arms it still
considers; checked before each evaluation batch and at the end). "end" means the pick was still
in the pool at the end and lost the final comparison.

Usage::

    .venv/bin/python benchmarks/selection_trace.py --split tuning --world-seeds 4 --seeds 12 \
        --selectors arm_elimination,regret_race --worlds mathqa,near_tie_expensive
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from phi_core.select import Arena, make_algorithm, run_algorithm
from selection_family import SPLITS
from selection_replay import PHI_SELECTORS, Matrices, ReplayEvaluator
from selection_worlds import FAMILY, make_world


def trace_run(m: Matrices, algo: str, params: dict[str, Any], seed: int) -> tuple[bool, str]:
    """(found, where): ``where`` is the number of questions seen when the pick left the pool,
    ``"end"`` if it was kept to the end and still not picked, ``""`` if it was picked."""
    n_combos, n_questions = m.shape
    names = [m.space.name(k) for k in range(n_combos)]
    arena = Arena(n_combos, n_questions, ReplayEvaluator(m), seed=seed, names=names)
    algorithm = make_algorithm(algo, **params)
    best = m.best()
    left: list[int] = []

    def check() -> None:
        pool = algorithm.pool
        if not left and pool is not None and best not in pool:
            left.append(int(arena.observed.sum(axis=1).max()))

    evaluate, evaluate_prefix = arena.evaluate, arena.evaluate_prefix

    async def watched(batch: Mapping[int, Iterable[int]]) -> None:
        check()
        await evaluate(batch)

    async def watched_prefix(combos: Iterable[int], n: int) -> None:
        check()
        await evaluate_prefix(combos, n)

    arena.evaluate = watched  # type: ignore[method-assign]
    arena.evaluate_prefix = watched_prefix  # type: ignore[method-assign]
    pick = asyncio.run(run_algorithm(algorithm, arena, m.space))
    check()
    if pick == best:
        return True, ""
    return False, str(left[0]) if left else "end"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=sorted(SPLITS), default="tuning")
    parser.add_argument("--world-seeds", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--selectors", default="arm_elimination,regret_race")
    parser.add_argument("--worlds", default=",".join(FAMILY), help="comma-separated world types")
    args = parser.parse_args(argv)
    selectors = args.selectors.split(",")
    kinds = args.worlds.split(",")
    for name, wrong in (
        ("selectors", set(selectors) - set(PHI_SELECTORS)),
        ("worlds", set(kinds) - set(FAMILY)),
    ):
        if wrong:
            parser.error(f"unknown {name} {sorted(wrong)}")
    base = SPLITS[args.split]
    print(
        f"split {args.split}: world seeds {base}-{base + args.world_seeds - 1}, "
        f"{args.seeds} selector seeds; misses by the look at which the pick left the pool"
    )
    for kind in kinds:
        worlds = [
            Matrices.from_world(make_world(kind, seed=base + w)) for w in range(args.world_seeds)
        ]
        for label in selectors:
            algo, params = PHI_SELECTORS[label]
            where: Counter[str] = Counter()
            runs = 0
            for m in worlds:
                for seed in range(args.seeds):
                    found, at = trace_run(m, algo, params, seed)
                    runs += 1
                    if not found:
                        where[at] += 1
            order = sorted(where, key=lambda at: (at == "end", int(at) if at != "end" else 0))
            looks = ", ".join(f"{at if at == 'end' else 'n=' + at}: {where[at]}" for at in order)
            print(f"{kind:<22} {label:<18} missed {sum(where.values()):>2}/{runs}  {looks}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
