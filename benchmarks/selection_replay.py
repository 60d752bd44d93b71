"""Replay AgentOpt's recorded HotpotQA matrices through every selection algorithm, ours and theirs.

Each (configuration, question) cell of the accuracy / cost / latency matrices is the outcome of
one agent run. A seed shuffles the question order (and seeds the algorithm); every algorithm runs
over ``--seeds`` seeds and is scored against brute force on the full matrix:

- find rate: % of seeds whose pick is brute force's pick (accuracy, then cost, latency, name);
- mean regret: accuracy points between brute force's pick and the pick, averaged over seeds;
- evaluations: cells run, as % of the full grid;
- cost saved: 1 - dollars of the cells run / dollars of the full grid, in %.

The same workload also runs through the real ``agentopt-py==0.1.0`` selectors, in a separate
process and virtualenv (``benchmarks/.agentopt-venv``, ``openai<3`` pinned there; AgentOpt
patches httpx process-wide, so it is never imported here). Both processes refuse connections to
any non-loopback address while they run.

Usage::

    .venv/bin/python benchmarks/selection_replay.py [--data DIR] [--out DIR] [--seeds 50] [--no-agentopt]
    .venv/bin/python benchmarks/selection_replay.py --world mathqa --rho 0.3 --world-seeds 10 --seeds 20

Results go to ``benchmarks/results/selection/`` for the recorded HotpotQA matrices only; other
``--data`` writes to ``DATA/replay/``, ``--world`` and ``--resample`` under the system's temporary
directory, unless ``--out`` says otherwise.

``--world KIND`` replaces the recorded matrices by synthetic MathQA- or HotpotQA-like worlds from
``benchmarks/selection_worlds.py`` (``--world-seeds K`` worlds, seeds ``--world-seed-start`` ..
``+K-1``); every metric is then averaged over the worlds (each scored against its own brute
force), and ``best_accuracy`` is the mean of the worlds' best accuracies.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from phi_core.select import Arena, Evaluation, SearchSpace, make_algorithm, run_algorithm

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data" / "agentopt_hotpotqa"
DEFAULT_OUT = HERE / "results" / "selection"
AGENTOPT_VENV = HERE / ".agentopt-venv"


# name -> (algorithm, parameters). Defaults unless a variant says otherwise.
def _earlier(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A ``regret_race`` variant from before points 12-14 of ``RegretRace`` (issue 20's
    seventh, ninth and twelfth rounds): it pins ``perfect_look=0``, ``max_correlation=1`` and
    ``complete_look=0``, so its figures stay as they were recorded."""
    return "regret_race", {
        **params,
        "perfect_look": 0,
        "max_correlation": 1.0,
        "complete_look": 0,
    }


# point 14 as it was before point 15 of RegretRace (complete from look 40, no probes)
_BEFORE_PROBES: dict[str, Any] = {"complete_look": 40, "complete_arms": 1, "probe": 0}

