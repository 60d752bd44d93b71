"""What OpenTelemetry spans cost per agent run, and what they cost when off (issue 19 point 5).

Each run is one ``agent_loop`` call against the scripted provider (no network, no model: only
phi-core's own CPU): a tool call, the tool, then the answer — two ``chat`` spans, one
``execute_tool`` span and the ``invoke_agent`` span when spans are on. Rows:

- ``off``: nothing instrumented (the default; the emitters stay idle when nobody listens);
- ``observed, no spans``: an observer that does nothing (the price of the loop building its
  events once somebody listens — the spans' share is the difference to the next row);
- ``on, no processor``: ``instrument()`` with an SDK tracer provider that has no span processor
  (events plus building the spans);
- ``on, batch export``: plus a ``BatchSpanProcessor`` feeding an exporter that drops the spans
  (the whole SDK pipeline short of the network);
- ``on, batch export, content``: the same with ``capture_content=True``.

Run: ``.venv/bin/python benchmarks/otel_overhead.py`` (under a minute). Writes
``benchmarks/results/otel/results.json`` (``--out DIR`` writes under DIR instead).
``--off-only`` measures only the ``off`` row and imports nothing from ``phi_core.telemetry``, so
it also runs against a checkout without it (to compare the cost of spans being off with the code
before they existed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _bench import add_out_option
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import ModelConfig, RetryPolicy
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import tool

RESULTS = Path(__file__).parent / "results" / "otel"
RUNS = 200
ROUNDS = 7


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers (async: a sync tool's thread hand-off would swamp what is measured)."""
    return a + b


def config() -> AgentLoopConfig:
    script = [Reply(tool_calls=[call("add", {"a": 1, "b": 2})]), Reply("It is 3.", chunks=4)]
    provider = ScriptedProvider(script * (RUNS * ROUNDS + 1))
    model = ModelConfig(provider="bench", id="m", api="scripted")
    return AgentLoopConfig(model=model, provider=provider, retry=RetryPolicy.none())


async def cpu_per_run() -> float:
    """Median CPU microseconds per run over ``ROUNDS`` rounds of ``RUNS`` runs."""
    loop_config = config()
    samples: list[float] = []
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(RUNS):
            await agent_loop("What is 1 + 2?", AgentContext(tools=[add]), loop_config)
        samples.append((time.process_time() - started) / RUNS)
    return statistics.median(samples) * 1e6


class Discard:
    """A span exporter that drops what it gets (the network is not what is measured)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


async def instrumented(processor: bool, content: bool) -> tuple[float, int]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from phi_core.telemetry import instrument

    provider = TracerProvider()
    sink = Discard()
    if processor:
        provider.add_span_processor(BatchSpanProcessor(sink))  # type: ignore[arg-type]
    with instrument(tracer_provider=provider, capture_content=content):
        cost = await cpu_per_run()
    provider.shutdown()
    return cost, sink.spans


async def main(off_only: bool) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [
        {"setting": "off", "cpu_us_per_run": round(await cpu_per_run(), 1)}
    ]
    if not off_only:
        from phi_core.events import add_observer

        remove = add_observer(lambda event: None)
        rows.append(
            {"setting": "observed, no spans", "cpu_us_per_run": round(await cpu_per_run(), 1)}
        )
        remove()
        for name, processor, content in (
            ("on, no processor", False, False),
            ("on, batch export", True, False),
            ("on, batch export, content", True, True),
        ):
            cost, exported = await instrumented(processor, content)
            rows.append(
                {
                    "setting": name,
                    "cpu_us_per_run": round(cost, 1),
                    "spans_exported": exported,
                }
            )
    base = rows[0]["cpu_us_per_run"]
    print(f"{'setting':<28} {'CPU µs/run':>11} {'vs off':>9}")
    for row in rows:
        row["overhead_us"] = round(row["cpu_us_per_run"] - base, 1)
        print(f"{row['setting']:<28} {row['cpu_us_per_run']:>11} {row['overhead_us']:>+9}")
    return {
        "runs_per_round": RUNS,
        "rounds": ROUNDS,
        "spans_per_run": 4,
        "rows": rows,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--off-only", action="store_true", help="measure only the 'off' row (writes nothing)"
    )
    add_out_option(parser, RESULTS)
    args = parser.parse_args()
    result = asyncio.run(main(args.off_only))
    if not args.off_only:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
