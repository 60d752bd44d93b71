"""Commands in their own PID namespace (util-linux ``unshare``) when this machine allows it.

Inside, a command sees only its own processes: ``/proc`` is private, so neither ``ps e`` nor
``/proc/<pid>/environ`` shows another process's environment (an API key exported in the shell
that started phi, say), nothing outside can be signalled, and every process the command starts —
daemons that left its session included — dies when the shell ends. This is process isolation
only: files and network are those of the workspace and the machine. The full sandbox for
model-written code is :mod:`phi_core.sandbox`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from typing import Literal

from .base import ToolError

__all__ = ["Isolation", "isolation_prefix"]

Isolation = Literal["auto", "always", "never"]
UNSHARE_ARGS = ("--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child")

logger = logging.getLogger("phi_core.tools")
_works: dict[str, bool] = {}
_warned = False


async def _probe(unshare: str) -> bool:
    if unshare not in _works:
        try:
            process = await asyncio.create_subprocess_exec(
                unshare, *UNSHARE_ARGS, "true",
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
        except OSError:
            _works[unshare] = False
        else:
            try:
                async with asyncio.timeout(10):
                    _works[unshare] = await process.wait() == 0
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
                _works[unshare] = False
    return _works[unshare]


async def isolation_prefix(mode: Isolation) -> tuple[str, ...]:
    """The argv a command runs under for ``mode`` (empty: run it directly)."""
    global _warned
    if mode == "never":
        return ()
    unshare = shutil.which("unshare")
    if unshare is not None and await _probe(unshare):
        return (unshare, *UNSHARE_ARGS)
    if mode == "always":
        raise ToolError(
            "Commands must run in their own PID namespace (isolate = 'always'), but "
            "`unshare --user --pid` does not work here (util-linux missing, or user namespaces "
            "disabled). Set isolate = 'auto' to run them without it."
        )
    if not _warned:
        _warned = True
        logger.warning(
            "bash commands run without process isolation: `unshare --user --pid` is not "
            "available, so commands can see other processes (and their environments in /proc)"
        )
    return ()