PHI_SELECTORS: dict[str, tuple[str, dict[str, Any]]] = {
    "brute_force": ("brute_force", {}),
    "random": ("random", {}),
    "hill_climbing": ("hill_climbing", {}),
    "arm_elimination": ("arm_elimination", {}),
    "threshold": ("threshold", {}),
    "epsilon_lucb": ("epsilon_lucb", {}),
    "bayesian": ("bayesian", {}),
    "matrix_ucb": ("matrix_ucb", {}),
    "matrix_ucb_35": ("matrix_ucb", {"budget_fraction": 0.35}),
    "regret_race": ("regret_race", {}),
    # savings within a fifth of a point, not the exact pick (issue 20's eleventh session)
    "regret_race_thrifty": ("regret_race_thrifty", {}),
    # a larger regret tolerance per elimination: cheaper, more regret on near-tie benchmarks
    "regret_race_3e-4": _earlier({"eta": 3e-4}),
    "paired_race": ("paired_race", {}),
    # the same race with a fixed z = 3 instead of the delta-derived one (no formal guarantee)
    "paired_race_z3": ("paired_race", {"z": 3.0}),
    # the additive (planner + solver) prior: near-tie-robust on additive grids, not the default
    "regret_race_additive": _earlier({"eta": 3e-5, "additive_prior": 4.0}),
    # the default before issue 20 (no disagreement floor, no tie protection)
    "regret_race_v0": _earlier({"floor": 0.0, "tie_questions": 0.0, "tie_risk": 0.0}),
    # the default of issue 20's first round (floor and tie rule, no tie-risk guard)
    "regret_race_v1": _earlier({"tie_risk": 0.0}),
    # tuning candidates for the default (issue 20 point 4; see results/selection_family/README.md)
    "regret_race_f1t1": _earlier({"floor": 1.0, "tie_risk": 0.0}),
    "regret_race_f1t1_e2": _earlier({"floor": 1.0, "eta": 2e-4, "tie_risk": 0.0}),
    "regret_race_t1": _earlier({"floor": 0.0, "tie_risk": 0.0}),
    # second round: the tie-risk guard with a larger regret tolerance (cheaper, see the README)
    # (the round-2 guard, as in the family README's figures)
    "regret_race_e2": _earlier({"eta": 2e-4, "exact_guard": False}),
    # the default of issue 20's second round: the tie-risk guard under the normal approximation
    # (third round: the exact beta-binomial end game for 0/1 scores, see the family README)
    "regret_race_v2": _earlier({"exact_guard": False}),
    # issue 20's fourth round: stratified sampling by scouted question difficulty, not adopted
    # (one miss in 50 seeds here; see the family README's round 4)
    "regret_race_strata4": _earlier({"strata": 4}),
    # the default of issue 20's third to sixth rounds: no bet behind a field of perfect arms
    # (seventh round: point 12 of RegretRace, see the family README)
    "regret_race_v3": _earlier({}),
    # the default of issue 20's seventh and eighth rounds: no cap on the pairing's correlation
    # (ninth round: point 13 of RegretRace, see the family README)
    "regret_race_v4": ("regret_race", {"max_correlation": 1.0, "complete_look": 0}),
    # the default of issue 20's ninth to eleventh rounds: no certificate from a complete leader
    # (twelfth round: point 14 of RegretRace, see the family README)
    "regret_race_v5": ("regret_race", {"complete_look": 0}),
    # point 14 as first adopted: the cheapest perfect leader is run to the end, not the one whose
    # steps do best (twelfth session, the family README)
    "regret_race_v6": ("regret_race", {"complete_by": "cost", **_BEFORE_PROBES}),
    # the default of issue 20's twelfth to fifteenth sessions: the certificate from look 40 behind
    # one perfect survivor, in random order (sixteenth session: point 15, see the family README)
    "regret_race_v7": ("regret_race", dict(_BEFORE_PROBES)),
    # point 15 as first adopted (eighth held-out split): every survivor asked in every round
    "regret_race_v8": ("regret_race", {"probe_cheapest": 1.0}),
    # AgentOpt's newer selectors (issue 20 point 6)
    "matrix_ucb_lrf": ("matrix_ucb_lrf", {}),
    "lm_proposal": ("lm_proposal", {}),  # proposer and prices filled in by heuristic_proposer()
}


# --------------------------------------------------------------------------- LM proposal's model


