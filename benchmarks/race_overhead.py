"""What ``agent_loop_parallel`` itself costs on top of the models it races.

Every model here is a ``ScriptedProvider`` whose replies wait a known delay, so the ideal
wall-clock of a race is known exactly and anything above it is the race's own overhead
(cloning contexts, tasks, event forwarding, evaluation):

* **race + judge**: branches of 50–500 ms and an LLM judge of 100 ms. Ideal = slowest branch +
  judge. Target: within 5 %.
* **early accept**: a verifier with ``early_accept=True``; the fastest *passing* branch answers
  in 150 ms while faster failing and slower branches exist. Ideal = that branch's delay.
  Target: within 10 %.
* **200 branches**: 200 concurrent branches with delays spread over 50–500 ms, majority vote;
  every branch must succeed, and nothing may reach the event loop's exception handler. Run
  twice: with the process-wide limiter's caps raised (so the figure is the race's overhead),
  and with the default limiter (32 calls in flight per model): there the calls queue on the
  limiter by design and the wall-clock shows it.

One untimed warm-up race runs first (imports and first-use validation are not race overhead).

Each scenario runs ``--repeats`` times; the table shows the median (and worst) overhead. The
load average at start is recorded: other processes share the cores.

Run: ``.venv/bin/python benchmarks/race_overhead.py`` (writes
``benchmarks/results/race_overhead/results.json``; ``--out DIR`` writes under DIR instead).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _bench import add_out_option
from phi_core.loop import AgentContext, AgentLoopConfig
from phi_core.parallel import (
    LlmJudgeEvaluation,
    MajorityVoteEvaluation,
    RegexCheck,
    VerifierEvaluation,
    agent_loop_parallel,
)
from phi_core.providers import RetryPolicy
from phi_core.providers.limiter import Limiter, default_limiter, set_default_limiter
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Usage

RESULTS = Path(__file__).parent / "results" / "race_overhead"


def scripted(text: str, delay: float, name: str = "bench") -> AgentLoopConfig:
    reply = Reply(text, delay=delay, usage=Usage(input=20, output=10))
    return AgentLoopConfig(
        model=f"{name}:m",
        provider=ScriptedProvider(default=reply, name=name),
        retry=RetryPolicy.none(),
    )


async def race_with_judge(delays_ms: list[int], judge_ms: int) -> dict[str, Any]:
    configs = [scripted(f"answer {d}", d / 1000) for d in delays_ms]
    judge = LlmJudgeEvaluation(scripted("1", judge_ms / 1000, name="judge"))
    events: list[Any] = []
    start = time.perf_counter()
    result = await agent_loop_parallel(
        "question", AgentContext(), configs, judge, events=events.append
    )
    wall = time.perf_counter() - start
    assert result.status == "ok" and not result.decision.fallback, result.decision
    ideal = (max(delays_ms) + judge_ms) / 1000
    return {"wall_s": wall, "ideal_s": ideal, "events": len(events)}


async def early_accept(pass_ms: int) -> dict[str, Any]:
    branches = [
        ("wrong 41", 60),  # faster, fails the check
        ("wrong 40", 100),  # faster, fails the check
        ("right 42", pass_ms),  # the fastest passing branch
        ("right 42 too", 300),
        ("right 42 also", 500),
    ]
    configs = [scripted(text, ms / 1000) for text, ms in branches]
    verifier = VerifierEvaluation(RegexCheck(r"\b42\b"), early_accept=True)
    start = time.perf_counter()
    result = await agent_loop_parallel("question", AgentContext(), configs, verifier)
    wall = time.perf_counter() - start
    assert result.selected_index == 2 and result.decision.early_accept, result.decision
    cancelled = sum(1 for o in result.outcomes if o.status == "cancelled")
    return {"wall_s": wall, "ideal_s": pass_ms / 1000, "cancelled_siblings": cancelled}


async def many_branches(count: int) -> dict[str, Any]:
    delays = [0.05 + 0.45 * i / (count - 1) for i in range(count)]
    configs = [scripted("Paris" if i % 3 else "Lyon", d) for i, d in enumerate(delays)]
    loop = asyncio.get_running_loop()
    problems: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: problems.append(context))
    events: list[Any] = []
    try:
        start = time.perf_counter()
        result = await agent_loop_parallel(
            "question", AgentContext(), configs, MajorityVoteEvaluation(), events=events.append
        )
        wall = time.perf_counter() - start
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    errors = [o for o in result.outcomes if not o.ok]
    agent_ends = sum(1 for e in events if e.type == "agent_end")
    return {
        "wall_s": wall,
        "ideal_s": max(delays),
        "branches": count,
        "failed_branches": len(errors),
        "agent_end_events": agent_ends,
        "loop_errors": len(problems),
        "leftover_tasks": len(leftover),
        "winner_answer": result.text,
    }


def summarise(name: str, runs: list[dict[str, Any]], target_pct: float | None) -> dict[str, Any]:
    overheads = [(r["wall_s"] - r["ideal_s"]) / r["ideal_s"] * 100 for r in runs]
    median = statistics.median(overheads)
    return {
        "scenario": name,
        "ideal_s": runs[0]["ideal_s"],
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
        "median_overhead_pct": median,
        "worst_overhead_pct": max(overheads),
        "target_pct": target_pct,
        "meets_target": None if target_pct is None else median <= target_pct,
        "runs": runs,
    }


async def main(repeats: int, branches: int) -> dict[str, Any]:
    delays = [50, 100, 200, 350, 500]
    await race_with_judge(delays, 100)  # warm-up, not measured
    shared = default_limiter()
    set_default_limiter(Limiter(per_provider=10_000, per_model=10_000))
    rows = [
        summarise(
            "race + judge (5 branches 50-500 ms, judge 100 ms)",
            [await race_with_judge(delays, 100) for _ in range(repeats)],
            5.0,
        ),
        summarise(
            "early accept (fastest passing branch 150 ms)",
            [await early_accept(150) for _ in range(repeats)],
            10.0,
        ),
    ]
    big = [await many_branches(branches) for _ in range(repeats)]
    row = summarise(f"{branches} concurrent branches (50-500 ms), vote", big, None)
    row["all_ok"] = all(
        r["failed_branches"] == 0
        and r["loop_errors"] == 0
        and r["leftover_tasks"] == 0
        and r["agent_end_events"] == branches
        for r in big
    )
    rows.append(row)
    set_default_limiter(shared)
    limited = [await many_branches(branches) for _ in range(max(1, repeats // 2))]
    row = summarise(f"{branches} branches, default limiter (32/model)", limited, None)
    row["all_ok"] = all(r["failed_branches"] == 0 and r["loop_errors"] == 0 for r in limited)
    rows.append(row)
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "repeats": repeats,
        "scenarios": rows,
    }


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{'scenario':<52} {'ideal s':>8} {'wall s':>8} {'median %':>9} {'worst %':>8} {'target':>7}"
    )
    for row in report["scenarios"]:
        target = "-" if row["target_pct"] is None else f"<={row['target_pct']:.0f}%"
        verdict = "" if row["meets_target"] is None else ("ok" if row["meets_target"] else "MISS")
        if "all_ok" in row:
            verdict = "ok" if row["all_ok"] else "ERRORS"
        print(
            f"{row['scenario']:<52} {row['ideal_s']:>8.3f} {row['median_wall_s']:>8.3f} "
            f"{row['median_overhead_pct']:>9.2f} {row['worst_overhead_pct']:>8.2f} "
            f"{target:>7} {verdict}"
        )
    print(f"load average at start: {report['loadavg_at_start']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--branches", type=int, default=200)
    add_out_option(parser, RESULTS)
    args = parser.parse_args()
    report = asyncio.run(main(args.repeats, args.branches))
    print_table(report)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "results.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
