"""Running a hostile answer through the real exec worker in the real sandbox, for the
``test_sandbox_*`` modules: each attack is a function ``probe()`` in an answer's code, and what
it returns is what the answer could report (what a model would see)."""

from __future__ import annotations

import ast
import dataclasses
import os
import random
import signal
from pathlib import Path
from typing import Any

from phi_core.parallel._behaviour import run_calls
from phi_core.parallel._code import analyse
from phi_core.sandbox import Sandbox, SandboxResult

BACKENDS = ["bwrap", "unshare"]


async def run_answer(
    box: Sandbox, code: str, *, call_timeout: float = 10.0, seconds: float = 30.0
) -> SandboxResult:
    """Load ``code`` like exec-vote does and call its ``probe()`` once."""
    answer = analyse(code)
    assert answer is not None, "the attack must parse"
    probe_it = dataclasses.replace(answer, entry="probe")
    return await run_calls(box, probe_it, [(0, "()")], call_timeout, seconds)


async def probe(box: Sandbox, code: str, **kwargs: Any) -> Any:
    """What ``probe()`` returned inside the sandbox (``"!Name"`` for an exception)."""
    result = await run_answer(box, code, **kwargs)
    assert any(m.get("loaded") is True for m in result.messages), result
    out = next(m["out"] for m in result.messages if m.get("n") == 0)
    return out if out.startswith("!") else _plain(ast.literal_eval(out)[0])


def _plain(value: Any) -> Any:
    """Undo the worker's canonical form of dicts (keys are stored as their repr)."""
    if isinstance(value, dict):
        return {ast.literal_eval(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def marker() -> str:
    """A number no other process on this machine has in its command line (``sleep <it>``)."""
    return f"86{random.randrange(10**5, 10**6)}.{random.randrange(10**5, 10**6)}"


def exists(path: str | Path) -> bool:
    """Whether ``path`` exists on this machine (outside any sandbox)."""
    return os.path.lexists(path)


def survivors(text: str) -> list[int]:
    """PIDs of host processes whose command line contains ``text``, killed on the spot so that
    a failing test leaves nothing running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            continue
    return found
