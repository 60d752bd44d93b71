"""How often does each race strategy pick a right answer over a wrong one? Measured on real answers.

Data: the shipped RouterBench split (``benchmarks/data/routerbench``: ARC-Challenge, Winogrande,
MBPP; 11 models' recorded answers with recorded correctness). Only **disagreement prompts** are
used: prompts where some models were right and some wrong. For each prompt and each k (2 and 3)
a seeded draw presents k recorded answers to every strategy, at least one right and one wrong
(one right and one wrong answer drawn first, for k = 3 a third from the other nine, then the k
shuffled). Each strategy's pick is scored against the recorded correctness.

What is reported per strategy, judge and k (the JSON has everything, the table the headline):

* **accuracy**: share of instances where the pick (under the drawn order) was a right answer,
  with a 95 % Wilson interval;
* **position consistency**: share of instances with the same pick under every order tried (the
  k cyclic rotations of the drawn order; for two answers, both orders). Judge-free strategies
  and the single-order judge are run under every rotation; ``judge-debiased`` aggregates those
  same rotations, so it is order-invariant by construction (reported as 1.0, marked ``*``);
  ``pairwise`` and ``rubric`` run once (pairwise asks both orders of every pair internally, and
  its **flip rate** is the share of pairs whose two verdicts disagreed);
* **flip rate** (other strategies): share of non-drawn orders whose pick differs from the drawn
  order's pick;
* **tie** and **fallback** rates, and per decision: judge **calls**, judge **tokens**, judge
  **dollars** (the provider's pricing; $0 for the embedded model) and **wall time**.

Baselines: ``first`` (the first answer shown), ``longest`` (most characters), ``random``
(seeded), ``oracle`` (a right answer whenever one is shown: 100 % by construction of the set).
The built-in judge-free pickers (``pick-first``, ``token-efficient``, ``elaborate``, ``vote``,
``exec-vote``, ``consensus``) get the recorded answers as race outcomes (usage: 4 characters a
token, cost: the recorded dollars, which break ties). The judges (``judge``, ``judge-debiased``,
``pairwise``, ``rubric``) run the model given with ``--judge`` (default ``local:smollm2``, the
embedded model; any ``provider:model`` with a key works) configured exactly as ``phi race``
configures them (``plan_race``), except ``--judge-max-tokens`` caps the reply.

Runs are incremental: every decision is appended to ``records.jsonl`` as it is made and a rerun
skips what is already there, so a stopped run is still usable and ``--report`` rebuilds the table,
``results.json`` and ``judge_bench.png`` from the records alone.

Run (judge-free, ~1 min):   python benchmarks/judge_bench.py --no-judge --limit 300
Run (embedded judge):       PHI_LOCAL_THREADS=1 python benchmarks/judge_bench.py --limit 300 \\
                                --judge local:smollm2 --only-judges
Report only:                python benchmarks/judge_bench.py --report
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import os
import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phi_core.cancel import CancelToken
from phi_core.config import plan_race
from phi_core.events import AgentEnd, AgentStart, Emitter, Warning
from phi_core.loop import AgentContext, AgentLoopConfig
from phi_core.parallel import (
    ConsensusEvaluation,
    ElaborateEvaluation,
    EvaluationDecision,
    ExecVoteEvaluation,
    LlmJudgeEvaluation,
    MajorityVoteEvaluation,
    PairwiseJudgeEvaluation,
    ParallelLoopOutcome,
    PickFirstEvaluation,
    RubricJudgeEvaluation,
    TokenEfficientEvaluation,
)
from phi_core.parallel._strategies import BaseEvaluation
from phi_core.providers.base import ModelConfig
from phi_core.types import AssistantMessage, TextContent, Usage, UserMessage
from routing_replay import _literal_first  # the split's prompt/answer cells: one way to read

HERE = Path(__file__).parent
DATA = HERE / "data" / "routerbench"
OUT = HERE / "results" / "judge"
Z95 = 1.959963984540054
JUDGE_FREE = ("pick-first", "token-efficient", "elaborate", "vote", "exec-vote", "consensus")
BASELINES = ("first", "longest", "random", "oracle")
JUDGED = ("judge", "judge-debiased", "pairwise", "rubric")
REPLY_TOKENS = {"pairwise": 48, "rubric": 64}
"""Reply cap per answer for the JSON judges (a reason and the verdict or scores)."""


# ---------------------------------------------------------------------------- data


@dataclass
class Prompt:
    sample_id: str
    task: str
    prompt: str
    models: list[str]
    texts: list[str]
    correct: list[bool]
    cost: list[float]


@dataclass
class Instance:
    prompt: Prompt
    k: int
    shown: list[int]
    """Model indices in the drawn presentation order."""

    @property
    def key(self) -> str:
        return f"{self.prompt.sample_id}|k{self.k}"

    def rotation(self, r: int) -> list[int]:
        return self.shown[r:] + self.shown[:r]


def load_prompts(data_dir: Path) -> list[Prompt]:
    """Every prompt of the split whose recorded answers are right for some models, wrong for
    others (the disagreement prompts)."""
    csv.field_size_limit(1 << 30)
    files = sorted(data_dir.glob("*.csv"))
    if not files:
        raise SystemExit(f"No CSV files in {data_dir}; pass --data DIR with RouterBench CSVs.")
    out: list[Prompt] = []
    for path in files:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        skip = {"sample_id", "prompt", "eval_name", "oracle_model_to_route_to"}
        models = [c for c in rows[0] if "|" not in c and c not in skip]
        for r in rows:
            correct = [float(r[m]) >= 0.5 for m in models]
            if all(correct) or not any(correct):
                continue
            out.append(
                Prompt(
                    sample_id=f"{r['eval_name']}:{r['sample_id']}",
                    task=r["eval_name"],
                    prompt=_literal_first(r["prompt"]),
                    models=models,
                    texts=[_literal_first(r.get(f"{m}|model_response", "")) for m in models],
                    correct=correct,
                    cost=[float(r[f"{m}|total_cost"]) for m in models],
                )
            )
    return out


def draw(prompts: list[Prompt], ks: Sequence[int], seed: int, limit: int | None) -> list[Instance]:
    """``limit`` prompts (seeded shuffle) x each k: k answers, >= 1 right and >= 1 wrong."""
    order = list(prompts)
    random.Random(seed).shuffle(order)
    chosen = order[:limit] if limit else order
    out: list[Instance] = []
    for p in chosen:
        for k in ks:
            rng = random.Random(f"{seed}|{p.sample_id}|{k}")
            right = [i for i, c in enumerate(p.correct) if c]
            wrong = [i for i, c in enumerate(p.correct) if not c]
            shown = [rng.choice(right), rng.choice(wrong)]
            rest = [i for i in range(len(p.models)) if i not in shown]
            shown += rng.sample(rest, k - 2)
            rng.shuffle(shown)
            out.append(Instance(p, k, shown))
    return out


# ---------------------------------------------------------------------------- running


def outcomes_for(inst: Instance, order: list[int], session: str) -> list[ParallelLoopOutcome]:
    """The shown answers as race outcomes, branch index = position in ``order``."""
    context = AgentContext(session_id=session)
    result = []
    for position, m in enumerate(order):
        text = inst.prompt.texts[m]
        message = AssistantMessage(content=[TextContent(text=text)])
        result.append(
            ParallelLoopOutcome(
                config_id=inst.prompt.models[m],
                usage=Usage(output=max(1, len(text) // 4)),
                cost_usd=inst.prompt.cost[m],
                config_index=position,
                loop_id=f"{session}.replay.{position}",
                context=context,
                config=AgentLoopConfig(
                    model=ModelConfig(provider="replay", id=inst.prompt.models[m], api="scripted")
                ),
                new_messages=[message],
                race_size=len(order),
            )
        )
    return result


@dataclass
class Run:
    decision: EvaluationDecision
    wall_s: float
    ends: dict[str, AgentEnd]
    starts: dict[str, AgentStart]
    warnings: int


async def decide(strategy: BaseEvaluation, inst: Instance, order: list[int], session: str) -> Run:
    ends: dict[str, AgentEnd] = {}
    starts: dict[str, AgentStart] = {}
    warnings = 0

    def sink(event: Any) -> None:
        nonlocal warnings
        if isinstance(event, AgentEnd):
            ends[event.loop_id] = event
        elif isinstance(event, AgentStart):
            starts[event.loop_id] = event
        elif isinstance(event, Warning):
            warnings += 1

    prompts = [UserMessage(content=[TextContent(text=inst.prompt.prompt)])]
    started = time.perf_counter()
    decision = await strategy.evaluate(  # type: ignore[attr-defined]
        prompts,
        outcomes_for(inst, order, session),
        events=Emitter(sink),
        cancel=CancelToken(),
    )
    return Run(decision, time.perf_counter() - started, ends, starts, warnings)


def picked(order: list[int], decision: EvaluationDecision) -> int | None:
    return None if decision.index is None else order[decision.index]


def judge_free(name: str) -> BaseEvaluation:
    return {
        "pick-first": PickFirstEvaluation,
        "token-efficient": TokenEfficientEvaluation,
        "elaborate": ElaborateEvaluation,
        "vote": MajorityVoteEvaluation,
        "exec-vote": ExecVoteEvaluation,
        "consensus": ConsensusEvaluation,
    }[name]()


def baseline(name: str, inst: Instance, order: list[int]) -> int:
    p = inst.prompt
    if name == "first":
        return order[0]
    if name == "longest":
        return max(order, key=lambda m: (len(p.texts[m]), -order.index(m)))
    if name == "random":
        return random.Random(f"random|{inst.key}|{order}").choice(order)
    return next(m for m in inst.shown if p.correct[m])  # oracle: a right answer, any order


def record(
    inst: Instance, strategy: str, judge: str | None, picks: list[int | None], **kw: Any
) -> dict[str, Any]:
    return {
        "key": inst.key,
        "task": inst.prompt.task,
        "k": inst.k,
        "strategy": strategy,
        "judge": judge,
        "shown": [inst.prompt.models[m] for m in inst.shown],
        "picks": [None if m is None else inst.prompt.models[m] for m in picks],
        "correct": [None if m is None else inst.prompt.correct[m] for m in picks],
        **kw,
    }


async def run_judge_free(inst: Instance, names: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    orders = [inst.rotation(r) for r in range(inst.k)]
    for name in BASELINES:
        picks: list[int | None] = [baseline(name, inst, o) for o in orders]
        rows.append(record(inst, name, None, picks, calls=0, tokens=0, cost=0.0, wall_s=0.0))
    for name in names:
        strategy = judge_free(name)
        runs = [await decide(strategy, inst, o, f"jb-{name}") for o in orders]
        rows.append(
            record(
                inst,
                name,
                None,
                [picked(o, r.decision) for o, r in zip(orders, runs, strict=True)],
                tie=runs[0].decision.tie,
                fallback=runs[0].decision.fallback,
                warnings=runs[0].warnings,
                method=runs[0].decision.details.get("method"),
                calls=0,
                tokens=0,
                cost=0.0,
                wall_s=runs[0].wall_s,
            )
        )
    return rows


def judge_strategies(judge: str, max_tokens: int, k: int) -> dict[str, BaseEvaluation]:
    """The judge strategies as ``phi race`` builds them for ``judge`` (``plan_race``)."""
    built: dict[str, BaseEvaluation] = {}
    for name in ("judge", "pairwise", "rubric"):
        plan = plan_race(models=[judge] * k, judge=judge, strategy=name)
        assert plan.judge_config is not None
        config = AgentLoopConfig(
            model=plan.judge_config.model,
            provider=plan.judge_config.provider,
            temperature=0.0,
            max_tokens=max_tokens if name == "judge" else max(max_tokens, REPLY_TOKENS[name] * k),
            response_format=plan.judge_config.response_format,
        )
        if name == "judge":
            window = config.model_config().context_window
            built[name] = LlmJudgeEvaluation(config, max_context_tokens=window, orders=k)
        elif name == "pairwise":
            built[name] = PairwiseJudgeEvaluation(config)
        else:
            built[name] = RubricJudgeEvaluation(config, seed=0)
    return built


def _call_figures(run: Run, loop_ids: list[str]) -> tuple[int, float, float]:
    tokens = sum(run.ends[i].usage.total for i in loop_ids if i in run.ends)
    cost = sum(run.ends[i].cost_usd for i in loop_ids if i in run.ends)
    wall = sum(
        (run.ends[i].timestamp - run.starts[i].timestamp) / 1000
        for i in loop_ids
        if i in run.ends and i in run.starts
    )
    return tokens, cost, wall


async def run_judged(
    inst: Instance,
    judge: str,
    max_tokens: int,
    done: set[tuple[str, str, str | None]],
    *,
    costly: bool = True,
) -> list[dict[str, Any]]:
    """``judge`` and ``judge-debiased`` (one set of rotations serves both); ``pairwise`` and
    ``rubric`` too when ``costly``."""
    rows: list[dict[str, Any]] = []
    strategies = judge_strategies(judge, max_tokens, inst.k)
    order = inst.shown
    if (inst.key, "judge", judge) not in done:
        run = await decide(strategies["judge"], inst, order, "jb-judge")
        d = run.decision
        orders = d.details.get("orders") or [list(range(inst.k))]
        per_order = [None if p is None else order[p] for p in d.details.get("picks") or [d.index]]
        first_id = d.details.get("judge_loop_id")
        tokens1, cost1, wall1 = _call_figures(run, [first_id] if first_id else [])
        unusable_first = per_order[0] is None
        rows.append(
            record(
                inst,
                "judge",
                judge,
                per_order,
                tie=False,
                fallback=unusable_first,
                calls=1,
                tokens=tokens1,
                cost=cost1,
                wall_s=wall1,
                orders=len(orders),
            )
        )
        rows.append(
            record(
                inst,
                "judge-debiased",
                judge,
                [picked(order, d)],
                tie=d.tie,
                fallback=d.fallback,
                warnings=run.warnings,
                follows_position=d.details.get("follows_position"),
                position_consistency=d.details.get("position_consistency"),
                calls=d.details.get("judge_calls", 0),
                tokens=d.usage.total,
                cost=d.cost_usd,
                wall_s=run.wall_s,
            )
        )
    for name in ("pairwise", "rubric") if costly else ():
        if (inst.key, name, judge) in done:
            continue
        run = await decide(strategies[name], inst, order, f"jb-{name}")
        d = run.decision
        rows.append(
            record(
                inst,
                name,
                judge,
                [picked(order, d)],
                tie=d.tie,
                fallback=d.fallback,
                warnings=run.warnings,
                flip_rate=d.details.get("flip_rate"),
                pairs=len(d.details.get("pairs") or []),
                flips=sum(1 for p in d.details.get("pairs") or [] if p.get("flipped")),
                calls=d.details.get("judge_calls", len(run.ends)),
                tokens=d.usage.total,
                cost=d.cost_usd,
                wall_s=run.wall_s,
            )
        )
    return rows


# ---------------------------------------------------------------------------- report


def wilson(successes: int, n: int) -> tuple[float, float]:
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str | None, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["strategy"], r["judge"], r["k"])].append(r)
    out = []
    for (strategy, judge, k), rs in sorted(groups.items(), key=lambda g: (g[0][2], g[0][0])):
        n = len(rs)
        hits = sum(1 for r in rs if r["correct"][0])
        multi = [r for r in rs if len(r["picks"]) > 1]
        consistency: float | None = None
        flip: float | None = None
        if multi:
            consistency = sum(1 for r in multi if len(set(r["picks"])) == 1) / len(multi)
            flip = sum(
                sum(1 for p in r["picks"][1:] if p != r["picks"][0]) / (len(r["picks"]) - 1)
                for r in multi
            ) / len(multi)
        elif strategy == "judge-debiased":
            consistency, flip = 1.0, 0.0  # aggregated over every rotation: invariant
        if strategy == "pairwise":
            pairs = sum(r.get("pairs") or 0 for r in rs)
            flip = sum(r.get("flips") or 0 for r in rs) / pairs if pairs else None
        # How often the pick was the answer shown first, over every order tried (rotation j
        # shows answer j first).
        tried = [(p, r["shown"][j]) for r in rs for j, p in enumerate(r["picks"])]
        first_share = sum(1 for p, first in tried if p == first) / len(tried)
        low, high = wilson(hits, n)
        out.append(
            {
                "strategy": strategy,
                "judge": judge,
                "k": k,
                "n": n,
                "accuracy": hits / n,
                "ci95": [low, high],
                "position_consistency": consistency,
                "consistency_by_construction": strategy == "judge-debiased",
                "flip_rate": flip,
                "picked_first_shown": first_share,
                "tie_rate": sum(1 for r in rs if r.get("tie")) / n,
                "fallback_rate": sum(1 for r in rs if r.get("fallback")) / n,
                "calls": sum(r.get("calls") or 0 for r in rs) / n,
                "tokens": sum(r.get("tokens") or 0 for r in rs) / n,
                "dollars": sum(r.get("cost") or 0.0 for r in rs) / n,
                "wall_s": sum(r.get("wall_s") or 0.0 for r in rs) / n,
            }
        )
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def table(summary: list[dict[str, Any]]) -> str:
    head = (
        "| k | strategy | judge | n | accuracy (95% CI) | pos. consistency | flip rate |"
        " picked 1st shown | ties | fallbacks | calls | tokens | $ | wall s |"
    )
    lines = [head, "|" + "---|" * 14]
    for s in summary:
        star = "*" if s["consistency_by_construction"] else ""
        lines.append(
            f"| {s['k']} | {s['strategy']} | {s['judge'] or '–'} | {s['n']} | "
            f"{100 * s['accuracy']:.1f}% ({100 * s['ci95'][0]:.0f}–{100 * s['ci95'][1]:.0f}) | "
            f"{_pct(s['position_consistency'])}{star} | {_pct(s['flip_rate'])} | "
            f"{_pct(s['picked_first_shown'])} | "
            f"{_pct(s['tie_rate'])} | {_pct(s['fallback_rate'])} | {s['calls']:.1f} | "
            f"{s['tokens']:.0f} | {s['dollars']:.5f} | {s['wall_s']:.2f} |"
        )
    return "\n".join(lines)


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (the `plot` extra): no PNG written", file=sys.stderr)
        return
    ks = sorted({s["k"] for s in summary})
    fig, axes = plt.subplots(1, len(ks), figsize=(7 * len(ks), 6), squeeze=False)
    for ax, k in zip(axes[0], ks, strict=True):
        rows = sorted((s for s in summary if s["k"] == k), key=lambda s: s["accuracy"])
        labels = [
            s["strategy"] + (f" [{s['judge']}]" if s["judge"] else "") + f" (n={s['n']})"
            for s in rows
        ]
        acc = [100 * s["accuracy"] for s in rows]
        err = [
            [max(0.0, 100 * (s["accuracy"] - s["ci95"][0])) for s in rows],
            [max(0.0, 100 * (s["ci95"][1] - s["accuracy"])) for s in rows],
        ]
        colours = ["tab:gray" if s["strategy"] in BASELINES else "tab:blue" for s in rows]
        for i, s in enumerate(rows):
            if s["judge"]:
                colours[i] = "tab:orange"
        ax.barh(labels, acc, xerr=err, color=colours)
        chance = [s for s in rows if s["strategy"] == "random"]
        if chance:
            ax.axvline(100 * chance[0]["accuracy"], color="k", ls=":", lw=1)
        ax.set_xlim(0, 100)
        ax.set_xlabel("picked a right answer (%), 95% Wilson CI")
        ax.set_title(f"k = {k} answers shown")
    fig.suptitle(
        "Judge benchmark on RouterBench disagreement prompts (grey: baselines, orange: LLM judge)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(out: Path) -> list[dict[str, Any]]:
    """``results.json`` + ``judge_bench.png`` from the records, and the tables printed: every
    strategy on all its instances, then, per judge, every strategy on the instances that judge
    covered (the same prompts: the comparison that decides the defaults)."""
    rows = read_records(out / "records.jsonl")
    summary = summarise(rows)
    paired: dict[str, list[dict[str, Any]]] = {}
    for judge in sorted({r["judge"] for r in rows if r["judge"]}):
        keys = {r["key"] for r in rows if r["judge"] == judge and r["strategy"] == "judge"}
        paired[judge] = summarise(
            [r for r in rows if r["key"] in keys and r["judge"] in (None, judge)]
        )
    (out / "results.json").write_text(
        json.dumps({"summary": summary, "paired": paired}, indent=2) + "\n"
    )
    plot(next(iter(paired.values())) if paired else summary, out / "judge_bench.png")
    print("All instances:")
    print(table(summary))
    for judge, rows_of_judge in paired.items():
        print(f"\nOn the instances judged by {judge}:")
        print(table(rows_of_judge))
    return summary


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a stopped run
    return rows


# ---------------------------------------------------------------------------- main


async def main(args: argparse.Namespace) -> None:
    out: Path = args.out
    records = out / "records.jsonl"
    done = {(r["key"], r["strategy"], r["judge"]) for r in read_records(records)}
    instances = draw(load_prompts(args.data), args.k, args.seed, args.limit)
    print(f"{len(instances)} instances ({len(instances) // len(args.k)} prompts)", file=sys.stderr)
    names = [s for s in JUDGE_FREE if s in args.strategies]
    started = time.monotonic()
    with records.open("a") as fh:

        def write(rows: list[dict[str, Any]]) -> None:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
            fh.flush()

        if not args.only_judges:
            for inst in instances:
                if (inst.key, "oracle", None) in done:
                    continue
                write(await run_judge_free(inst, names))
        for judge in [] if args.no_judge else args.judge:
            for n, inst in enumerate(instances, 1):
                costly = (n - 1) // len(args.k) % args.costly_every == 0
                write(await run_judged(inst, judge, args.judge_max_tokens, done, costly=costly))
                if n % 10 == 0:
                    rate = (time.monotonic() - started) / n
                    print(f"{judge}: {n}/{len(instances)} ({rate:.1f} s each)", file=sys.stderr)
    report(out)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--limit", type=int, default=300, help="disagreement prompts (0: all)")
    parser.add_argument("--k", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--judge", nargs="+", default=["local:smollm2"], help="provider:model judges"
    )
    parser.add_argument("--judge-max-tokens", type=int, default=8)
    parser.add_argument("--strategies", nargs="+", default=list(JUDGE_FREE))
    parser.add_argument(
        "--costly-every",
        type=int,
        default=1,
        help="run pairwise and rubric (the slow judges) on every N-th prompt only",
    )
    parser.add_argument("--no-judge", action="store_true", help="judge-free strategies only")
    parser.add_argument("--only-judges", action="store_true", help="skip the judge-free ones")
    parser.add_argument("--report", action="store_true", help="rebuild the report from records")
    args = parser.parse_args(argv)
    if any(k < 2 for k in args.k):
        parser.error("--k values must be >= 2 (a race needs two answers to disagree)")
    if args.costly_every < 1:
        parser.error("--costly-every must be >= 1")
    if args.limit < 0:
        parser.error("--limit must be >= 0")
    return args


if __name__ == "__main__":
    os.environ.setdefault("PHI_LOCAL_THREADS", "1")
    os.environ.setdefault("PHI_LOCAL_POOL_SIZE", "1")
    options = parse()
    options.out.mkdir(parents=True, exist_ok=True)
    if options.report:
        report(options.out)
    else:
        asyncio.run(main(options))
