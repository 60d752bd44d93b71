"""Synthetic selection worlds shaped like AgentOpt's HotpotQA, MathQA, GPQA and BFCL benchmarks.

``reference/study-agentopt.md`` §4.3 simulates AgentOpt's published brute-force tables with 0/1
cells drawn through a Gaussian copula with a shared per-question difficulty factor. This module
builds such worlds at the shape of AgentOpt's released matrices (10 planners x 10 solvers = 100
configurations x 200 questions), without using any recorded per-question data, so that a
selector can be checked on worlds it was not tuned on:

**Models and prices.** Ten models with AWS Bedrock on-demand prices ($/M input, $/M output
tokens; the ten of AgentOpt's 10 x 10 grid). Each model has a verbosity factor (reasoning models
write more) drawn per world.

**Cost.** A cell's cost is additive in the two steps: ``planner tokens x planner price + solver
tokens x solver price``, with log-normal per-question token counts (a shared per-question length
factor plus per-cell noise). The per-configuration mean costs are then stretched on the log scale
so that the most expensive configuration costs ``cost_span`` times the cheapest (MathQA ~24x,
HotpotQA ~16x, the blog's "best-vs-worst cost gap").

**Accuracy.** A configuration's latent quality is additive in its planner's and solver's skill
(skill correlates with price with weight ``price_skill``; the rest is noise), plus an interaction
term, plus — HotpotQA's "capability as liability" — a penalty when one of the two most expensive
models plans. Qualities are mapped by rank onto target accuracies drawn from the benchmark's
spread: for ``mathqa`` the error rate is log-normal around 4.5 %, clipped to 1-32 % (most configurations at
93-99 %, a tail down to ~70 %, a handful within a point of the best, as in the published 98.84 vs
98.82); for ``hotpotqa`` accuracies follow
the percentiles of the published HotpotQA table (26-75 %).

**Questions.** Cell ``(k, q)`` is 1 when ``latent_kq < Phi^-1(p_k)`` with
``latent_kq = sqrt(rho) D_q + sqrt(1 - rho) (sqrt(w) S_{solver(k),q} + sqrt(1 - w) E_kq)``: ``D`` is
the shared question difficulty (``rho`` = 0.3 or 0.6 in §4.3), ``S`` a per-solver component
(configurations with the same solver fail on the same questions, weight ``w``), ``E`` independent
noise. Each cell is Bernoulli(``p_k``) marginally, so the realised full-data accuracies scatter
around the targets by sampling noise, as real benchmarks do; the ground truth is always the
realised matrix.

**The family** (:data:`FAMILY`, issue 20 point 4; ``selection_family.py`` runs every selector on
it). Besides the two shapes above, each a variation calibrated to a published figure of
``reference/study-agentopt.md`` §4.1 or to a hard case of the issue:

- ``gpqa``: GPQA's 9 models x 198 questions, one step, the dearest model (Opus, 74.75 %) best,
  the others at 45-72 %, a 13x cost gap;
- ``bfcl``: BFCL's 9 x 200 with a three-way exact tie at 70 %, a 32x cost gap;
- ``near_tie_expensive``: MathQA-like accuracies (98.84 vs 98.82 at the top), quality following
  price, and the four best configurations forced within two questions of each other (the
  issue's held-out matrix: "the top configurations lie within one question of each other and
  the most expensive are the best");
- ``many_bad_few_good``: 95 configurations at 15-50 %, five at 71-78 %;
- ``additive`` / ``interacting``: no planner x solver interaction, or a strong one plus
  HotpotQA's "capability as liability" (the best is an interaction outlier);
- ``heavy_tail_cost``: per-question token counts log-normal with sigma 1.1 (long reasoning
  traces) and BFCL's 32x cost gap;
- ``correlated_difficulty``: shared question difficulty rho = 0.8, solver share 0.6;
- ``failure_prone``: a third of the configurations (half of them among the ten best) crash or
  time out on 5-40 % of the questions (score 0, 30 % of the cost paid, 60 s).

Three stress types lie outside the family (:data:`WORLDS` only, never used to choose a
selector): ``near_perfect_95``, ``near_perfect_98`` and ``near_perfect_99``, MathQA's shape with
more errors, so the best configuration scores about 95, 98 or 99 % — between the noisy types and
the near-perfect ones, where a rule that bets on a perfect prefix (arm elimination's first look)
is most often wrong. A fourth, ``near_tie_noisy``, is ``near_tie_expensive`` at HotpotQA's
accuracies (best ~75 %): the issue's held-out shape where every configuration misses often.

Ties (``ties``) are forced on the realised cells by flipping the cells nearest to their
configuration's cut, so the shared difficulty structure is kept. The family's additions draw
from their own random stream: ``mathqa`` and ``hotpotqa`` worlds are unchanged.

Usage (writes the same CSV files as ``benchmarks/data/agentopt_hotpotqa``)::

    .venv/bin/python benchmarks/selection_worlds.py mathqa --rho 0.3 --seed 0 --out DIR
    .venv/bin/python benchmarks/selection_replay.py --data DIR --no-agentopt

or directly ``selection_replay.py --world mathqa --rho 0.3 --world-seed 0``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = ["FAMILY", "WORLDS", "World", "WorldParams", "describe", "make_world", "write_world"]

# $/M tokens (input, output), AWS Bedrock on-demand (the models of AgentOpt's 10 x 10 grid)
PRICES: dict[str, tuple[float, float]] = {
    "Claude Haiku 4.5": (1.0, 5.0),
    "Claude Opus 4.6": (5.0, 25.0),
    "Kimi K2.5": (0.6, 3.0),
    "Ministral 3 8B": (0.15, 0.15),
    "Qwen3 32B": (0.15, 0.6),
    "Qwen3 Next 80B A3B": (0.15, 1.2),
    "gpt-oss-120b": (0.15, 0.6),
    "gpt-oss-20b": (0.07, 0.3),
    "DeepSeek R1": (1.35, 5.4),
    "GPT-5.6 Luna": (0.22, 1.32),
}
# the nine single-step models of AgentOpt's GPQA and BFCL tables (study-agentopt.md §4.1)
NINE = (
    "Claude Opus 4.6",
    "Claude Haiku 4.5",
    "Claude 3 Haiku",
    "gpt-oss-120b",
    "gpt-oss-20b",
    "Kimi K2.5",
    "Qwen3 Next 80B A3B",
    "Qwen3 32B",
    "Ministral 3 8B",
)
GRID = tuple(PRICES)  # the ten models of the 10 x 10 grid (before the single-step additions)
REASONING = {"DeepSeek R1", "Kimi K2.5", "gpt-oss-120b", "gpt-oss-20b"}
PRICES["Claude 3 Haiku"] = (0.25, 1.25)

# percentiles 0, 10, 25, 50, 75, 90, 100 of the HotpotQA table's configuration accuracies
HOTPOTQA_PERCENTILES = (0.265, 0.320, 0.432, 0.540, 0.648, 0.696, 0.747)


@dataclass(frozen=True)
class WorldParams:
    """Parameters of one world family (see the module docstring)."""

    kind: str
    steps: tuple[str, ...] = ("planner", "solver")
    n_questions: int = 200
    rho: float = 0.3
    solver_share: float = 0.3
    cost_span: float = 24.0
    price_skill: float = 0.6
    interaction: float = 0.35
    liability: float = 0.0
    """Quality penalty (in standard deviations) when one of the two strongest models plans."""
    error_median: float = 0.045
    error_sigma: float = 0.7
    error_min: float = 0.01
    error_max: float = 0.32
    extra: dict[str, float] = field(default_factory=dict)
    stream: int = 0
    """The family's random stream (0 and 1: the historical ``hotpotqa`` and ``mathqa``)."""
    target: str = ""
    """Accuracy spread: ``mathqa``, ``hotpotqa``, ``gpqa``, ``bfcl`` or ``few_good`` (default: kind)."""
    ties: tuple[int, ...] = ()
    """Realised ties at the top: the configurations with the highest targets get exactly
    ``best - d`` correct answers for each ``d`` (``(0, 1, 1, 2)``: all within two questions)."""
    cost_sigma: float = 0.25
    """Log-normal sigma of each step's per-question token count (heavy tails above ~0.8)."""
    fail_share: float = 0.0
    """Share of configurations that crash or time out on some questions (score 0, 30 % of the
    cost paid); half of them are drawn among the ten best."""
    fail_max: float = 0.4
    models: tuple[str, ...] = ()
    """Single-step worlds: the candidate models (one configuration each); empty: the 10 x 10 grid."""


