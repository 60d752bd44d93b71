"""The ``bash`` tool: a command line run in the workspace, checked, confined, bounded, killable.

* **Where**: the working directory is the workspace; ``HOME`` and ``PWD`` point at it. Where
  the machine allows it the command is confined by the kernel (:mod:`._isolation`): of the
  host's file system it sees only the system directories and the toolchains on its ``PATH``,
  read-only, and the workspace (no home folders, no stored keys); its own processes only;
  everything it started killed with it.
* **What it sees**: an allow-listed environment (``PATH``, locale, ``TERM``…, see
  :class:`BashSettings`); nothing else of this process's environment — no API keys or tokens.
  Standard input is closed.
* **What it may run**: the :class:`CommandPolicy` verdict. ``deny`` is an error result;
  ``approve`` asks the run's approver (refused when there is none) and says why.
* **How long**: the model may ask for a ``timeout``, capped at ``max_timeout``. On timeout and on
  cancellation the command's whole process group is killed.
* **How much**: output goes from the pipes into a bounded buffer that keeps the start and the
  end of each stream; 400 MB of output costs the same memory as 400 KB. Binary output is
  summarised.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Awaitable

from pydantic import BaseModel, ConfigDict, Field

from .._logging import get_logger
from ._files import looks_binary
from ._isolation import isolation_prefix, toolchain_paths, walk_bounded
from ._settings import BashSettings
from ._tool import WorkspaceTool
from .base import ToolContext, ToolResult

logger = get_logger("phi_core.tools")
_warned_limits = False

__all__ = ["BashTool"]


_SET_ID = stat.S_ISUID | stat.S_ISGID
_STRIP_WALK_LIMIT = 200_000


def strip_set_id_bits(root: str) -> list[str]:
    """Remove the setuid and setgid bits of the regular files under ``root`` (links not
    followed, other file systems not entered, at most :data:`_STRIP_WALK_LIMIT` entries);
    the paths changed, relative to ``root``."""
    device = os.lstat(root).st_dev
    changed: list[str] = []

    def same_device(_path: str, info: os.stat_result) -> bool:
        return info.st_dev == device

    for path, info in walk_bounded(root, _STRIP_WALK_LIMIT, same_device):
        if (
            info.st_dev == device
            and stat.S_ISREG(info.st_mode)
            and info.st_mode & _SET_ID
            and _strip(path)
        ):
            changed.append(os.path.relpath(path, root))
    return changed


def _strip(path: str) -> bool:
    """Clear the set-id bits of the regular file at ``path`` through a descriptor opened
    without following links (the name could have become a link to a system program)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # gone or replaced meanwhile
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not info.st_mode & _SET_ID:
            return False
        os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~_SET_ID)
        return True
    finally:
        os.close(fd)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str = Field(min_length=1, description="The command line to run (bash syntax).")
    timeout: float | None = Field(
        default=None, gt=0, description="Seconds before the command is killed (capped)."
    )


class _Capture:
    """The first and last ``limit // 2`` bytes of a stream, and how many bytes it had."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    def text(self) -> str:
        tail = bytes(self.tail[-self.tail_limit :]) if self.tail else b""
        kept = len(self.head) + len(tail)
        if looks_binary(bytes(self.head[:8192]) + tail[:8192]):
            return f"[binary output, {self.total} bytes, not shown]"
        head = bytes(self.head).decode("utf-8", errors="replace")
        if kept >= self.total:
            return head + tail.decode("utf-8", errors="replace")
        return (
            f"{head}\n[... {self.total - kept} bytes of output left out (kept the first "
            f"{len(self.head)} and the last {len(tail)} of {self.total}) ...]\n"
            + tail.decode("utf-8", errors="replace")
        )


class _Collector(asyncio.SubprocessProtocol):
    """Feeds the command's output straight into the bounded captures; knows when it exited.

    No stream buffers: each chunk is kept (start/end) or dropped as it arrives. The exit is
    seen as soon as the shell ends, even while a background process still holds the pipes.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, out: _Capture, err: _Capture) -> None:
        self.captures = {1: out, 2: err}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.drained: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.captures[fd].feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.drained.done():
            self.drained.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