def heuristic_proposer() -> Any:
    """A benchmark double standing in for the proposer LLM of ``lm_proposal`` (the embedded
    SmolLM2 takes ~10 s a proposal at one thread, too slow for 50 seeds x 11 world types).

    It reads the prompt ``LMProposal`` sends — steps, candidates with prices, results so far —
    and answers JSON the way a capable LLM tends to: first the priciest candidates of every step
    (the "strongest models"), then the untested one-step changes of the best result so far,
    priciest replacement first. It sees only what a real proposer sees.
    """
    import re

    from phi_core.providers.base import ModelConfig
    from phi_core.select import MeteredModel
    from phi_core.testing import Reply, ScriptedProvider

    def answer(request: Any) -> Reply:
        prompt = request.messages[-1].content[0].text
        steps: dict[str, list[tuple[float, str]]] = {}
        current = None
        for line in prompt.splitlines():
            step = re.match(r"- (\w+)(?: \(.*\))?:$", line)
            cand = re.match(r"    (.+?)(?: \(\$([\d.e-]+) in / \$([\d.e-]+) out.*\))?$", line)
            if step:
                current = step.group(1)
                steps[current] = []
            elif cand and current is not None:
                price = float(cand.group(2) or 0) + 4 * float(cand.group(3) or 0)
                steps[current].append((price, cand.group(1)))
        results = [
            (json.loads(m.group(1)), float(m.group(2)))
            for m in re.finditer(r"- (\{.*?\}): accuracy ([\d.]+) %", prompt)
        ]
        want = int(re.search(r"Propose (\d+)", prompt).group(1))  # type: ignore[union-attr]
        ranked = {s: [c for _, c in sorted(v, key=lambda x: -x[0])] for s, v in steps.items()}
        tested = [r for r, _ in results]
        proposals: list[dict[str, str]] = []
        if results:
            best = max(results, key=lambda r: r[1])[0]
            for depth in range(max(len(v) for v in ranked.values())):
                for s, order in ranked.items():
                    if depth < len(order) and order[depth] != best[s]:
                        proposals.append({**best, s: order[depth]})
        for depth in range(max(len(v) for v in ranked.values())):
            proposals.append({s: order[min(depth, len(order) - 1)] for s, order in ranked.items()})
        fresh = [p for i, p in enumerate(proposals) if p not in tested and p not in proposals[:i]]
        return Reply(json.dumps({"combinations": fresh[:want]}))

    config = ModelConfig(provider="benchmark", id="heuristic-proposer", api="scripted")
    return MeteredModel(config, provider=ScriptedProvider(default=answer))


PROPOSER: str | None = None
"""``--proposer MODEL``: a real proposer model for ``lm_proposal`` instead of the heuristic."""


def lm_proposal_params() -> dict[str, Any]:
    from selection_worlds import PRICES

    prices = {m: {"input_price": i, "output_price": o} for m, (i, o) in PRICES.items()}
    return {"proposer": PROPOSER or heuristic_proposer(), "model_prices": prices}


# --------------------------------------------------------------------------- offline guard


def forbid_non_loopback() -> None:
    """Make any connection to a non-loopback address fail loudly in this process."""
    original = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else str(address)
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in (
            "127.0.0.1",
            "::1",
            "localhost",
        ):
            raise ConnectionRefusedError(f"benchmark is offline: refused connection to {host!r}")
        return original(self, address)

    socket.socket.connect = connect  # type: ignore[method-assign]


# --------------------------------------------------------------------------- data


class Matrices:
    def __init__(self, data: Path | None) -> None:
        if data is None:  # filled by from_world
            return
        self.names, self.accuracy = _read_matrix(data / "accuracy_matrix.csv")
        cost_names, self.cost = _read_matrix(data / "cost_matrix_usd.csv")
        if cost_names != self.names:
            raise SystemExit("accuracy and cost matrices list different configurations")
        latency_file = data / "latency_matrix_seconds.csv"
        if latency_file.exists():
            _, self.latency = _read_matrix(latency_file)
        else:
            self.latency = np.zeros_like(self.accuracy)
        self.space, self.rows = _space_from_names(self.names)

    @classmethod
    def from_world(cls, world: Any) -> Matrices:
        m = cls(None)
        m.names, m.accuracy, m.cost, m.latency = (
            world.names,
            world.accuracy,
            world.cost,
            world.latency,
        )
        m.space, m.rows = _space_from_names(m.names)
        return m

    @property
    def shape(self) -> tuple[int, int]:
        return self.accuracy.shape  # type: ignore[return-value]

    def best(self) -> int:
        """Brute force's pick (a space index): accuracy, then cost, latency, name."""
        keys = [
            (
                -self.accuracy[r].mean(),
                self.cost[r].mean(),
                self.latency[r].mean(),
                self.space.name(k),
            )
            for k, r in enumerate(self.rows)
        ]
        return min(range(len(keys)), key=keys.__getitem__)


def _read_matrix(path: Path) -> tuple[list[str], np.ndarray]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    names = [r[0] for r in rows[1:]]
    return names, np.array([[float(x) for x in r[1:]] for r in rows[1:]])


