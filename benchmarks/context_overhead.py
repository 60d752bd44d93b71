"""What default-on context management costs per model call (issue 16).

Compaction is on by default, so every turn measures the request (the model's last reported usage
plus estimates of what was added since) and checks the trigger. This benchmark runs one-turn
``agent_loop`` calls against the scripted provider (no network, no model: only the loop's own
CPU) over histories of 0, 100 and 1,000 messages, with ``compaction=CompactionConfig()`` (the
default) and with ``compaction=None``, and reports the median CPU time per call of each and the
difference. The window is large enough that nothing is compacted: this is the price of
*watching* the context, paid on every call.

A second row per history size uses a window small enough that every call compacts (tiers L1-L3
over the whole history), to show what an actual compaction costs.

Run: ``.venv/bin/python benchmarks/context_overhead.py`` (about a minute). Writes
``benchmarks/results/context_overhead/results.json`` (``--out DIR`` writes under DIR instead).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from _bench import add_out_option
from phi_core.context import CompactionConfig
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import ModelConfig
from phi_core.testing import ScriptedProvider
from phi_core.types import AgentMessage, AssistantMessage, TextContent, UserMessage

RESULTS = Path(__file__).parent / "results" / "context_overhead"
SIZES = (0, 100, 1_000)
CALLS = 60
ROUNDS = 5


def history(messages: int) -> list[AgentMessage]:
    out: list[AgentMessage] = []
    for n in range(messages // 2):
        out.append(UserMessage.text(f"question {n} " + "words " * 40))
        out.append(AssistantMessage(content=[TextContent(text=f"answer {n} " + "more " * 60)]))
    return out


async def cpu_per_call(
    base: list[AgentMessage], compaction: CompactionConfig | None, window: int
) -> float:
    model = ModelConfig(provider="bench", id="m", api="scripted", context_window=window)
    provider = ScriptedProvider(default="ok")
    config = AgentLoopConfig(model=model, provider=provider, compaction=compaction)
    samples: list[float] = []
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(CALLS):
            await agent_loop("next", AgentContext(messages=list(base)), config)
        samples.append((time.process_time() - started) / CALLS)
    return statistics.median(samples) * 1e6


async def main() -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for size in SIZES:
        base = history(size)
        off = await cpu_per_call(base, None, 10_000_000)
        watching = await cpu_per_call(base, CompactionConfig(), 10_000_000)
        compacting = await cpu_per_call(base, CompactionConfig(), 4_000) if size else watching
        rows.append(
            {
                "history_messages": size,
                "off_us": round(off, 1),
                "on_no_compaction_us": round(watching, 1),
                "watch_overhead_us": round(watching - off, 1),
                "on_compacting_us": round(compacting, 1),
            }
        )
    print(f"{'messages':>9} {'off µs':>9} {'on µs':>9} {'+watch µs':>10} {'compacting µs':>14}")
    for r in rows:
        print(
            f"{r['history_messages']:>9} {r['off_us']:>9} {r['on_no_compaction_us']:>9} "
            f"{r['watch_overhead_us']:>10} {r['on_compacting_us']:>14}"
        )
    return {
        "calls_per_round": CALLS,
        "rounds": ROUNDS,
        "rows": rows,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_out_option(parser, RESULTS)
    args = parser.parse_args()
    result = asyncio.run(main())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