async def _spawn(
    loop: asyncio.AbstractEventLoop,
    collector: _Collector,
    argv: tuple[str, ...],
    cwd: str,
    env: dict[str, str],
) -> asyncio.SubprocessTransport:
    transport, _ = await loop.subprocess_exec(
        lambda: collector,
        *argv,
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    return transport


async def _start(spawn: Awaitable[asyncio.SubprocessTransport]) -> asyncio.SubprocessTransport:
    """Start the command; if cancelled meanwhile, let the start finish, then kill it.

    A start cancelled half-way makes asyncio kill the shell and wait for its pipes to close,
    which a background child holding them open never does: the call would hang for ever.
    """
    started = asyncio.ensure_future(spawn)
    try:
        return await asyncio.shield(started)
    except asyncio.CancelledError:
        while not started.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(started)  # a few milliseconds; further cancels wait too
        if not started.cancelled() and started.exception() is None:
            transport = started.result()
            _kill_group(transport.get_pid())
            transport.close()
        raise


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class BashTool(WorkspaceTool):
    """Run shell commands in the workspace (see the module docstring for the protections)."""

    name = "bash"
    arguments = _Args
    settings_type = BashSettings
    settings: BashSettings

    def describe(self) -> str:
        s = self.settings
        return (
            f"Run a bash command line in the workspace ({self.workspace.root}) and return its "
            f"exit code and output. Commands that delete or write outside the workspace are "
            f"refused; some need a person's approval. Output is cut at about "
            f"{s.max_output_bytes // 1024} KB. Default timeout {s.timeout:g}s, at most "
            f"{s.max_timeout:g}s. Standard input is closed: do not run interactive programs."
        )

    def environment(self) -> dict[str, str]:
        """The environment of every command: the allow-list, the extras, HOME/PWD = workspace."""
        env = {name: os.environ[name] for name in self.settings.env if name in os.environ}
        env.setdefault("PATH", os.defpath)
        env.setdefault("TERM", "dumb")
        env.update(
            {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}
            | dict(self.settings.extra_env)
            | {"HOME": self.workspace.root, "PWD": self.workspace.root}
        )
        return env

    async def run(self, args: _Args, ctx: ToolContext) -> ToolResult:
        command = args.command
        verdict = self.settings.policy.check(command, self.workspace.root)
        if verdict.action == "deny":
            return ToolResult.error(
                f"Command refused by the safety policy: {verdict.reason}. The bash tool only "
                f"changes files inside the workspace {self.workspace.root}."
            )
        if verdict.action == "approve":
            decision = await ctx.request_approval(verdict.reason)
            if not decision.approved:
                detail = f": {decision.message}" if decision.message else ""
                return ToolResult.error(
                    f"Command not run: it needs approval ({verdict.reason}) and was not "
                    f"approved{detail}."
                )
        timeout, note = self._timeout(args.timeout)
        return await self._run(command, timeout, note)

    def _timeout(self, requested: float | None) -> tuple[float, str]:
        s = self.settings
        if requested is None:
            return min(s.timeout, s.max_timeout), ""
        if not math.isfinite(requested) or requested > s.max_timeout:
            return s.max_timeout, f"[timeout capped at {s.max_timeout:g}s]\n"
        return requested, ""

    def _limits(self, isolation: str) -> tuple[str, ...]:
        """util-linux ``prlimit`` with the command's rlimits, run inside the isolation (so the
        process count is the command's own, in its user namespace); () when none apply or
        ``prlimit`` is missing (logged once)."""
        s = self.settings
        limits = [f"--fsize={s.max_file_bytes}"] if s.max_file_bytes is not None else []
        if s.max_processes is not None and isolation != "never":
            limits.append(f"--nproc={s.max_processes}")
        if not limits:
            return ()
        binary = shutil.which("prlimit")
        if binary is None:
            global _warned_limits
            if not _warned_limits:
                _warned_limits = True
                logger.warning(
                    "bash commands run without process and file-size limits: util-linux's "
                    "`prlimit` is not installed"
                )
            return ()
        return (binary, *limits, "--")

    async def _run(self, command: str, limit: float, note: str) -> ToolResult:
        s = self.settings
        half = max(s.max_output_bytes // 2, 512)
        out, err = _Capture(half), _Capture(half)
        loop = asyncio.get_running_loop()
        collector = _Collector(loop, out, err)
        env = self.environment()
        visible = toolchain_paths(env["PATH"], s.visible)
        isolation, prefix = await isolation_prefix(
            s.isolate, self.workspace.root, visible, network=s.network
        )
        argv = (*prefix, *self._limits(isolation), "bash", "--noprofile", "--norc", "-c", command)
        if isolation == "filesystem":
            env["TMPDIR"] = "/tmp"  # the private one; the host's is read-only in there
        try:
            transport = await _start(_spawn(loop, collector, argv, self.workspace.root, env))
        except (OSError, ValueError) as exc:
            return ToolResult.error(f"Could not start bash: {exc}")
        timed_out = leftovers = False
        try:
            async with asyncio.timeout(limit):
                await asyncio.wait([collector.exited])
                _, pending = await asyncio.wait([collector.drained], timeout=s.exit_grace)
                leftovers = bool(pending)  # background processes still hold the output open
        except TimeoutError:
            timed_out = True
        finally:
            _kill_group(transport.get_pid())
            transport.close()
            # run by root, a command could leave a setuid-root copy of a program in the
            # workspace, for any local user to run once it is over
            unsafe = strip_set_id_bits(self.workspace.root) if os.geteuid() == 0 else []
        if unsafe:
            shown = ", ".join(unsafe[:5]) + (
                f" and {len(unsafe) - 5} more" if len(unsafe) > 5 else ""
            )
            note += f"[the setuid/setgid bits of {shown} were removed]\n"
        code = transport.get_returncode()
        stdout, stderr = out.text(), err.text()
        body = f"{stdout}\nSTDERR:\n{stderr}" if stderr.strip() else stdout
        if timed_out:
            return ToolResult.error(
                f"{note}Command timed out after {limit:g}s; its processes were killed. "
                f"Output so far:\n{body}",
            )
        if leftovers:
            note += "[background processes still running when the command ended were stopped]\n"
        text = f"{note}Exit code: {code}\n" + (
            f"STDOUT:\n{stdout}\nSTDERR:\n{stderr}" if stderr.strip() else stdout
        )
        return ToolResult.text(
            text,
            details={
                "exit_code": code,
                "success": code == 0,
                "stdout_bytes": out.total,
                "stderr_bytes": err.total,
                "isolation": isolation,
            },
        )
