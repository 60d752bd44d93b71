"""Throughput and latency of the embedded model (`local:smollm2`) through the local provider.

What it measures, per pool layout (instances × threads per instance):

* **load**: seconds to load every instance of the pool (once per process, kept off the timed
  calls by :meth:`LocalProvider.preload`);
* **1 stream**: one generation at a time, ``--runs`` times: time to first token (TTFT, from the
  call to the first text delta, so it includes prompt evaluation), decode tokens/s (completion
  tokens after the first one / time after the first token) and end-to-end tokens/s;
* **3 streams**: three generations started together (three branches of a race), ``--runs``
  times: per-stream TTFT (includes waiting for a free instance when the pool has fewer than
  three), per-stream tokens/s and aggregate tokens/s (all completion tokens / wall time).

Every call asks for ``--tokens`` completion tokens with a fixed seed and a prompt that does not
end early, so runs are comparable. The load average when the run started is recorded: other
processes on the machine share the cores and lower the figures.

Run: ``.venv/bin/python benchmarks/local_model.py`` (writes
``benchmarks/results/local_model/results.json``).
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from phi_core.providers import ModelConfig, StreamDone, StreamRequest, resolve_model
from phi_core.providers.local import LocalProvider, _free_cores, _pool_for
from phi_core.types import TextDelta, UserMessage

PROMPT = (
    "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle. "
    "Describe the sea, the weather and every step of the keeper's day."
)


@dataclass
class Call:
    ttft_s: float
    total_s: float
    completion_tokens: int
    prompt_tokens: int

    @property
    def decode_tps(self) -> float:
        after_first = self.total_s - self.ttft_s
        return (self.completion_tokens - 1) / after_first if after_first > 0 else 0.0

    @property
    def e2e_tps(self) -> float:
        return self.completion_tokens / self.total_s if self.total_s > 0 else 0.0


async def one_call(provider: LocalProvider, model: ModelConfig, tokens: int, seed: int) -> Call:
    request = StreamRequest(
        model=model,
        messages=[UserMessage.text(PROMPT)],
        max_tokens=tokens,
        temperature=0.7,
        seed=seed,
    )
    started = time.perf_counter()
    first: float | None = None
    async for item in provider.stream(request):
        if isinstance(item, TextDelta) and first is None:
            first = time.perf_counter()
        if isinstance(item, StreamDone):
            total = time.perf_counter() - started
            usage = item.message.usage
            return Call(
                ttft_s=(first or time.perf_counter()) - started,
                total_s=total,
                completion_tokens=usage.output,
                prompt_tokens=usage.input,
            )
    raise RuntimeError("the stream ended without a StreamDone")


def _summary(calls: list[Call], wall: list[float] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "calls": len(calls),
        "ttft_s_median": statistics.median(c.ttft_s for c in calls),
        "ttft_s_max": max(c.ttft_s for c in calls),
        "decode_tps_median": statistics.median(c.decode_tps for c in calls),
        "e2e_tps_median": statistics.median(c.e2e_tps for c in calls),
        "completion_tokens_total": sum(c.completion_tokens for c in calls),
        "prompt_tokens": calls[0].prompt_tokens,
        "raw": [asdict(c) for c in calls],
    }
    if wall is not None:
        per_run = [
            sum(c.completion_tokens for c in calls[i * 3 : i * 3 + 3]) / w
            for i, w in enumerate(wall)
        ]
        out["aggregate_tps_median"] = statistics.median(per_run)
        out["wall_s"] = wall
        out["wall_s_median"] = statistics.median(wall)
    return out


async def bench_layout(instances: int, threads: int, tokens: int, runs: int) -> dict[str, Any]:
    base = resolve_model("local:smollm2")
    model = base.model_copy(
        update={"compat": {**base.compat, "pool_size": instances, "n_threads": threads}}
    )
    provider = LocalProvider()
    load_average = os.getloadavg()[0]
    started = time.perf_counter()
    await provider.preload(model)
    load_s = time.perf_counter() - started
    assert _pool_for(model).loaded == instances

    await one_call(provider, model, 8, seed=0)  # warm-up: first decode allocates buffers

    single = [await one_call(provider, model, tokens, seed=run) for run in range(runs)]

    triple: list[Call] = []
    walls: list[float] = []
    for run in range(runs):
        t0 = time.perf_counter()
        batch = await asyncio.gather(
            *(one_call(provider, model, tokens, seed=100 * run + k) for k in range(3))
        )
        walls.append(time.perf_counter() - t0)
        triple.extend(batch)
    return {
        "layout": f"{instances}x{threads}",
        "instances": instances,
        "threads_per_instance": threads,
        "load_s": load_s,
        "loadavg_1min_at_start": load_average,
        "one_stream": _summary(single),
        "three_streams": _summary(triple, walls),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'pool':>5} {'load s':>6} {'loadavg':>7} | {'1 stream: TTFT s':>16} "
        f"{'decode tok/s':>12} {'e2e tok/s':>9} | {'3 streams: TTFT s (max)':>23} "
        f"{'tok/s each':>10} {'aggregate tok/s':>15} {'wall s':>6}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        one, three = r["one_stream"], r["three_streams"]
        lines.append(
            f"{r['layout']:>5} {r['load_s']:>6.2f} {r['loadavg_1min_at_start']:>7.2f} | "
            f"{one['ttft_s_median']:>16.3f} {one['decode_tps_median']:>12.1f} "
            f"{one['e2e_tps_median']:>9.1f} | "
            f"{three['ttft_s_median']:>15.3f} ({three['ttft_s_max']:>5.2f}) "
            f"{three['e2e_tps_median']:>10.1f} {three['aggregate_tps_median']:>15.1f} "
            f"{three['wall_s_median']:>6.2f}"
        )
    lines.append(
        "load s: loading the pool's instances (0 when this process already loaded that layout). "
        "TTFT: call to first text delta (includes prompt evaluation and, with fewer instances "
        "than streams, waiting for one); values are medians over calls; wall s: time until all "
        "three streams finished (what a 3-branch race waits for)."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=96, help="completion tokens per call")
    parser.add_argument("--runs", type=int, default=3, help="repetitions per measurement")
    parser.add_argument(
        "--layouts",
        default="default,1x2,3x1",
        help="pool layouts INSTANCESxTHREADS, comma-separated ('default' = the provider's "
        "choice for this machine)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "local_model"
    )
    args = parser.parse_args(argv)

    cores = _free_cores()
    default = (min(cores, 4), max(1, cores // min(cores, 4)))
    layouts: list[tuple[int, int]] = []
    for item in args.layouts.split(","):
        item = item.strip()
        if item == "default":
            layouts.append(default)
        else:
            n, _, t = item.partition("x")
            layouts.append((int(n), int(t)))

    load_before = os.getloadavg()
    rows = [asyncio.run(bench_layout(n, t, args.tokens, args.runs)) for n, t in layouts]
    load_after = os.getloadavg()

    import llama_cpp

    result = {
        "model": "local:smollm2 (SmolLM2-135M-Instruct Q4_1)",
        "llama_cpp_python": llama_cpp.__version__,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "free_cores": cores,
        "default_layout": f"{default[0]}x{default[1]}",
        "loadavg_1_5_15_before": load_before,
        "loadavg_1_5_15_after": load_after,
        "tokens_per_call": args.tokens,
        "runs": args.runs,
        "layouts": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    report = (
        f"local:smollm2, {args.tokens} tokens/call, {args.runs} runs, {cores} free cores, "
        f"load average before {load_before[0]:.2f} after {load_after[0]:.2f}\n{_table(rows)}\n"
    )
    (args.out / "table.txt").write_text(report)
    print(report, end="")
    print(f"results: {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
