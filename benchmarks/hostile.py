"""The hostile benchmark (issue 15): every attack class tried against the real code, counted.

Imports every module in ``benchmarks/hostile_cases/`` (each area of issue 15 adds its own),
awaits its ``run_cases()`` and checks what it returns: a list of
``{"class", "case", "result", "detail"}`` where ``result`` is ``blocked`` (the attack failed),
``contained`` (it ran, and nothing escaped), ``leaked`` (a secret or an effect reached outside)
or ``lost`` (data the user had was lost). Each case performs the attack and decides its result by
looking at what happened; nothing here is hard-coded.

Prints one row per class — cases tried, blocked or contained, leaked or lost — and writes
``benchmarks/results/hostile/hostile.json`` (every case, the table, the machine) and a short
``README.md`` beside it. Exits 1 when anything leaked or was lost, when a module failed to run,
or when a module returned malformed rows; 0 otherwise.

Run: ``.venv/bin/python benchmarks/hostile.py`` (``--only sandbox,tools`` for some modules).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

CASES = Path(__file__).parent / "hostile_cases"
RESULTS = Path(__file__).parent / "results" / "hostile"
VERDICTS = ("blocked", "contained", "leaked", "lost")
FIELDS = ("class", "case", "result", "detail")


def _modules(only: set[str] | None) -> list[Path]:
    found = sorted(p for p in CASES.glob("*.py") if not p.name.startswith("_"))
    return [p for p in found if only is None or p.stem in only]


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"hostile_cases.{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _check_rows(area: str, rows: Any) -> tuple[list[dict[str, str]], list[str]]:
    """The well-formed rows, and a problem per malformed one."""
    if not isinstance(rows, list):
        return [], [f"{area}: run_cases() returned {type(rows).__name__}, not a list"]
    good: list[dict[str, str]] = []
    problems: list[str] = []
    for k, row in enumerate(rows):
        if not isinstance(row, dict) or any(not isinstance(row.get(f), str) for f in FIELDS):
            problems.append(f"{area}: row {k} is not {{class, case, result, detail}}: {row!r}")
        elif row["result"] not in VERDICTS:
            problems.append(f"{area}: row {k} has result {row['result']!r}, not one of {VERDICTS}")
        else:
            good.append({"area": area, **{f: row[f] for f in FIELDS}})
    return good, problems


async def _run(path: Path, limit: float) -> tuple[list[dict[str, str]], list[str], float]:
    started = time.monotonic()
    try:
        module = _load(path)
        rows = await asyncio.wait_for(module.run_cases(), limit)
    except Exception as exc:  # a broken module is a failure of the benchmark, reported
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return [], [f"{path.stem}: {detail}"], time.monotonic() - started
    good, problems = _check_rows(path.stem, rows)
    return good, problems, time.monotonic() - started


def table(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """One line per (area, class): cases, blocked or contained, leaked or lost."""
    groups: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        groups[(row["area"], row["class"])].append(row)
    out = []
    for (area, cls), members in sorted(groups.items()):
        counts = {v: sum(1 for m in members if m["result"] == v) for v in VERDICTS}
        out.append(
            {
                "area": area,
                "class": cls,
                "cases": len(members),
                "blocked": counts["blocked"],
                "contained": counts["contained"],
                "leaked": counts["leaked"],
                "lost": counts["lost"],
            }
        )
    return out


def render(lines: list[dict[str, Any]]) -> str:
    head = ("area", "class", "cases", "blocked or contained", "leaked or lost")
    body = [
        (
            line["area"],
            line["class"],
            str(line["cases"]),
            str(line["blocked"] + line["contained"]),
            str(line["leaked"] + line["lost"]),
        )
        for line in lines
    ]
    total = (
        "total",
        "",
        str(sum(x["cases"] for x in lines)),
        str(sum(x["blocked"] + x["contained"] for x in lines)),
        str(sum(x["leaked"] + x["lost"] for x in lines)),
    )
    widths = [max(len(r[i]) for r in [head, *body, total]) for i in range(len(head))]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(head), rule, *map(fmt, body), rule, fmt(total)])


def _readme(text: str, summary: dict[str, Any]) -> str:
    return f"""# Hostile benchmark (issue 15)

Produced by `benchmarks/hostile.py` (see its docstring): every module in
`benchmarks/hostile_cases/` performs its attacks against the real code and reports, per case,
`blocked`, `contained`, `leaked` or `lost`, decided by checking what actually happened.

Command: `{summary["command"]}` — {summary["seconds"]:.1f} s on {summary["machine"]["cpus"]}
cores (load average {summary["machine"]["load_average"]} at the start).

```
{text}
```

`hostile.json` holds every case with its detail. Leaked or lost must be 0; module errors:
{len(summary["errors"])}.
"""


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated module names (default: all)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per module")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write results")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    paths = _modules(only)
    if not paths:
        print(f"no hostile case modules in {CASES}", file=sys.stderr)
        return 1
    started = time.monotonic()
    load = os.getloadavg()[0]
    rows: list[dict[str, str]] = []
    errors: list[str] = []
    per_module: dict[str, float] = {}
    for path in paths:  # one module at a time: cases measure timing and process counts
        good, problems, seconds = await _run(path, args.timeout)
        rows += good
        errors += problems
        per_module[path.stem] = round(seconds, 2)
        print(f"{path.stem}: {len(good)} cases in {seconds:.1f} s", file=sys.stderr)
    lines = table(rows)
    text = render(lines)
    print(text)
    for problem in errors:
        print(f"ERROR {problem}", file=sys.stderr)
    bad = [r for r in rows if r["result"] in ("leaked", "lost")]
    for row in bad:
        print(
            f"{row['result'].upper()}: {row['area']}/{row['class']}/{row['case']}: {row['detail']}"
        )
    summary = {
        "command": "python benchmarks/hostile.py" + (f" --only {args.only}" if args.only else ""),
        "seconds": round(time.monotonic() - started, 1),
        "modules": per_module,
        "errors": errors,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": round(load, 2),
            "uid": os.getuid(),
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hostile.json").write_text(
        json.dumps({**summary, "table": lines, "cases": rows}, indent=1) + "\n", encoding="utf-8"
    )
    (args.out / "README.md").write_text(_readme(text, summary), encoding="utf-8")
    return 1 if bad or errors else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
