"""Every selector on the world family of ``selection_worlds.py``: is the default robust?

For each world type of :data:`selection_worlds.FAMILY` (shapes calibrated to AgentOpt's
published HotpotQA, MathQA, GPQA and BFCL benchmarks and to the hard cases of issue 20), several
seeded worlds are drawn and every selector runs on each with several seeds; each world is scored
against its own brute force (find rate, regret in accuracy points, cost saved, as in
``selection_replay.py``).

Disjoint sets of world seeds: ``--split tuning`` (world seeds 0..K-1) is where selector
parameters may be tried; ``--split report`` (world seeds 100..100+K-1) is run once for the
figures; ``--split holdout`` (world seeds 300..300+K-1) is a second held-out set, for a
candidate chosen after the report had been seen; ``--split confirm`` (world seeds 500..) is a
third, run only to confirm the default against the anchor, never to choose; ``--split verify``
(world seeds 700..) is a fourth, for the candidate of the eleventh session; ``final`` (900..),
``last`` (1100..), ``fresh`` (1300..), ``eighth`` (1500..), ``ninth`` (1700..), ``tenth``
(1900..) and ``eleventh`` (2100..) served the twelfth, the thirteenth, (two each) the sixteenth
and the seventeenth sessions' candidates, each run once after its adoption rule was written. The
default
selector is judged by its **worst case** across the world types.

Per world type the table also states the **limit**: the cost saved if every configuration within
two questions of the best (exact ties included) — the ones no selector can tell apart from it
before the full data — is run on every question and nothing else is run at all. Where that limit
is below 70 %, the issue's "≥ 70 % saved at ≤ 0.2 pts regret" cannot be met by any selector
that finds the best. That limit charges nothing for ruling out the rest of the field; the
**oracle limit** (:func:`oracle_limit`) does: each configuration is run until its true gap to
the best is one standard error of the paired difference wide. A third section lists the most
any selector of the run saved at <= 0.2 pts regret, and at the anchor's find rate and regret or
better (:func:`attained`): over a scan of settings (``--frontier``), what the world allows in
practice.

Every run's outcome is kept in ``results.json`` (``runs``), and the tables end with a paired
comparison of the default with the anchor (the same worlds, seeds and question orders): the
runs only one of them found, with an exact sign test, and the differences in regret and
savings with 95 % intervals over worlds. ``--render A.json B.json`` pools the runs of several
results files (other world seeds) into that comparison.

Usage::

    .venv/bin/python benchmarks/selection_family.py --split report --world-seeds 3 --seeds 10
    .venv/bin/python benchmarks/selection_family.py --split tuning --selectors regret_race,... \
        --out /tmp/tuning
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from selection_replay import PHI_SELECTORS, Matrices, forbid_non_loopback, run_phi, summarise
from selection_worlds import FAMILY, WORLDS, make_world

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "selection_family"
SPLITS = {
    "tuning": 0,
    "report": 100,
    "holdout": 300,
    "confirm": 500,
    "verify": 700,
    "final": 900,
    "last": 1100,
    "fresh": 1300,
    "eighth": 1500,
    "ninth": 1700,
    "tenth": 1900,
    "eleventh": 2100,
}
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
    "regret_race_v5",
    "regret_race_v6",
    "regret_race_v7",
    "regret_race_v8",
    "regret_race",
    "regret_race_thrifty",
    "regret_race_strata4",
)
FRONTIER: dict[str, tuple[str, dict[str, Any]]] = {
    # --frontier: settings along the savings / regret trade, beside the library's selectors
    "ae_c0.5": ("arm_elimination", {"confidence": 0.5}),
    "ae_c0.75": ("arm_elimination", {"confidence": 0.75}),
    "ae_c1.5": ("arm_elimination", {"confidence": 1.5}),
    "ae_g1.5": ("arm_elimination", {"growth_factor": 1.5}),
    "pr_z0.5": ("paired_race", {"z": 0.5}),
    "pr_z1": ("paired_race", {"z": 1.0}),
    "rr_e3e-4": ("regret_race", {"eta": 3e-4}),
    "rr_e1e-3": ("regret_race", {"eta": 1e-3}),
    "rr_e3e-3": ("regret_race", {"eta": 3e-3}),
    "rr_cp0": ("regret_race", {"cost_power": 0.0}),
    # "ng": no tie guards (points 8-10 of RegretRace off), a plain expected-regret race
    **{
        f"rr_ng_e{eta}": (
            "regret_race",
            {"eta": float(eta), "tie_risk": 0.0, "exact_guard": False, "tie_questions": 0.0},
        )
        for eta in ("1e-4", "3e-4", "5e-4", "1e-3")
    },
}
FRONTIER_SELECTORS = (
    "random,hill_climbing,threshold,epsilon_lucb,arm_elimination,matrix_ucb,matrix_ucb_35,"
    "paired_race,regret_race"
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


def oracle_limit(m: Matrices, z: float = 1.0) -> float:
    """Savings bound of an oracle that knows every configuration's full-data gap to the best,
    ``Delta_i``, and the spread ``s_i`` of their paired per-question differences, and runs each
    only until the gap is ``z`` finite-population standard errors wide (``z = 1``: arm
    elimination's one-standard-error rule), the smallest ``n`` with
    ``Delta_i >= z s_i sqrt((N - n) / (n (N - 1)))``; a configuration level with the best (no
    gap) runs to ``N``, and the best runs as long as the longest. Unlike :func:`limit` it charges
    for ruling out the field, so no selector that needs that much evidence saves more."""
    x = m.accuracy[m.rows]  # space order
    best = m.best()
    n_questions = x.shape[1]
    diff = x[best][None, :] - x
    gap = diff.mean(axis=1)
    spread = diff.var(axis=1, ddof=1) * z * z
    with np.errstate(divide="ignore", invalid="ignore"):
        needed = n_questions * spread / (gap * gap * (n_questions - 1) + spread)
    n = np.where(gap > 1e-12, np.clip(np.ceil(needed - 1e-9), 1, n_questions), n_questions)
    others = np.delete(n, best)
    n[best] = others.max() if others.size else n_questions
    cost = m.cost[m.rows].mean(axis=1)
    return 100.0 * (1 - float((cost * n).sum()) / float(cost.sum() * n_questions))


def _fill_oracle_limits(result: dict[str, Any]) -> None:
    """Results written before :func:`oracle_limit` existed: compute it from their worlds."""
    for kind, w in result["family"].items():
        if "oracle_saved_pct" not in w:
            w["oracle_saved_pct"] = float(
                np.mean(
                    [
                        oracle_limit(Matrices.from_world(make_world(kind, seed=ws)))
                        for ws in result["world_seeds"]
                    ]
                )
            )


def run_family(kinds: list[str], world_seeds: list[int], seeds: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        per: dict[str, list[dict[str, float]]] = {}
        # per selector, per world, per selector seed: [found 0/1, regret pts, saved %]
        outcomes: dict[str, list[list[list[float]]]] = {}
        limits: list[dict[str, float]] = []
        bests: list[float] = []
        started = time.perf_counter()
        for ws in world_seeds:
            m = Matrices.from_world(make_world(kind, seed=ws))
            limits.append({**limit(m), "oracle_saved_pct": oracle_limit(m)})
            bests.append(float(m.accuracy[m.rows[m.best()]].mean()))
            for name, runs in run_phi(m, seeds).items():
                per.setdefault(name, []).append(summarise(m, runs))
                outcomes.setdefault(name, []).append([_outcome(summarise(m, [r])) for r in runs])
        out[kind] = {
            "shape": list(m.shape),
            "best_accuracy": float(np.mean(bests)),
            "indistinguishable": float(np.mean([x["indistinguishable"] for x in limits])),
            "limit_saved_pct": float(np.mean([x["limit_saved_pct"] for x in limits])),
            "oracle_saved_pct": float(np.mean([x["oracle_saved_pct"] for x in limits])),
            "selectors": {
                name: {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}
                for name, rows in per.items()
            },
            "runs": outcomes,
        }
        print(f"{kind}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    return out


def _outcome(one: dict[str, float]) -> list[float]:
    """One run's [found 0/1, regret pts, saved %] (``summarise`` of that run alone)."""
    return [
        one["find_rate"] / 100.0,
        round(one["mean_regret_pts"], 6),
        round(one["cost_saved_pct"], 4),
    ]


# two-sided 95 % quantiles of Student's t, df = 1..30 (beyond: 1.96 + 2.4 / df, within 0.002)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def _t975(df: int) -> float:
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test (McNemar's, on the discordant pairs) of ``wins`` against
    ``losses``."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(ours: list[list[list[float]]], anchor: list[list[list[float]]]) -> dict[str, Any]:
    """The default against the anchor on the same worlds and selector seeds (the same shuffled
    question order): runs that only one of them found (and the sign test of those), and the
    mean differences (ours - anchor) in regret and savings with 95 % intervals over *worlds*
    (the runs of one world are not independent), Student's t with worlds - 1 df."""
    o, a = np.asarray(ours, dtype=float), np.asarray(anchor, dtype=float)  # world x seed x 3
    found_ours = int((o[:, :, 0] > a[:, :, 0]).sum())
    found_anchor = int((a[:, :, 0] > o[:, :, 0]).sum())
    regret = (o[:, :, 1] - a[:, :, 1]).mean(axis=1).tolist()  # per world
    saved = (o[:, :, 2] - a[:, :, 2]).mean(axis=1).tolist()

    def interval(diffs: list[float]) -> list[float]:
        mean = float(np.mean(diffs))
        if len(diffs) < 2:
            return [mean, mean, mean]
        half = _t975(len(diffs) - 1) * float(np.std(diffs, ddof=1)) / math.sqrt(len(diffs))
        return [mean, mean - half, mean + half]

    return {
        "runs": int(o.shape[0] * o.shape[1]),
        "found_only_by_default": found_ours,
        "found_only_by_anchor": found_anchor,
        "sign_test_p": sign_test(found_ours, found_anchor),
        "regret_diff_pts": interval(regret),
        "saved_diff_pts": interval(saved),
    }


def paired_table(family: dict[str, dict[str, Any]]) -> list[str]:
    """Per world type: the paired comparison of the default with the anchor, and which
    differences are significant at 5 % (the sign test; an interval that excludes 0)."""
    lines = [
        f"\n### Paired with {ANCHOR} (the same worlds and selector seeds; {DEFAULT} - {ANCHOR}, "
        "95 % intervals over worlds)\n",
        "| type | runs | found only by the default / only by the anchor (sign test p) "
        "| regret pts | saved pts | significant |",
        "|---|---:|---|---|---|---|",
    ]
    for kind, w in family.items():
        runs = w.get("runs", {})
        if DEFAULT not in runs or ANCHOR not in runs:
            continue
        d = paired(runs[DEFAULT], runs[ANCHOR])
        (r, r_lo, r_hi), (s, s_lo, s_hi) = d["regret_diff_pts"], d["saved_diff_pts"]
        # significant at 5 %: > 0 where the default is better, < 0 where the anchor is
        found = d["found_only_by_default"] - d["found_only_by_anchor"]
        signs = {
            "find": found if d["sign_test_p"] < 0.05 else 0,
            "regret": -r if r_lo > 0 or r_hi < 0 else 0.0,  # lower regret is better
            "savings": s if s_lo > 0 or s_hi < 0 else 0.0,
        }
        better = [name for name, sign in signs.items() if sign > 0]
        worse = [name for name, sign in signs.items() if sign < 0]
        parts = [f"better: {', '.join(better)}"] if better else []
        parts += [f"**worse: {', '.join(worse)}**"] if worse else []
        lines.append(
            f"| {kind} | {d['runs']} | {d['found_only_by_default']} / "
            f"{d['found_only_by_anchor']} (p {d['sign_test_p']:.2g}) | "
            f"{r:+.3f} [{r_lo:+.3f}, {r_hi:+.3f}] | {s:+.2f} [{s_lo:+.2f}, {s_hi:+.2f}] | "
            f"{'; '.join(parts) or 'none'} |"
        )
    return lines


def pooled(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The per-run outcomes of several results files, world after world (their world seeds
    should differ), for the world types and selectors they all have."""
    kinds = [k for k in results[0]["family"] if all(k in r["family"] for r in results)]
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        runs = [r["family"][kind].get("runs", {}) for r in results]
        names = [n for n in runs[0] if all(n in x for x in runs)]
        out[kind] = {"runs": {n: [w for x in runs for w in x[n]] for n in names}}
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


def attained(
    selectors: dict[str, dict[str, float]], regret_pts: float = 0.2, match_anchor: bool = False
) -> tuple[str, float] | None:
    """The selector of this run that saves the most at a mean regret of at most
    ``regret_pts`` (with ``match_anchor``: also at the anchor's find rate and regret or better),
    as (name, saved %); None if none qualifies. Over a scan of settings (``--frontier``) it
    is what the world allows in practice, where :func:`oracle_limit` is what it allows at most."""
    anchor = selectors.get(ANCHOR)
    ok = [
        (r["cost_saved_pct"], name)
        for name, r in selectors.items()
        if r["mean_regret_pts"] <= regret_pts + 1e-9
        and (
            not match_anchor
            or anchor is None
            or (
                r["find_rate"] >= anchor["find_rate"] - 1e-9
                and r["mean_regret_pts"] <= anchor["mean_regret_pts"] + 1e-9
            )
        )
    ]
    if not ok:
        return None
    saved, name = max(ok)
    return name, saved


def frontier(result: dict[str, Any]) -> list[str]:
    """Per world type: the limits beside the most that any selector of this run saved at
    <= 0.2 pts regret, and at the anchor's find rate and regret or better."""
    lines = [
        "\n### What the world allows: limits and the most any selector of this run saved\n",
        "| type | limit % (near-ties only) | oracle limit % | most saved at <= 0.2 pts | "
        "most saved at the anchor's find rate and regret or better |",
        "|---|---:|---:|---|---|",
    ]

    def cell(best: tuple[str, float] | None) -> str:
        return "none" if best is None else f"{best[1]:.1f} ({best[0]})"

    for kind, w in result["family"].items():
        oracle = w.get("oracle_saved_pct")
        lines.append(
            f"| {kind} | {w['limit_saved_pct']:.1f} | "
            f"{'-' if oracle is None else f'{oracle:.1f}'} | {cell(attained(w['selectors']))} | "
            f"{cell(attained(w['selectors'], match_anchor=True))} |"
        )
    return lines


def _shortfall(w: dict[str, Any]) -> str:
    """Why the default misses 70 % at <= 0.2 pts where the limit allows it: whether any selector
    of this run reaches it, and whether one does at the anchor's find rate and regret."""
    anywhere = attained(w["selectors"])
    quality = attained(w["selectors"], match_anchor=True)
    if anywhere is None or anywhere[1] < 70:
        return "no (nor any selector of this run)"
    if quality is None or quality[1] < 70:
        return "no (reached in this run only below the anchor's find rate or regret)"
    return f"no ({quality[0]} reaches it)"


def _oracle_note(w: dict[str, Any]) -> str:
    oracle = w.get("oracle_saved_pct")
    return "" if oracle is None else f"; oracle limit {oracle:.1f} %"


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
            f"{'yes' if target else _shortfall(w) if allowed else 'not allowed (limit < 70 %)'} |"
        )
    return lines


def markdown(result: dict[str, Any]) -> str:
    lines = []
    for kind, w in result["family"].items():
        lines.append(
            f"\n### {kind} ({w['shape'][0]} x {w['shape'][1]}, best {100 * w['best_accuracy']:.2f} %; "
            f"limit {w['limit_saved_pct']:.1f} % saved: {w['indistinguishable']:.1f} configurations "
            f"within two questions of the best{_oracle_note(w)})\n"
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
    lines += frontier(result)
    lines += paired_table(result["family"])
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


def dump(result: dict[str, Any]) -> str:
    """``result`` as indented JSON with each list of numbers on one line (a run's outcome)."""
    text = json.dumps(result, indent=2)
    return (
        re.sub(r"\[\s+([-+\d.eE,\s]+?)\s+\]", lambda m: f"[{' '.join(m[1].split())}]", text) + "\n"
    )


def _candidate(
    parser: argparse.ArgumentParser, spec: str
) -> tuple[str, tuple[str, dict[str, Any]]]:
    """``NAME=ALGO:KEY=VALUE,...`` -> (NAME, (ALGO, {KEY: VALUE})): a number where VALUE reads
    as one, a bool for ``true`` / ``false``, else the word itself (``algorithm=hill_climbing``)."""
    name, _, rest = spec.partition("=")
    algo, _, params = rest.partition(":")

    def value(text: str) -> float | bool | str:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
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
    parser.add_argument(
        "--frontier",
        action="store_true",
        help="the scan of settings along the savings / regret trade (FRONTIER) beside "
        f"{FRONTIER_SELECTORS.replace(',', ', ')} (instead of --selectors)",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--render",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="only rewrite table.md from JSON; with several results files (the same world types, "
        "other world seeds), print the paired comparison of their runs pooled",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        results = [json.loads(path.read_text()) for path in args.render]
        if len(results) > 1:
            print("\n".join(paired_table(pooled(results))))
            return 0
        result = results[0]
        _fill_oracle_limits(result)
        result["worst_case"] = worst_case(result["family"])
        (args.render[0].parent / "table.md").write_text(markdown(result))
        print(markdown(result))
        return 0
    kinds = args.worlds.split(",")
    unknown = set(kinds) - set(WORLDS)
    if unknown:
        parser.error(f"unknown world types {sorted(unknown)}; choose from {sorted(WORLDS)}")
    if args.frontier and args.selectors != parser.get_default("selectors"):
        parser.error("--frontier runs its own selectors; drop --selectors (or --frontier)")
    chosen = (FRONTIER_SELECTORS if args.frontier else args.selectors).split(",")
    if args.frontier:
        PHI_SELECTORS.update(FRONTIER)
        chosen += list(FRONTIER)
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
    (out / "results.json").write_text(dump(result))
    table = markdown(result)
    (out / "table.md").write_text(table)
    print(table)
    print(f"wrote {out / 'results.json'} and {out / 'table.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