def _near_perfect(
    error_median: float, error_min: float, error_max: float, stream: int
) -> WorldParams:
    """A stress type: MathQA's shape with more errors (the best misses ``error_min`` or so)."""
    return WorldParams(
        kind="mathqa",
        steps=("answer", "critic"),
        error_median=error_median,
        error_min=error_min,
        error_max=error_max,
        stream=stream,
    )


WORLDS: dict[str, WorldParams] = {
    "mathqa": WorldParams(kind="mathqa", steps=("answer", "critic"), cost_span=24.0, stream=1),
    "hotpotqa": WorldParams(
        kind="hotpotqa", cost_span=16.0, price_skill=0.4, interaction=0.5, liability=3.0, stream=0
    ),
    # ---- the family (issue 20 point 4); calibrations from study-agentopt.md §4.1 and §4.3
    # GPQA 9 x 198: one step, the dearest model (Opus, 74.75 %) best, a 13x cost gap
    "gpqa": WorldParams(
        kind="gpqa",
        steps=("model",),
        models=NINE,
        n_questions=198,
        rho=0.4,
        cost_span=13.0,
        price_skill=0.9,
        stream=2,
    ),
    # BFCL 9 x 200: a three-way exact tie at 70 %, a 32x cost gap
    "bfcl": WorldParams(
        kind="bfcl",
        steps=("model",),
        models=NINE,
        rho=0.4,
        cost_span=32.0,
        price_skill=0.5,
        ties=(0, 0, 0),
        stream=3,
    ),
    # MathQA's 98.84 vs 98.82 and the held-out matrix: the top four within two
    # questions, the dearest configurations the best
    "near_tie_expensive": WorldParams(
        kind="near_tie_expensive",
        target="mathqa",
        steps=("answer", "critic"),
        price_skill=0.95,
        interaction=0.2,
        ties=(0, 1, 1, 2),
        stream=4,
    ),
    # HotpotQA's "capability as liability" taken further: 95 weak configurations, five good ones
    "many_bad_few_good": WorldParams(
        kind="many_bad_few_good", target="few_good", cost_span=16.0, price_skill=0.3, stream=5
    ),
    # accuracy additive in the two steps (no interaction, no liability)
    "additive": WorldParams(
        kind="additive",
        target="hotpotqa",
        cost_span=16.0,
        price_skill=0.4,
        interaction=0.0,
        stream=6,
    ),
    # strong interaction: the best is an outlier of its planner's and solver's main effects
    "interacting": WorldParams(
        kind="interacting",
        target="hotpotqa",
        cost_span=16.0,
        price_skill=0.2,
        interaction=1.5,
        liability=3.0,
        stream=7,
    ),
    # heavy-tailed per-question cost (long reasoning traces) and BFCL's 32x cost gap
    "heavy_tail_cost": WorldParams(
        kind="heavy_tail_cost",
        target="hotpotqa",
        cost_span=32.0,
        price_skill=0.4,
        interaction=0.5,
        cost_sigma=1.1,
        stream=8,
    ),
    # question difficulty shared strongly across configurations (and across one solver's)
    "correlated_difficulty": WorldParams(
        kind="correlated_difficulty",
        target="hotpotqa",
        rho=0.8,
        solver_share=0.6,
        cost_span=16.0,
        price_skill=0.4,
        interaction=0.5,
        stream=9,
    ),
    # a third of the configurations crash or time out on 5-40 % of the questions
    "failure_prone": WorldParams(
        kind="failure_prone",
        target="hotpotqa",
        cost_span=16.0,
        price_skill=0.4,
        interaction=0.5,
        fail_share=0.3,
        stream=10,
    ),
    # ---- stress types outside the family (never used to choose a selector): MathQA's shape with
    # more errors, so the best misses 1-5 % of the questions — between the family's noisy types
    # (best ~75 %) and its near-perfect ones (best ~99.8 %)
    "near_perfect_95": _near_perfect(0.15, 0.07, 0.45, stream=11),
    "near_perfect_98": _near_perfect(0.09, 0.04, 0.40, stream=12),
    "near_perfect_99": _near_perfect(0.06, 0.02, 0.35, stream=13),
    # the held-out shape at HotpotQA's accuracies instead of MathQA's: quality follows
    # price and the four best are forced within two questions (added in the eleventh session)
    "near_tie_noisy": WorldParams(
        kind="near_tie_noisy",
        target="hotpotqa",
        price_skill=0.95,
        interaction=0.2,
        ties=(0, 1, 1, 2),
        stream=14,
    ),
}
FAMILY = (
    "hotpotqa",
    "mathqa",
    "gpqa",
    "bfcl",
    "near_tie_expensive",
    "many_bad_few_good",
    "additive",
    "interacting",
    "heavy_tail_cost",
    "correlated_difficulty",
    "failure_prone",
)
"""The world types the default selector is judged on (by its worst case across them)."""


