"""Every selector on the world family of ``selection_worlds.py``: is the default robust?

For each world type of :data:`selection_worlds.FAMILY` (shapes calibrated to AgentOpt's
published HotpotQA, MathQA, GPQA and BFCL benchmarks and to the hard cases of issue 20), several
seeded worlds are drawn and every selector runs on each with several seeds; each world is scored
against its own brute force (find rate, regret in accuracy points, cost saved, as in
``selection_replay.py``).

Disjoint sets of world seeds: ``--split tuning`` (world seeds 0..K-1) is where selector
parameters may be tried; ``--split report`` (world seeds 100..100+K-1) is run once for the
figures; ``--split holdout`` (world seeds 300..300+K-1) is a second held-out set, for a
candidate chosen after the report had been seen. The default selector is judged by its **worst
case** across the world types.

Per world type the table also states the **limit**: the cost saved if every configuration within
two questions of the best (exact ties included) — the ones no selector can tell apart from it
before the full data — is run on every question and nothing else is run at all. Where that limit
is below 70 %, the issue's "≥ 70 % saved at ≤ 0.2 pts regret" cannot be met by any selector.

Usage::

    .venv/bin/python benchmarks/selection_family.py --split report --world-seeds 3 --seeds 10
    .venv/bin/python benchmarks/selection_family.py --split tuning --selectors regret_race,... \
        --out /tmp/tuning
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from selection_replay import PHI_SELECTORS, Matrices, forbid_non_loopback, run_phi, summarise
from selection_worlds import FAMILY, WORLDS, make_world

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "selection_family"
SPLITS = {"tuning": 0, "report": 100, "holdout": 300}
FAMILY_SELECTORS = (
    "random",
    "hill_climbing",
    "threshold",
    "epsilon_lucb",
    "arm_elimination",
    "matrix_ucb",
    "matrix_ucb_35",
    "matrix_ucb_lrf",
    "lm_proposal",
    "paired_race",
    "regret_race_v0",
    "regret_race_v1",
    "regret_race_v2",
    "regret_race_v3",
    "regret_race_v4",
    "regret_race",
    "regret_race_strata4",
)
DEFAULT = "regret_race"
ANCHOR = "arm_elimination"


def limit(m: Matrices, questions: int = 2) -> dict[str, float]:
    """Savings bound: only the configurations within ``questions`` of the best, run on all data."""
    acc = m.accuracy.sum(axis=1)
    near = acc >= acc.max() - questions - 1e-9
    return {
        "indistinguishable": int(near.sum()),
        "limit_saved_pct": 100.0 * (1 - float(m.cost[near].sum()) / float(m.cost.sum())),
    }


def run_family(kinds: list[str], world_seeds: list[int], seeds: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        per: dict[str, list[dict[str, float]]] = {}
        limits: list[dict[str, float]] = []
        bests: list[float] = []
        started = time.perf_counter()
        for ws in world_seeds:
            m = Matrices.from_world(make_world(kind, seed=ws))
            limits.append(limit(m))
            bests.append(float(m.accuracy[m.rows[m.best()]].mean()))
            for name, runs in run_phi(m, seeds).items():
                per.setdefault(name, []).append(summarise(m, runs))
        out[kind] = {
            "shape": list(m.shape),
            "best_accuracy": float(np.mean(bests)),
            "indistinguishable": float(np.mean([x["indistinguishable"] for x in limits])),
            "limit_saved_pct": float(np.mean([x["limit_saved_pct"] for x in limits])),
            "selectors": {
                name: {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}
                for name, rows in per.items()
            },
        }
        print(f"{kind}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    return out


def worst_case(family: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per selector: lowest find rate, highest regret, lowest savings across the world types,
    and in how many types it is at least as good as the anchor on find rate and regret at equal
    or better savings."""
    names = list(next(iter(family.values()))["selectors"])
    out: dict[str, dict[str, float]] = {}
    for name in names:
        rows = [w["selectors"][name] for w in family.values()]
        anchor = [w["selectors"].get(ANCHOR) for w in family.values()]
        beats = sum(
            1
            for r, a in zip(rows, anchor, strict=True)
            if a is not None
            and r["find_rate"] >= a["find_rate"] - 1e-9
            and r["mean_regret_pts"] <= a["mean_regret_pts"] + 1e-9
            and r["cost_saved_pct"] >= a["cost_saved_pct"] - 1e-9
        )
        out[name] = {
            "min_find_rate": min(r["find_rate"] for r in rows),
            "max_regret_pts": max(r["mean_regret_pts"] for r in rows),
            "min_cost_saved_pct": min(r["cost_saved_pct"] for r in rows),
            "mean_regret_pts": float(np.mean([r["mean_regret_pts"] for r in rows])),
            "mean_cost_saved_pct": float(np.mean([r["cost_saved_pct"] for r in rows])),
            "types_matching_anchor": beats,
        }
    return out


def _cell(r: dict[str, float]) -> str:
    return f"{r['find_rate']:.0f} / {r['mean_regret_pts']:.3f} / {r['cost_saved_pct']:.1f}"


