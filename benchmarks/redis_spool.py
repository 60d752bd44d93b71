"""What the Redis router state's spool costs while Redis is down (issue 15, stores point).

While Redis is unreachable every ``RedisStateStore.add`` also writes the pending updates to the
spool file (locked, replaced atomically, fsynced) so they outlive the process. This measures one
``add`` during an outage with the spool and without it (``spool=None``, memory only), over
``--arms`` arms taken in turn (an unsent update merges into its arm's pending one, so the spool
holds about one entry per arm), and the spool's size at the end. Redis is "down" as a port
nobody listens on (connection refused); the back-off is long so no reconnect attempt is timed.
The machine's load average is recorded, since the two cores are shared. Writes
``benchmarks/results/redis_spool/results.json`` (``--out DIR`` writes under DIR instead).

Run: ``python benchmarks/redis_spool.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _bench import add_out_option
from phi_core.routing import ArmStats, RedisStateStore

RESULTS = Path(__file__).parent / "results" / "redis_spool"


def _measure(url: str, spool: Path | None, arms: int, updates: int) -> dict[str, Any]:
    store = RedisStateStore(url, spool=spool, retry_min_s=3600)
    delta = ArmStats.of(np.array([1.0, 0.5, 0.25, 2.0]), 1.0)
    store.add("ns", "warm-up", delta)  # the one failed send (the outage is noticed)
    seconds = []
    for i in range(updates):
        started = time.perf_counter()
        store.add("ns", f"arm-{i % arms}", delta)
        seconds.append(time.perf_counter() - started)
    ordered = sorted(seconds)
    return {
        "median_ms": round(statistics.median(seconds) * 1000, 3),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 3),
        "pending_entries": store.pending,
        "spool_bytes": spool.stat().st_size if spool is not None else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", type=int, default=8)
    parser.add_argument("--updates", type=int, default=2000)
    add_out_option(parser, RESULTS)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{s.getsockname()[1]}/0"  # closed when measured: refused
    with tempfile.TemporaryDirectory() as tmp:
        results = {
            "arms": args.arms,
            "updates": args.updates,
            "spool": _measure(url, Path(tmp) / "spool.json", args.arms, args.updates),
            "memory": _measure(url, None, args.arms, args.updates),
            "load_average": os.getloadavg(),
        }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
