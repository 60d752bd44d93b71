"""What the sandbox's hostile cases share: the planted secrets, running an attack the way
exec-vote runs an answer, and judging what came back (see ``sandbox.py``). Loaded by path."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import random
import signal
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from phi_core.parallel._behaviour import _run_answer
from phi_core.parallel._code import analyse
from phi_core.sandbox import Sandbox

__all__ = ["CASES", "Env", "Verdict", "case", "judged", "survivors", "tag"]

Verdict = tuple[str, str]
CASES: list[tuple[str, str, Callable[[Env], Awaitable[Verdict]]]] = []


def case(cls: str, name: str) -> Callable[[Callable[[Env], Awaitable[Verdict]]], Any]:
    def register(fn: Callable[[Env], Awaitable[Verdict]]) -> Any:
        CASES.append((cls, name, fn))
        return fn

    return register


class Env:
    """What the cases plant outside the sandbox, and how they look at it afterwards."""

    def __init__(self, root: Path, box: Sandbox) -> None:
        self.key = f"sk-hostile-{uuid.uuid4().hex}"
        self.secret = f"SECRET-{uuid.uuid4().hex}"
        self.dir = root
        self.dir.chmod(0o777)  # writable by anyone: only the sandbox's walls keep code out
        self.secret_file = root / "secret.txt"
        self.secret_file.write_text(self.secret)
        self.secret_file.chmod(0o644)
        self.box = box

    def sub(self, code: str, **extra: Any) -> str:
        values = {"KEY": self.key, "SECRET_FILE": str(self.secret_file), "DIR": str(self.dir)}
        values.update({k: str(v) for k, v in extra.items()})
        for name, value in values.items():
            code = code.replace(f"@{name}@", value)
        return code

    async def probe(self, code: str, call_timeout: float = 5.0, **extra: Any) -> Any:
        """What ``probe()`` reported: its JSON return value, ``!Name`` for an exception, None
        when the answer did not run at all."""
        answer = analyse(self.sub(code, **extra))
        assert answer is not None, f"attack does not parse: {code[:80]!r}"
        answer = dataclasses.replace(answer, entry="probe")
        outputs = await _run_answer(self.box, answer, [(0, "()")], call_timeout, 60.0)
        if outputs is None or 0 not in outputs:
            return None
        out = outputs[0]
        if out.startswith("!"):
            return out
        try:
            return json.loads(ast.literal_eval(out)[0])
        except (ValueError, SyntaxError):  # cut at the worker's 2000 characters
            return {"truncated": out[:80]}

    def leaks(self, value: Any) -> str | None:
        text = json.dumps(value)
        for what, marker in (
            ("the API key", self.key),
            ("the secret file", self.secret),
            ("/etc/passwd", "root:x:0:0"),
        ):
            if marker in text:
                return f"{what} reached the report: {text[:160]}"
        return None


def tag() -> str:
    """A number for ``sleep`` that no other process here has in its command line."""
    return f"87{random.randrange(10**5, 10**6)}.{random.randrange(10**5, 10**6)}"


def survivors(text: str) -> list[int]:
    """Host processes whose command line holds ``text`` (killed: a case leaves nothing)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            continue
    return found


def judged(env: Env, value: Any, ok: bool, what: str) -> Verdict:
    """``leaked`` when a secret is in the report, else ``blocked`` when ``ok`` else ``leaked``."""
    leak = env.leaks(value)
    if leak:
        return "leaked", leak
    return ("blocked", what) if ok else ("leaked", f"{what}: {json.dumps(value)[:200]}")