@dataclass
class World:
    """Configuration names (``"planner=a + solver=b"``) and the accuracy, cost and latency matrices."""

    names: list[str]
    accuracy: np.ndarray
    cost: np.ndarray
    latency: np.ndarray
    targets: np.ndarray
    params: WorldParams
    seed: int
    latent: np.ndarray
    """The copula's latent value of every cell (a cell is correct below its configuration's cut)."""


def _target_accuracies(p: WorldParams, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` accuracies spread like the benchmark's table, sorted from best to worst."""
    target = p.target or p.kind
    if target == "hotpotqa":
        qs = np.sort(rng.uniform(0, 1, n))
        grid = np.array([0.0, 0.10, 0.25, 0.50, 0.75, 0.90, 1.0])
        values = np.interp(qs, grid, np.array(HOTPOTQA_PERCENTILES))
        values += rng.normal(0, 0.004, n)
    elif target == "gpqa":  # Opus 74.75 %, the others spread like the table's selector means
        values = np.r_[0.7475, rng.uniform(0.45, 0.72, n - 1)]
    elif target == "bfcl":  # three at 70 % (made an exact tie by ``ties``), the rest below
        values = np.r_[0.70, 0.70, 0.70, rng.uniform(0.40, 0.66, n - 3)]
    elif target == "few_good":  # five good configurations, 1.5-7 points apart, the rest weak
        values = np.r_[[0.78, 0.765, 0.75, 0.73, 0.71], rng.uniform(0.15, 0.50, n - 5)]
    else:
        err = np.exp(rng.normal(math.log(p.error_median), p.error_sigma, n))
        values = 1.0 - np.clip(err, p.error_min, p.error_max)
    return np.sort(np.clip(values, 0.0, 1.0))[::-1]


def _stretch_costs(cost: np.ndarray, span: float) -> np.ndarray:
    """Rescale the configurations' mean costs on the log scale so the dearest is ``span`` x the
    cheapest (per-question variation kept)."""
    mean_cost = cost.mean(axis=1)
    log_mean = np.log(mean_cost)
    centre = log_mean.mean()
    stretch = math.log(span) / (log_mean.max() - log_mean.min())
    return cost * (np.exp(centre + (log_mean - centre) * stretch) / mean_cost)[:, None]


def _cells(
    p: WorldParams,
    targets: np.ndarray,
    solver_of: np.ndarray,
    n_solvers: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """0/1 cells through the Gaussian copula, and the latent values that drew them."""
    k, n = len(targets), p.n_questions
    difficulty = rng.normal(0, 1, n)
    per_solver = rng.normal(0, 1, (n_solvers, n))
    own = math.sqrt(p.solver_share) * per_solver[solver_of] + math.sqrt(
        1 - p.solver_share
    ) * rng.normal(0, 1, (k, n))
    latent = math.sqrt(p.rho) * difficulty[None, :] + math.sqrt(1 - p.rho) * own
    cut = np.array([NormalDist().inv_cdf(min(max(t, 1e-9), 1 - 1e-9)) for t in targets])
    return (latent < cut[:, None]).astype(float), latent


def _fail(
    p: WorldParams,
    accuracy: np.ndarray,
    cost: np.ndarray,
    latency: np.ndarray,
    targets: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """Make ``fail_share`` of the configurations crash or time out on some questions (in place):
    the cell scores 0, costs 30 % of the run (the tokens sent before it failed) and takes the
    60 s timeout. Half of the failing configurations are drawn among the ten best targets."""
    k, n = accuracy.shape
    count = round(p.fail_share * k)
    order = np.argsort(-targets)
    top = rng.choice(order[:10], size=min(10, count // 2), replace=False)
    rest = rng.choice(np.setdiff1d(order, top), size=count - len(top), replace=False)
    for row in np.r_[top, rest]:
        failed = rng.uniform(0, 1, n) < rng.uniform(0.05, p.fail_max)
        accuracy[row, failed] = 0.0
        cost[row, failed] *= 0.3
        latency[row, failed] = 60.0


def _tie(p: WorldParams, accuracy: np.ndarray, latent: np.ndarray, targets: np.ndarray) -> None:
    """Give the configurations with the highest targets exactly ``best - d`` correct answers
    (``d`` from ``p.ties``; ``best`` the most any configuration got), flipping the cells nearest
    to their cut so the shared question difficulty is kept (in place)."""
    best = int(accuracy.sum(axis=1).max())
    for row, d in zip(np.argsort(-targets), p.ties, strict=False):
        want = best - d
        have = int(accuracy[row].sum())
        if have > want:  # drop the correct answers to the hardest questions
            ones = np.flatnonzero(accuracy[row] == 1)
            accuracy[row, ones[np.argsort(-latent[row, ones])[: have - want]]] = 0.0
        elif have < want:  # add the easiest wrong ones
            zeros = np.flatnonzero(accuracy[row] == 0)
            accuracy[row, zeros[np.argsort(latent[row, zeros])[: want - have]]] = 1.0


def make_world(kind: str, *, rho: float | None = None, seed: int = 0, **overrides: Any) -> World:
    """A seeded world of type ``kind`` (one of :data:`WORLDS`): a 10 x 10 planner x solver grid,
    or one configuration per model for the single-step types (``gpqa``, ``bfcl``)."""
    if kind not in WORLDS:
        raise SystemExit(f"unknown world {kind!r}; choose one of {sorted(WORLDS)}")
    base = WORLDS[kind]
    fields = {**base.__dict__, **overrides}
    if rho is not None:
        fields["rho"] = rho
    p = WorldParams(**fields)
    rng = np.random.default_rng([seed, int(1000 * p.rho), p.stream])
    world = _one_step_world(p, rng, seed) if p.models else _grid_world(p, rng, seed)
    # the family's additions draw from their own stream: the historical worlds stay as they were
    extra = np.random.default_rng([seed, int(1000 * p.rho), p.stream, 1])
    if p.fail_share > 0:
        _fail(p, world.accuracy, world.cost, world.latency, world.targets, extra)
    if p.ties:
        _tie(p, world.accuracy, world.latent, world.targets)
    return world


def _one_step_world(p: WorldParams, rng: np.random.Generator, seed: int) -> World:
    models = list(p.models)
    m, n = len(models), p.n_questions
    price_in = np.array([PRICES[x][0] for x in models])
    price_out = np.array([PRICES[x][1] for x in models])
    verbose = np.array([3.0 if x in REASONING else 1.0 for x in models]) * np.exp(
        rng.normal(0, 0.3, m)
    )
    length = np.exp(rng.normal(0, 0.35, n))
    tokens = np.exp(rng.normal(0, p.cost_sigma, (m, n)))
    cost = (2500.0 * price_in[:, None] + 650.0 * verbose[:, None] * price_out[:, None]) * tokens
    cost = _stretch_costs(cost * length / 1e6, p.cost_span)
    log_price = np.log(price_in + price_out)
    z_price = (log_price - log_price.mean()) / log_price.std()
    quality = p.price_skill * z_price + math.sqrt(1 - p.price_skill**2) * rng.normal(0, 1, m)
    targets = np.empty(m)
    targets[np.argsort(-quality)] = _target_accuracies(p, m, rng)
    accuracy, latent = _cells(p, targets, np.arange(m), m, rng)
    speed = np.exp(rng.normal(math.log(8), 0.5, m)) * verbose
    latency = speed[:, None] * length[None, :] * np.exp(rng.normal(0, 0.2, (m, n)))
    names = [f"{p.steps[0]}={x}" for x in models]
    return World(names, accuracy, cost, latency, targets, p, seed, latent)


def _grid_world(p: WorldParams, rng: np.random.Generator, seed: int) -> World:
    models = list(GRID)
    m = len(models)
    n = p.n_questions

    # ---- cost: additive in the two steps, per-question token counts
    price_in = np.array([PRICES[x][0] for x in models])
    price_out = np.array([PRICES[x][1] for x in models])
    verbose = np.array([3.0 if x in REASONING else 1.0 for x in models]) * np.exp(
        rng.normal(0, 0.3, m)
    )
    length = np.exp(rng.normal(0, 0.35, n))  # shared per-question length
    plan_in, plan_out, solve_in, solve_out = 900.0, 250.0, 1600.0, 400.0
    cost = np.empty((m * m, n))
    names = []
    for a in range(m):
        for b in range(m):
            noise = np.exp(rng.normal(0, p.cost_sigma, (2, n)))
            planner = (plan_in * price_in[a] + plan_out * verbose[a] * price_out[a]) * noise[0]
            solver = (solve_in * price_in[b] + solve_out * verbose[b] * price_out[b]) * noise[1]
            cost[a * m + b] = (planner + solver) * length / 1e6
            names.append(f"{p.steps[0]}={models[a]} + {p.steps[1]}={models[b]}")
    cost = _stretch_costs(cost, p.cost_span)

    # ---- accuracy: additive skills (correlated with price) + interaction, mapped onto targets
    log_price = np.log(price_in + price_out)
    z_price = (log_price - log_price.mean()) / log_price.std()
    noise_w = math.sqrt(1 - p.price_skill**2)
    skill_plan = p.price_skill * z_price + noise_w * rng.normal(0, 1, m)
    skill_solve = p.price_skill * z_price + noise_w * rng.normal(0, 1, m)
    quality = skill_plan[:, None] + skill_solve[None, :] + p.interaction * rng.normal(0, 1, (m, m))
    if p.liability:
        strongest = np.argsort(-log_price)[:2]  # the frontier models answer instead of planning
        quality[strongest, :] -= p.liability
    quality = quality.ravel()
    targets = np.empty(m * m)
    targets[np.argsort(-quality)] = _target_accuracies(p, m * m, rng)

    # ---- cells: Gaussian copula with shared difficulty and a per-solver component
    accuracy, latent = _cells(p, targets, np.tile(np.arange(m), m), m, rng)

    # ---- latency: additive per step, verbosity-driven, log-normal noise (seconds)
    speed = np.exp(rng.normal(math.log(8), 0.5, m)) * verbose
    latency = (
        (speed[:, None, None] + speed[None, :, None]).reshape(m * m, 1)
        * length[None, :]
        * np.exp(rng.normal(0, 0.2, (m * m, n)))
    )
    return World(names, accuracy, cost, latency, targets, p, seed, latent)


def write_world(world: World, out: Path) -> None:
    """Write ``accuracy_matrix.csv``, ``cost_matrix_usd.csv``, ``latency_matrix_seconds.csv``
    and ``metadata.json`` in the layout of AgentOpt's released matrices."""
    out.mkdir(parents=True, exist_ok=True)
    header = ["model_name", *(f"question_{q}" for q in range(world.accuracy.shape[1]))]
    for filename, matrix in (
        ("accuracy_matrix.csv", world.accuracy),
        ("cost_matrix_usd.csv", world.cost),
        ("latency_matrix_seconds.csv", world.latency),
    ):
        with (out / filename).open("w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(header)
            for name, row in zip(world.names, matrix, strict=True):
                writer.writerow([name, *(repr(float(x)) for x in row)])
    meta = {
        "synthetic": True,
        "generator": "benchmarks/selection_worlds.py",
        "seed": world.seed,
        "params": {k: v for k, v in world.params.__dict__.items() if k != "extra"},
        "shape": list(world.accuracy.shape),
        "target_accuracies": [round(float(t), 4) for t in world.targets],
    }
    (out / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")


def describe(world: World) -> str:
    acc = world.accuracy.mean(axis=1)
    cost = world.cost.mean(axis=1)
    order = np.argsort(-acc)
    top = ", ".join(f"{100 * acc[k]:.1f}" for k in order[:8])
    return (
        f"{world.params.kind} rho={world.params.rho} seed={world.seed}: best {world.names[order[0]]} "
        f"{100 * acc[order[0]]:.2f}%; top-8 {top}; >=95%: {(acc >= 0.95).sum()}, "
        f"min {100 * acc.min():.1f}%; cost span {cost.max() / cost.min():.1f}x, "
        f"best's cost share {100 * cost[order[0]] / cost.sum():.2f}%"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=sorted(WORLDS))
    parser.add_argument("--rho", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    world = make_world(args.kind, rho=args.rho, seed=args.seed)
    write_world(world, args.out)
    print(describe(world))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
