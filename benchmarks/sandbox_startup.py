"""What the sandbox costs (issue 15, point 2): start-up of one sandboxed run, and exec-vote on
3 and 5 answers, in bubblewrap, in the ``unshare`` fallback, and without a sandbox.

* ``bwrap /bin/true`` — bubblewrap alone, the same namespaces and mounts, no Python (run
  directly, also as root, where real runs add a staging step as uid 65534);
* ``empty run`` — :meth:`Sandbox.run` of a worker that does nothing: bubblewrap (or unshare)
  plus the supervisor plus one worker interpreter, i.e. the fixed price of one answer;
* ``exec-vote N`` — :func:`code_agreement` on N benign answers (each calls its function on
  every answer's example inputs), one sandbox per answer, answers two-at-a-time per core.

``unsafe`` is the same supervisor and worker with no namespaces (``allow_unsafe_exec=True``):
the difference is what the namespaces cost. Only the benign answers below ever run unsafely.
Medians of ``--runs`` runs (default 15) after one warm-up; the machine's load average is
recorded, since the two cores are shared. Writes ``benchmarks/results/sandbox/results.json``
(``--out DIR`` writes under DIR instead).

Run: ``.venv/bin/python benchmarks/sandbox_startup.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import add_out_option
from phi_core.parallel import code_agreement
from phi_core.sandbox import Sandbox
from phi_core.sandbox._backends import bwrap_argv, layout, own_interpreter

RESULTS = Path(__file__).parent / "results" / "sandbox"
ANSWERS = [
    "```python\ndef common(a, b):\n    return sorted(set(a) & set(b))\n\ncommon([1, 2, 3], [2, 3, 4])\n```",
    "```python\ndef shared(xs, ys):\n    out = []\n    for x in xs:\n        if x in ys and x not in out:\n"
    "            out.append(x)\n    return sorted(out)\n\nshared([7, 1, 7], [7, 9])\n```",
    "```python\ndef inter(a, b):\n    return [x for x in a if x in b]\n\ninter([5, 3, 5], [5, 3])\n```",
    "```python\ndef both(a, b):\n    return sorted(set(a).intersection(b))\n\nboth([4, 4, 2], [2])\n```",
    "```python\ndef overlap(a, b):\n    s = set(b)\n    return sorted({x for x in a if x in s})\n\noverlap([0, 9], [9])\n```",
]


async def _timed(make: Any, runs: int) -> dict[str, float]:
    await make()  # warm-up: probes, page cache
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        await make()
        seconds.append(time.perf_counter() - started)
    return {
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "p90_ms": round(sorted(seconds)[int(0.9 * (len(seconds) - 1))] * 1000, 1),
        "min_ms": round(min(seconds) * 1000, 1),
    }


async def _bare_bwrap() -> None:
    mounts = layout(own_interpreter(), None, 64 << 20)
    argv = bwrap_argv("bwrap", {"--size", "--disable-userns"}, mounts, {}, ["/bin/true"])
    process = await asyncio.create_subprocess_exec(*argv)
    await process.wait()


async def _measure(results: dict[str, dict[str, Any]], empty: Path, runs: int) -> None:
    results["bwrap /bin/true"] = {"bwrap": await _timed(_bare_bwrap, runs)}
    boxes = {
        "bwrap": Sandbox(backend="bwrap"),
        "unshare": Sandbox(backend="unshare"),
        "unsafe": Sandbox(search_path="", allow_unsafe_exec=True),
    }
    for name, box in boxes.items():
        row = results.setdefault("empty run", {})
        row[name] = await _timed(lambda box=box: box.run(empty, "", timeout=30), runs)
        for n in (3, 5):
            row = results.setdefault(f"exec-vote {n}", {})
            row[name] = await _timed(
                lambda box=box, n=n: code_agreement(ANSWERS[:n], sandbox=box), runs
            )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    add_out_option(parser, RESULTS)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as where:
        os.chmod(where, 0o755)  # reachable by uid 65534, which builds the sandbox when run as root
        empty = Path(where) / "empty_worker.py"
        empty.write_text("", encoding="utf-8")
        await _measure(results, empty, args.runs)
    for label, row in results.items():
        cells = "  ".join(f"{k} {v['median_ms']:7.1f} ms" for k, v in row.items())
        print(f"{label:16s} {cells}")
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": "python benchmarks/sandbox_startup.py" + f" --runs {args.runs}",
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_start": round(load, 2),
            "python": platform.python_version(),
            "uid": os.geteuid(),
        },
        "results": results,
    }
    (args.out / "results.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