def goal(result: dict[str, Any]) -> list[str]:
    """Per world type: the default against the anchor and against the 70 % / 0.2 pts target."""
    lines = [
        "\n### Goal per world type (find % / regret pts / saved %)\n",
        f"| type | limit saved % | {DEFAULT} | {ANCHOR} | find, regret >= anchor | savings >= "
        "anchor | >= 70 % saved at <= 0.2 pts |",
        "|---|---:|---|---|---|---|---|",
    ]
    for kind, w in result["family"].items():
        d, a = w["selectors"].get(DEFAULT), w["selectors"].get(ANCHOR)
        if d is None or a is None:
            continue
        quality = d["find_rate"] >= a["find_rate"] and d["mean_regret_pts"] <= a["mean_regret_pts"]
        target = d["cost_saved_pct"] >= 70 and d["mean_regret_pts"] <= 0.2
        allowed = w["limit_saved_pct"] >= 70
        lines.append(
            f"| {kind} | {w['limit_saved_pct']:.1f} | {_cell(d)} | {_cell(a)} | "
            f"{'yes' if quality else 'no'} | "
            f"{'yes' if d['cost_saved_pct'] >= a['cost_saved_pct'] else 'no'} | "
            f"{'yes' if target else ('no' if allowed else 'not allowed (limit < 70 %)')} |"
        )
    return lines


def markdown(result: dict[str, Any]) -> str:
    lines = []
    for kind, w in result["family"].items():
        lines.append(
            f"\n### {kind} ({w['shape'][0]} x {w['shape'][1]}, best {100 * w['best_accuracy']:.2f} %; "
            f"limit {w['limit_saved_pct']:.1f} % saved: {w['indistinguishable']:.1f} configurations "
            "within two questions of the best)\n"
        )
        lines.append("| selector | find % | regret pts | evals % | saved % |")
        lines.append("|---|---:|---:|---:|---:|")
        for name, r in w["selectors"].items():
            bold = "**" if name == f"{DEFAULT}" else ""
            lines.append(
                f"| {bold}{name}{bold} | {r['find_rate']:.1f} | {r['mean_regret_pts']:.3f} | "
                f"{r['evals_pct']:.1f} | {r['cost_saved_pct']:.1f} |"
            )
    lines += goal(result)
    lines.append("\n### Worst case across the world types\n")
    lines.append(
        f"| selector | min find % | max regret pts | min saved % | mean regret | mean saved % "
        f"| types >= {ANCHOR} |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in result["worst_case"].items():
        lines.append(
            f"| {name} | {r['min_find_rate']:.1f} | {r['max_regret_pts']:.3f} | "
            f"{r['min_cost_saved_pct']:.1f} | {r['mean_regret_pts']:.3f} | "
            f"{r['mean_cost_saved_pct']:.1f} | {r['types_matching_anchor']}/{len(result['family'])} |"
        )
    return "\n".join(lines) + "\n"


def _candidate(
    parser: argparse.ArgumentParser, spec: str
) -> tuple[str, tuple[str, dict[str, Any]]]:
    """``NAME=ALGO:KEY=VALUE,...`` -> (NAME, (ALGO, {KEY: VALUE})): a number where VALUE reads
    as one, else the word itself (e.g. ``algorithm=hill_climbing``)."""
    name, _, rest = spec.partition("=")
    algo, _, params = rest.partition(":")

    def value(text: str) -> float | str:
        try:
            return float(text)
        except ValueError:
            return text

    try:
        values = {
            key: value(text)
            for key, text in (item.split("=", 1) for item in params.split(",") if item)
        }
    except ValueError:
        parser.error(f"--candidate {spec!r}: expected NAME=ALGO:KEY=VALUE,...")
    if not name or not algo:
        parser.error(f"--candidate {spec!r}: expected NAME=ALGO:KEY=VALUE,...")
    return name, (algo, values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=sorted(SPLITS), default="report")
    parser.add_argument("--world-seeds", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=10, help="selector seeds per world")
    parser.add_argument("--worlds", default=",".join(FAMILY), help="comma-separated world types")
    parser.add_argument("--selectors", default=",".join(FAMILY_SELECTORS))
    parser.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="NAME=ALGO:KEY=VALUE,...",
        help="an extra selector to try (repeatable), e.g. rr_e2=regret_race:eta=2e-4,tie_risk=0.05",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--render", type=Path, default=None, metavar="JSON", help="only rewrite table.md from JSON"
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        result = json.loads(args.render.read_text())
        result["worst_case"] = worst_case(result["family"])
        (args.render.parent / "table.md").write_text(markdown(result))
        print(markdown(result))
        return 0
    kinds = args.worlds.split(",")
    unknown = set(kinds) - set(WORLDS)
    if unknown:
        parser.error(f"unknown world types {sorted(unknown)}; choose from {sorted(WORLDS)}")
    chosen = args.selectors.split(",")
    for spec in args.candidate:
        name, algo_params = _candidate(parser, spec)
        PHI_SELECTORS[name] = algo_params
        chosen.append(name)
    unknown = set(chosen) - set(PHI_SELECTORS)
    if unknown:
        parser.error(f"unknown selectors {sorted(unknown)}; choose from {sorted(PHI_SELECTORS)}")
    for name in list(PHI_SELECTORS):
        if name not in chosen:
            del PHI_SELECTORS[name]
    forbid_non_loopback()
    start = SPLITS[args.split]
    world_seeds = list(range(start, start + args.world_seeds))
    family = run_family(kinds, world_seeds, args.seeds)
    result = {
        "split": args.split,
        "world_seeds": world_seeds,
        "seeds": args.seeds,
        "default": DEFAULT,
        "anchor": ANCHOR,
        "family": family,
        "worst_case": worst_case(family),
    }
    out = args.out or DEFAULT_OUT / args.split
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (out / "table.md").write_text(table)
    print(table)
    print(f"wrote {out / 'results.json'} and {out / 'table.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
