"""What the tools' hostile cases share: the planted secrets, running a tool the way the agent
loop does, and judging what came back (see ``tools.py``). Loaded by path."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import secrets
import tempfile
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from phi_core.cancel import CancelToken
from phi_core.tools import Approver, ToolContext, ToolError, ToolResult
from phi_core.tools._results import finish_result, to_tool_result

__all__ = [
    "CASES", "Env", "Verdict", "case", "exposes", "peak_memory", "processes", "run_tool", "text_of",
]  # fmt: skip

T = TypeVar("T")
Verdict = tuple[str, str]
CASES: list[tuple[str, str, Callable[[Env], Awaitable[Verdict]]]] = []


def case(cls: str, name: str) -> Callable[[Callable[[Env], Awaitable[Verdict]]], Any]:
    def register(fn: Callable[[Env], Awaitable[Verdict]]) -> Any:
        CASES.append((cls, name, fn))
        return fn

    return register


class Env:
    """A workspace, an outside folder beside it with a secret file, and a fake API key."""

    def __init__(self, root: Path) -> None:
        root = root.resolve()
        self.root = root
        self.key = "sk-hostile-" + secrets.token_hex(16)
        self.marker = "OUTSIDE-" + secrets.token_hex(12)
        self.outside = root / "outside"
        self.outside.mkdir()
        self.secret_file = self.outside / "secret.txt"
        self.secret_file.write_text(self.marker + "\n")
        self.count = 0

    @contextlib.contextmanager
    def workspace(self) -> Iterator[Path]:
        """A fresh workspace for one case (a file, a folder inside), removed afterwards."""
        self.count += 1
        path = Path(tempfile.mkdtemp(prefix=f"ws{self.count}-", dir=self.root))
        (path / "notes.txt").write_text("inside\n")
        (path / "sub").mkdir()
        yield path.resolve()

    def outside_changed(self) -> bool:
        names = sorted(p.name for p in self.outside.iterdir())
        return names != ["secret.txt"] or self.secret_file.read_text() != self.marker + "\n"

    def restore(self) -> None:
        for path in self.outside.iterdir():
            if path.name != "secret.txt":
                path.unlink() if not path.is_dir() else os.rmdir(path)
        self.secret_file.write_text(self.marker + "\n")


def _ctx(approver: Approver | None, args: dict[str, Any]) -> ToolContext:
    return ToolContext(
        tool_call_id="c", tool_name="t", loop_id="l", cancel=CancelToken(),
        approver=approver, arguments=dict(args),
    )  # fmt: skip


async def run_tool(tool: Any, approver: Approver | None = None, **args: Any) -> ToolResult:
    """Execute as the loop does: errors become results, and the result is finished (Unicode,
    secrets, size cap) exactly as the model would receive it."""
    try:
        value = await tool.execute(args, _ctx(approver, args))
    except ToolError as exc:
        return ToolResult.error(str(exc))
    return finish_result(to_tool_result(value), 256 * 1024)


def text_of(result: ToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def _forms(secret: str) -> dict[str, int]:
    """The secret plain, reversed, in hex and in base64 at each alignment, each with the run
    length that stands for 16 characters of the secret."""
    raw = secret.encode()
    forms = {secret: 16, secret[::-1]: 16, raw.hex(): 32, raw.hex().upper(): 32}
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        forms[encoded[(shift * 8 + 5) // 6 : -4]] = 22
    return forms


def exposes(output: str, secret: str) -> bool:
    """Whether ``output`` holds ``secret`` or a long run of it in a common disguise, even split
    over lines or spaced out (judged more strictly than the redaction works)."""
    squeezed = re.sub(r"\s+", "", output)
    for form, window in _forms(secret).items():
        for start in range(0, max(len(form) - window, 0) + 1, 2):
            chunk = form[start : start + window]
            if chunk in output or chunk in squeezed:
                return True
    return False


def processes(*argv: str) -> list[int]:
    """The pids of the live processes whose command line is exactly ``argv``."""
    wanted = "\0".join(argv) + "\0"
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline") as handle:
                if handle.read() != wanted:
                    continue
            with open(f"/proc/{entry}/stat") as handle:
                if handle.read().split(") ")[1][0] != "Z":
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


async def peak_memory(work: Awaitable[T]) -> tuple[T, int]:
    """The result of ``work`` and the peak of Python allocations (all threads) while it ran."""
    tracemalloc.start()
    try:
        result = await work
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak
