"""Hostile cases: model-written code trying to get out of the sandbox (issue 15, point 2).

Every case is an answer whose function ``probe()`` performs one attack; it runs the way
exec-vote runs answers (``phi_core.parallel`` loads the answer's definitions and calls the
function in the default sandbox), and what ``probe()`` returns is what the answer could report
back, i.e. what a model would see. A case is ``leaked`` when a secret planted outside (an API key
in this process's environment, a file's content, ``/etc/passwd``) shows up in that report, or
when the attack changed something outside (a file, a connection to a listener here, a process
still alive afterwards); ``blocked`` when the attack failed inside; ``contained`` when it ran
but nothing left the sandbox. The forged-result cases go through the public strategies
(``ExecVoteEvaluation``, ``PythonTestsCheck``) and are ``leaked`` when the cheat wins.

Refuses to run (raises) unless a real sandbox exists: these attacks kill processes and fill
disks, and must never run unsandboxed.

Run through ``benchmarks/hostile.py`` or ``python benchmarks/hostile_cases/sandbox.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType

from phi_core.errors import SandboxUnavailableError
from phi_core.sandbox import Sandbox


def _load(name: str, as_name: str | None = None) -> ModuleType:
    """A sibling file of this one, loaded by path (this folder is never put on ``sys.path``)."""
    spec = importlib.util.spec_from_file_location(
        as_name or name, Path(__file__).with_name(f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


kit = _load("_sandbox_kit", "phi_hostile_sandbox_kit")
for _part in ("_sandbox_files", "_sandbox_escape", "_sandbox_results"):  # each registers its cases
    _load(_part, f"phi_hostile_{_part.strip('_')}")
Env, Verdict, CASES = kit.Env, kit.Verdict, kit.CASES


async def _one(
    cls: str, name: str, fn: Callable[[Env], Awaitable[Verdict]], env: Env
) -> dict[str, str]:
    try:
        result, detail = await fn(env)
    except Exception as exc:  # an attack the harness could not even judge is reported as such
        result, detail = "leaked", f"the case crashed: {type(exc).__name__}: {exc}"
    return {"class": cls, "case": name, "result": result, "detail": detail[:400]}


async def _backends() -> list[Sandbox]:
    """The default sandbox, then the ``unshare`` fallback (what users without bubblewrap get)."""
    default = Sandbox()
    if await default.prepare() == "unsafe":
        raise RuntimeError("no sandbox on this machine: these attacks must not run unsandboxed")
    boxes = [default]
    fallback = Sandbox(backend="unshare")
    try:
        if await default.prepare() != "unshare" and await fallback.prepare() == "unshare":
            boxes.append(fallback)
    except SandboxUnavailableError:
        pass
    return boxes


async def _all(env: Env) -> list[dict[str, str]]:
    gate = asyncio.Semaphore(2)  # two at a time: the machine's cores are shared

    async def gated(cls: str, name: str, fn: Callable[[Env], Awaitable[Verdict]]) -> dict[str, str]:
        async with gate:
            return await _one(cls, name, fn, env)

    return list(await asyncio.gather(*(gated(*c) for c in CASES)))


async def run_cases() -> list[dict[str, str]]:
    """Every case in every sandbox there is here."""
    rows: list[dict[str, str]] = []
    previous = os.environ.get("OPENAI_API_KEY")
    try:
        for box in await _backends():
            backend = await box.prepare()
            with tempfile.TemporaryDirectory(prefix="phi-hostile-sandbox-") as root:
                env = Env(Path(root), box)
                os.environ["OPENAI_API_KEY"] = env.key  # a key here must never reach the code
                done = await _all(env)
            suffix = "" if box.backend == "auto" else f" ({backend})"
            rows += [
                {**r, "case": r["case"] + suffix, "detail": f"[{backend}] {r['detail']}"}
                for r in done
            ]
    finally:
        if previous is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = previous
    return rows


if __name__ == "__main__":  # a table of this module's cases alone
    for row in asyncio.run(run_cases()):
        print(f"{row['result']:9s} {row['class']:15s} {row['case']:40s} {row['detail'][:90]}")
