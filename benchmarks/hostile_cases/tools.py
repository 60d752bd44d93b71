"""Hostile cases: a model turning the built-in tools against the user (issue 15, points 1, 6).

Every case performs its attack against the real tools in a throw-away folder — a workspace with
an ``outside`` folder beside it holding a secret file, and a fake ``OPENAI_API_KEY`` — and judges
the result by looking at what happened: whether the secret, the key or ``/etc/passwd`` appears
in what the model would receive, whether anything outside the workspace changed, whether a
destructive command would have been started, whether memory, time and output stayed bounded,
whether bad input was refused before the run. The classes and how each is judged are described
in ``_tools_paths.py``, ``_tools_commands.py`` and ``_tools_limits.py``.

Destructive command lines are never executed: process creation is replaced by a recorder.

Run through ``benchmarks/hostile.py --only tools`` or ``python benchmarks/hostile_cases/tools.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import ModuleType


def _load(name: str, as_name: str) -> ModuleType:
    """A sibling file of this one, loaded by path (this folder is never put on ``sys.path``)."""
    spec = importlib.util.spec_from_file_location(as_name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


kit = _load("_tools_kit", "phi_hostile_tools_kit")
for _part in ("_tools_paths", "_tools_commands", "_tools_limits"):  # each registers its cases
    _load(_part, f"phi_hostile{_part}")


async def run_cases() -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="phi-hostile-tools-") as folder:
        env = kit.Env(Path(folder))
        for cls, name, attack in kit.CASES:
            try:
                result, detail = await attack(env)
            except Exception as exc:  # a case the harness could not even judge is reported
                result, detail = "leaked", f"the case crashed: {type(exc).__name__}: {exc}"
            rows.append({"class": cls, "case": name, "result": result, "detail": detail[:400]})
    return rows


def main() -> None:
    rows = asyncio.run(run_cases())
    by_class: dict[str, Counter[str]] = {}
    for row in rows:
        by_class.setdefault(row["class"], Counter())[row["result"]] += 1
    for cls, counts in by_class.items():
        print(
            f"{cls:45} {sum(counts.values()):4} cases  "
            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        )
    for row in rows:
        if row["result"] in ("leaked", "lost"):
            print(f"{row['result'].upper()}: {row['class']} / {row['case']}: {row['detail']}")


if __name__ == "__main__":
    main()