def _space_from_names(names: list[str]) -> tuple[SearchSpace, list[int]]:
    """A step space from ``"planner=a + solver=b"`` row names (a one-step space if not a grid)."""
    gridded = all("=" in part for name in names for part in name.split(" + "))
    parsed = (
        [dict(part.split("=", 1) for part in name.split(" + ")) for name in names]
        if gridded
        else []
    )
    if gridded and len({tuple(p) for p in parsed}) == 1:
        steps: dict[str, list[str]] = {s: [] for s in parsed[0]}
        for p in parsed:
            for s, m in p.items():
                if m not in steps[s]:
                    steps[s].append(m)
        space = SearchSpace(steps)
        if len(space) == len(names):
            rows = [0] * len(space)
            for r, p in enumerate(parsed):
                rows[space.find(p)] = r
            return space, rows
    space = SearchSpace({"config": names})
    return space, list(range(len(names)))


class ReplayEvaluator:
    """Answers every cell from the recorded matrices (no agent, no network)."""

    def __init__(self, m: Matrices) -> None:
        self.m = m

    async def evaluate(self, batch: Mapping[int, Sequence[int]]) -> dict[int, list[Evaluation]]:
        out: dict[int, list[Evaluation]] = {}
        for k, questions in batch.items():
            r = self.m.rows[k]
            out[k] = [
                Evaluation(
                    score=float(self.m.accuracy[r, q]),
                    cost_usd=float(self.m.cost[r, q]),
                    latency_s=float(self.m.latency[r, q]),
                )
                for q in questions
            ]
        return out


# --------------------------------------------------------------------------- phi selectors


def run_phi(m: Matrices, seeds: int) -> dict[str, list[tuple[int, int, float]]]:
    """{selector: [(pick, evaluations, cost) per seed]}."""
    n_combos, n_questions = m.shape
    names = [m.space.name(k) for k in range(n_combos)]
    out: dict[str, list[tuple[int, int, float]]] = {}
    for label, (algo, params) in PHI_SELECTORS.items():
        if algo == "lm_proposal" and "proposer" not in params:
            params = {**params, **lm_proposal_params()}
        runs = []
        started = time.perf_counter()
        for seed in range(seeds):
            arena = Arena(n_combos, n_questions, ReplayEvaluator(m), seed=seed, names=names)
            pick = asyncio.run(run_algorithm(make_algorithm(algo, **params), arena, m.space))
            runs.append((pick, arena.evaluations, arena.cost_spent))
        out[label] = runs
        print(f"  phi {label:<16} {time.perf_counter() - started:6.1f}s", file=sys.stderr)
    return out


# --------------------------------------------------------------------------- agentopt selectors

AGENTOPT_SCRIPT = r"""
import contextlib, json, random, socket, sys

_connect = socket.socket.connect
def _guard(self, address):
    host = address[0] if isinstance(address, tuple) else str(address)
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        raise ConnectionRefusedError("offline: refused " + repr(host))
    return _connect(self, address)
socket.socket.connect = _guard

import agentopt

job = json.load(open(sys.argv[1]))
acc, cost, rows = job["accuracy"], job["cost"], job["rows"]
steps, candidates = job["steps"], job["candidates"]
n = len(acc[0])
STATE = {"evals": 0, "cost": 0.0}

def row_of(models):
    k = 0
    for s, cands in zip(steps, candidates):
        k = k * len(cands) + cands.index(models[s])
    return rows[k]

class ReplayAgent:
    def __init__(self, models):
        self.row = row_of(models)
    def run(self, q):
        STATE["evals"] += 1
        STATE["cost"] += cost[self.row][q]
        return acc[self.row][q]

class StubTracker:
    def start(self): pass
    def stop(self): pass
    @contextlib.contextmanager
    def track(self, **kw):
        yield
    def get_usage(self, **kw): return {}
    def get_cached_latency(self, **kw): return 0.0
    def get_records(self): return []

def eval_fn(expected, actual):
    return float(actual)

results = {}
models = {s: list(c) for s, c in zip(steps, candidates)}
for method in job["methods"]:
    runs = []
    for seed in range(job["seeds"]):
        order = list(range(n)); random.Random(seed).shuffle(order)
        dataset = [(q, None) for q in order]
        kwargs = {}
        if method in ("random", "hill_climbing"):
            kwargs["seed"] = seed
        random.seed(seed)
        STATE.update(evals=0, cost=0.0)
        sel = agentopt.ModelSelector(agent=ReplayAgent, models=models, eval_fn=eval_fn, dataset=dataset,
                                     method=method, tracker=StubTracker(), **kwargs)
        with contextlib.redirect_stdout(sys.stderr):
            res = sel.select_best(parallel=False)
        best = res.get_best_combo()
        runs.append([row_of(best), STATE["evals"], STATE["cost"]])
    results[method] = runs
    print("  agentopt", method, file=sys.stderr, flush=True)
json.dump({"version": agentopt.__version__ if hasattr(agentopt, "__version__") else "0.1.0", "results": results}, sys.stdout)
"""

