"""What intercepting an agent's own SDK calls costs per call (issue 20, point 1).

The zero-delay streaming OpenAI-compatible server of ``benchmarks/overhead.py`` runs in its own
process; this process sends the same streamed chat completion (20 content chunks, usage in the
last chunk) through the official ``openai`` client (``AsyncOpenAI``, its default ``httpx2``
transport), ``--calls`` times one after another and again with ``--concurrency`` in flight, in
three modes:

* ``bare`` -- no interception (the SDK alone);
* ``metered`` -- inside a selection's interception scope and a meter: classified, attributed,
  limited, metered from the streamed usage and priced (no cache);
* ``cached-miss`` -- the same plus a response cache in memory that misses and is written.

Reported per mode: wall-clock microseconds and this process's CPU microseconds per call (medians
of ``--runs`` runs), and the difference to ``bare``. AgentOpt's HEAD adds about 70 ms per
datapoint (a mitmproxy master per ``track()``); its PyPI release adds 0.02--0.12 ms but meters no
``httpx2`` call (the AgentOpt study of the project's specification material,
``reference/study-agentopt.md``; not measured here). Writes ``benchmarks/results/intercept/``.

Run: ``python benchmarks/intercept_overhead.py --calls 400 --runs 5`` (a minute or two; the
committed results).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from overhead import Server
from phi_core.metering import Meter, metering
from phi_core.select import InterceptScope, ResponseCache, intercepting
from phi_core.select._intercept import attribute

RESULTS = Path(__file__).parent / "results" / "intercept"
MODES = ("bare", "metered", "cached-miss")


async def one_run(port: int, mode: str, calls: int, concurrency: int) -> tuple[float, float]:
    import openai

    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    counter = iter(range(10**9))

    async def call() -> None:
        n = next(counter)  # every request distinct, so the cache always misses
        with attribute("bench", n):
            stream = await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": f"Say hello {n}."}],
                stream=True,
                stream_options={"include_usage": True},
            )
            async for _ in stream:
                pass

    async def wave() -> None:
        gate = asyncio.Semaphore(concurrency)

        async def gated() -> None:
            async with gate:
                await call()

        await asyncio.gather(*(gated() for _ in range(calls)))

    await call()  # warm-up: connection, imports
    scope = InterceptScope(cache=ResponseCache() if mode == "cached-miss" else None, limiter=None)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if mode == "bare":
        await wave()
    else:
        with intercepting(scope), metering(Meter()) as meter:
            await wave()
        assert len(meter.calls) == calls and all(c.usage.output == 20 for c in meter.calls)
        assert not any(c.cached for c in meter.calls)
        if scope.cache is not None:
            assert len(scope.cache) == calls  # every call missed and was written
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await client.close()
    return wall / calls * 1e6, cpu / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with Server(20) as server:
        for concurrency in (1, args.concurrency):
            for mode in MODES:
                samples = [
                    asyncio.run(one_run(server.port, mode, args.calls, concurrency))
                    for _ in range(args.runs)
                ]
                rows.append(
                    {
                        "mode": mode,
                        "concurrency": concurrency,
                        "wall_us_per_call": statistics.median(s[0] for s in samples),
                        "cpu_us_per_call": statistics.median(s[1] for s in samples),
                    }
                )
    print(f"{'in flight':>9} {'mode':<12} {'wall µs/call':>13} {'cpu µs/call':>12} {'cpu +µs':>8}")
    for row in rows:
        bare = next(
            r for r in rows if r["mode"] == "bare" and r["concurrency"] == row["concurrency"]
        )
        row["cpu_us_added"] = row["cpu_us_per_call"] - bare["cpu_us_per_call"]
        print(
            f"{row['concurrency']:>9} {row['mode']:<12} {row['wall_us_per_call']:>13.0f} "
            f"{row['cpu_us_per_call']:>12.0f} {row['cpu_us_added']:>+8.0f}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"calls": args.calls, "runs": args.runs, "python": platform.python_version()}
    (args.out / "results.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
