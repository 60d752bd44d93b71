"""Where a ``bash`` command runs: confined by the kernel when this machine allows it.

* ``filesystem`` (bubblewrap): the whole file system read-only except the workspace, a private
  ``/tmp`` (empty, gone after the command), minimal ``/dev`` (no disks), its own ``/proc`` and
  PID namespace. A command — or a script it runs — cannot write outside the workspace whatever
  the command policy made of it.
* ``processes`` (util-linux ``unshare``): its own PID namespace and ``/proc`` only.

With either, the command sees only its own processes (``ps e`` and ``/proc/<pid>/environ``
show no other process's environment, such as an API key exported in the shell that started
phi), nothing outside can be signalled, and every process it starts — daemons that left its
session included — dies when it ends. The network is not isolated (``pip install`` works).
``auto`` takes the strongest available and says once, in the log, when there is none. The
full sandbox for model-written code is :mod:`phi_core.sandbox`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from typing import Literal

from .base import ToolError

__all__ = ["Isolation", "isolation_prefix"]

Isolation = Literal["auto", "filesystem", "processes", "never"]
UNSHARE_ARGS = ("--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child")

logger = logging.getLogger("phi_core.tools")
_works: dict[tuple[str, ...], bool] = {}
_warned = False


def _bwrap(binary: str, workspace: str) -> tuple[str, ...]:
    return (
        binary, "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--bind", workspace, workspace,
        "--proc", "/proc", "--dev", "/dev", "--unshare-pid", "--unshare-ipc",
        "--die-with-parent", "--chdir", workspace, "--",
    )  # fmt: skip


async def _probe(argv: tuple[str, ...]) -> bool:
    if argv not in _works:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, "true",
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
        except OSError:
            _works[argv] = False
        else:
            try:
                async with asyncio.timeout(10):
                    _works[argv] = await process.wait() == 0
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
                _works[argv] = False
    return _works[argv]


async def isolation_prefix(mode: Isolation, workspace: str) -> tuple[str, tuple[str, ...]]:
    """(the isolation used, the argv a command runs under) for ``mode``."""
    global _warned
    if mode == "never":
        return "never", ()
    if mode in ("auto", "filesystem"):
        bwrap = shutil.which("bwrap") or ""
        probe = (bwrap, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                 "--unshare-pid", "--die-with-parent", "--")  # fmt: skip
        if bwrap and await _probe(probe):
            return "filesystem", _bwrap(bwrap, workspace)
        if mode == "filesystem":
            raise ToolError(
                "Commands must run with the file system read-only outside the workspace "
                "(isolate = 'filesystem'), but bubblewrap (`bwrap`) is missing or cannot make "
                "namespaces here. Install bubblewrap, or set isolate = 'auto'."
            )
    unshare = shutil.which("unshare")
    if unshare is not None and await _probe((unshare, *UNSHARE_ARGS)):
        return "processes", (unshare, *UNSHARE_ARGS)
    if mode == "processes":
        raise ToolError(
            "Commands must run in their own PID namespace (isolate = 'processes'), but "
            "`unshare --user --pid` does not work here (util-linux missing, or user namespaces "
            "disabled). Set isolate = 'auto' to run them without it."
        )
    if not _warned:
        _warned = True
        logger.warning(
            "bash commands run without isolation: neither bubblewrap nor `unshare --user "
            "--pid` works here, so a command can write outside the workspace where the command "
            "policy cannot see it, and can see other processes (and their environments)"
        )
    return "never", ()