AGENTOPT_METHODS = [
    "brute_force",
    "random",
    "hill_climbing",
    "arm_elimination",
    "threshold",
    "epsilon_lucb",
]


def ensure_agentopt_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} (agentopt-py==0.1.0, openai<3)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(python), "-c", "import agentopt"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "agentopt-py==0.1.0", "openai<3"],
            check=True,
        )
    return python


def run_agentopt(m: Matrices, seeds: int, venv: Path) -> dict[str, list[tuple[int, int, float]]]:
    python = ensure_agentopt_venv(venv)
    job = {
        "accuracy": m.accuracy.tolist(),
        "cost": m.cost.tolist(),
        "rows": m.rows,
        "steps": m.space.steps,
        "candidates": m.space.candidates,
        "seeds": seeds,
        "methods": AGENTOPT_METHODS,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    job_file = Path(f.name)
    scratch = Path(tempfile.mkdtemp(prefix="agentopt-run-"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        done = subprocess.run(
            [str(python), "-c", AGENTOPT_SCRIPT, str(job_file)],
            capture_output=True,
            text=True,
            cwd=scratch,  # anything agentopt might drop in its working directory stays out of the repo
            env=env,
        )
    finally:
        job_file.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"agentopt run failed:\n{done.stderr[-4000:]}")
    payload = json.loads(done.stdout)
    row_to_k = {r: k for k, r in enumerate(m.rows)}
    return {
        method: [(row_to_k[row], evals, cost) for row, evals, cost in runs]
        for method, runs in payload["results"].items()
    }


# --------------------------------------------------------------------------- scoring and output


def summarise(m: Matrices, runs: list[tuple[int, int, float]]) -> dict[str, float]:
    best = m.best()
    acc = m.accuracy.mean(axis=1)
    full_cost = float(m.cost.sum())
    cells = m.accuracy.size
    best_acc = acc[m.rows[best]]
    return {
        "find_rate": 100.0 * float(np.mean([pick == best for pick, _, _ in runs])),
        "mean_regret_pts": 100.0
        * float(np.mean([best_acc - acc[m.rows[pick]] for pick, _, _ in runs])),
        "evals_pct": 100.0 * float(np.mean([e / cells for _, e, _ in runs])),
        "cost_saved_pct": 100.0 * float(np.mean([1 - c / full_cost for _, _, c in runs])),
    }


def plot(selectors: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name, row in selectors.items():
        ours = row["source"] == "phi"
        marker = "*" if name == "phi:regret_race" else ("o" if ours else "s")
        ax.scatter(
            row["cost_saved_pct"],
            row["mean_regret_pts"],
            marker=marker,
            s=160 if marker == "*" else 50,
            color="tab:blue" if ours else "tab:orange",
        )
        ax.annotate(
            name,
            (row["cost_saved_pct"], row["mean_regret_pts"]),
            fontsize=7,
            xytext=(4, 3),
            textcoords="offset points",
        )
    ax.axvline(70, color="grey", lw=0.8, ls="--")
    ax.axhline(0.2, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("cost saved vs brute force (%)")
    ax.set_ylabel("mean regret (accuracy points, lower is better)")
    ax.set_title("Selection on replayed matrices: phi (blue) vs agentopt-py 0.1.0 (orange)")
    ax.set_yscale("symlog", linthresh=0.5)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _display_path(path: Path) -> str:
    """``path`` relative to the repository when it is inside it (results stay machine-independent)."""
    try:
        return str(path.resolve().relative_to(HERE.parent))
    except ValueError:
        return str(path)


def _default_out(args: argparse.Namespace) -> Path:
    """The committed results for the recorded HotpotQA replay; elsewhere for anything else."""
    if args.world is not None or args.resample is not None:
        name = f"world-{args.world}" if args.world is not None else f"resample-{args.resample}"
        return Path(tempfile.gettempdir()) / "phi-selection-replay" / name
    if args.data.resolve() != DEFAULT_DATA.resolve():
        return args.data / "replay"
    return DEFAULT_OUT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"where results.json and the plot go (default: {_display_path(DEFAULT_OUT)} for "
        "AgentOpt's HotpotQA matrices as recorded; DATA/replay for other --data, a directory "
        "under the system's temporary one for --world and --resample, so the committed "
        "results are only rewritten on purpose)",
    )
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--no-agentopt", action="store_true", help="skip the agentopt-py side")
    parser.add_argument("--agentopt-venv", type=Path, default=AGENTOPT_VENV)
    parser.add_argument(
        "--keep-agentopt",
        action="store_true",
        help="with --no-agentopt: carry the agentopt-py rows of OUT/results.json over (same data "
        "and seeds; the package's side does not change when phi's selectors do)",
    )
    parser.add_argument(
        "--resample",
        type=int,
        default=None,
        metavar="SEED",
        help="bootstrap the questions (with replacement) into a new benchmark of the same shape",
    )
    parser.add_argument("--world", choices=["mathqa", "hotpotqa"], default=None)
    parser.add_argument("--rho", type=float, default=None, help="shared difficulty of --world")
    parser.add_argument("--world-seeds", type=int, default=1)
    parser.add_argument("--world-seed-start", type=int, default=100)
    parser.add_argument(
        "--selectors", default=None, help="comma-separated phi selector names (default: all)"
    )
    parser.add_argument(
        "--proposer",
        default=None,
        metavar="MODEL",
        help="lm_proposal's proposer model, e.g. local:smollm2 (default: the heuristic double)",
    )
    args = parser.parse_args(argv)
    global PROPOSER
    PROPOSER = args.proposer
    if args.selectors:
        unknown = set(args.selectors.split(",")) - set(PHI_SELECTORS)
        if unknown:
            parser.error(
                f"unknown selectors {sorted(unknown)}; choose from {sorted(PHI_SELECTORS)}"
            )
        for name in list(PHI_SELECTORS):
            if name not in args.selectors.split(","):
                del PHI_SELECTORS[name]
    if args.out is None:
        args.out = _default_out(args)
    if args.world is not None:
        return run_worlds(args)

    if not args.no_agentopt:  # install first (needs the package registry), then go offline
        ensure_agentopt_venv(args.agentopt_venv)
    forbid_non_loopback()
    m = Matrices(args.data)
    if args.resample is not None:
        columns = np.random.default_rng(args.resample).integers(0, m.shape[1], m.shape[1])
        m.accuracy, m.cost, m.latency = (
            m.accuracy[:, columns],
            m.cost[:, columns],
            m.latency[:, columns],
        )
    n_combos, n_questions = m.shape
    args.out.mkdir(parents=True, exist_ok=True)
    selectors: dict[str, dict[str, Any]] = {}
    for label, runs in run_phi(m, args.seeds).items():
        selectors[f"phi:{label}"] = {**summarise(m, runs), "source": "phi"}
    if not args.no_agentopt:
        for label, runs in run_agentopt(m, args.seeds, args.agentopt_venv).items():
            selectors[f"agentopt:{label}"] = {**summarise(m, runs), "source": "agentopt"}
    elif args.keep_agentopt:
        selectors.update(_previous_agentopt_rows(args))
    best = m.best()
    result = {
        "n_configs": n_combos,
        "n_questions": n_questions,
        "seeds": args.seeds,
        "best_accuracy": float(m.accuracy[m.rows[best]].mean()),
        "best_config": m.space.name(best),
        "data": _display_path(args.data),
        "resample": args.resample,
        "selectors": selectors,
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(selectors, args.out / "regret_vs_savings.png")
    print(
        f"{n_combos} configs x {n_questions} questions, {args.seeds} seeds; best {m.space.name(best)} "
        f"({100 * result['best_accuracy']:.2f}%)"
    )
    _print_table(selectors)
    print(f"wrote {args.out / 'results.json'} and {args.out / 'regret_vs_savings.png'}")
    return 0


def _previous_agentopt_rows(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The ``agentopt:*`` rows of the previous ``results.json`` in ``--out`` (same data, seeds)."""
    path = args.out / "results.json"
    if not path.exists():
        raise SystemExit(f"--keep-agentopt: no previous {path} to keep the agentopt rows from")
    previous = json.loads(path.read_text())
    same = (previous.get("data"), previous.get("seeds"), previous.get("resample")) == (
        _display_path(args.data),
        args.seeds,
        args.resample,
    )
    if not same:
        raise SystemExit(
            f"--keep-agentopt: {path} was made with other data, seeds or resampling; "
            "re-run the agentopt side instead (drop --no-agentopt)"
        )
    return {k: v for k, v in previous["selectors"].items() if k.startswith("agentopt:")}


def run_worlds(args: argparse.Namespace) -> int:
    """Every phi selector (and agentopt's unless ``--no-agentopt``) on synthetic worlds."""
    from selection_worlds import make_world

    if not args.no_agentopt:
        ensure_agentopt_venv(args.agentopt_venv)
    forbid_non_loopback()
    per_world: dict[str, list[dict[str, float]]] = {}
    sources: dict[str, str] = {}
    bests: list[float] = []
    shape: tuple[int, int] = (0, 0)
    for ws in range(args.world_seed_start, args.world_seed_start + args.world_seeds):
        m = Matrices.from_world(make_world(args.world, rho=args.rho, seed=ws))
        shape = m.shape
        bests.append(float(m.accuracy[m.rows[m.best()]].mean()))
        print(f"world {args.world} rho={args.rho} seed={ws}", file=sys.stderr)
        results = {f"phi:{k}": v for k, v in run_phi(m, args.seeds).items()}
        if not args.no_agentopt:
            results.update(
                {
                    f"agentopt:{k}": v
                    for k, v in run_agentopt(m, args.seeds, args.agentopt_venv).items()
                }
            )
        for name, runs in results.items():
            per_world.setdefault(name, []).append(summarise(m, runs))
            sources[name] = name.split(":", 1)[0]
    selectors: dict[str, dict[str, Any]] = {
        name: {
            **{key: float(np.mean([r[key] for r in rows])) for key in rows[0]},
            "source": sources[name],
        }
        for name, rows in per_world.items()
    }
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "n_configs": shape[0],
        "n_questions": shape[1],
        "seeds": args.seeds,
        "best_accuracy": float(np.mean(bests)),
        "world": args.world,
        "rho": args.rho,
        "world_seeds": list(range(args.world_seed_start, args.world_seed_start + args.world_seeds)),
        "selectors": selectors,
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(selectors, args.out / "regret_vs_savings.png")
    print(
        f"{args.world} worlds (rho={args.rho}) x {args.world_seeds}, {shape[0]} configs x "
        f"{shape[1]} questions, {args.seeds} seeds each; mean best {100 * result['best_accuracy']:.2f}%"
    )
    _print_table(selectors)
    print(f"wrote {args.out / 'results.json'} and {args.out / 'regret_vs_savings.png'}")
    return 0


def _print_table(selectors: dict[str, dict[str, Any]]) -> None:
    print(f"{'selector':<28}{'find %':>8}{'regret pts':>12}{'evals %':>9}{'saved %':>9}")
    for name, row in selectors.items():
        print(
            f"{name:<28}{row['find_rate']:>8.1f}{row['mean_regret_pts']:>12.3f}"
            f"{row['evals_pct']:>9.1f}{row['cost_saved_pct']:>9.1f}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
