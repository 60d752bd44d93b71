"""``Sandbox``: run one worker script over model-written code in a fresh sandbox, and read back
what it reported — the one way phi-core runs code a model wrote.

Each :meth:`Sandbox.run` builds a new sandbox (see ``_backends``) whose first process is the
supervisor (``_supervisor.py``); the supervisor starts the worker, watches it and answers with
one line carrying a per-run nonce. The parent trusts only that line; everything in it about the
worker's results is the worker's own claim, so callers run each candidate in a sandbox of its
own and compare the claims here, outside.

Where no sandbox can be made, :meth:`Sandbox.run` raises :class:`SandboxUnavailableError`
naming what is missing, unless the sandbox was created with ``allow_unsafe_exec=True``: then the
same supervisor runs the worker directly on this machine, with rlimits and an empty
environment only, and a warning says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import shlex
import signal
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._logging import get_logger
from ..errors import SandboxUnavailableError, UserError
from ._backends import (
    BACKENDS,
    INSIDE,
    SUPERVISOR,
    BackendName,
    Interpreter,
    bwrap_argv,
    drop_to_sandbox_user,
    environment,
    find_tools,
    layout,
    own_interpreter,
    staged,
    unshare_argv,
)

__all__ = [
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "default_sandbox",
    "set_default_sandbox",
]

logger = get_logger("phi_core.sandbox")

_WORKER_ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUTF8": "1"}
_WORKER_FLAGS = ["-S", "-s", "-B"]
_INSTALL_HINT = (
    "Install bubblewrap (Debian/Ubuntu: `apt install bubblewrap`; Fedora: `dnf install "
    "bubblewrap`) and make sure unprivileged user namespaces are allowed (Ubuntu 24.04: "
    "`sysctl kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile for "
    "bwrap). Only on a machine that is itself a throw-away sandbox, opt in to running model "
    "code without one: Sandbox(allow_unsafe_exec=True), passed as `sandbox=` or made the "
    "default with phi_core.sandbox.set_default_sandbox (CLI: --unsafe-exec)."
)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run (rlimits apply to every process in it).

    Memory is per process (``RLIMIT_AS``, address space): with ``processes`` processes the worst
    case is their product (4 GiB with the defaults), so raise one, not both.
    """

    cpu_seconds: int = 30
    memory_bytes: int = 256 << 20
    processes: int = 16
    """Processes and threads together (``RLIMIT_NPROC``, counted inside the sandbox's own user
    namespace); the supervisor and the worker are two of them."""
    file_size_bytes: int = 16 << 20
    open_files: int = 64
    tmp_bytes: int = 64 << 20
    """Size of the private ``/tmp`` (a tmpfs, the working directory)."""
    output_bytes: int = 64 << 10
    """How much of the worker's stdout/stderr is kept (the end of it)."""
    message_bytes: int = 4 << 20
    """How much the worker may report on fd 3 before it is killed."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"SandboxLimits.{f.name} must be an int >= 1, got {value!r}.")
        if self.processes < 4:
            raise UserError(
                f"SandboxLimits.processes must be >= 4 (the supervisor, the worker and their "
                f"threads), got {self.processes!r}."
            )

    def rlimits(self, *, processes: bool = True) -> dict[str, int]:
        out = {
            "cpu_seconds": self.cpu_seconds,
            "memory_bytes": self.memory_bytes,
            "file_size_bytes": self.file_size_bytes,
            "open_files": self.open_files,
            "core_bytes": 0,
        }
        if processes:
            out["processes"] = self.processes
        return out


Killed = Literal["watchdog", "overflow", "timeout"]


@dataclass(frozen=True)
class SandboxResult:
    """What the supervisor saw of one worker run."""

    messages: list[dict[str, Any]]
    """The worker's reports (JSON objects it wrote on fd 3), in order: its own claims."""
    exit_code: int | None
    """The worker's exit status (negative: killed by that signal); None when it never ended."""
    killed: Killed | None
    """Why the worker was stopped early, if it was."""
    output: str = ""
    """The end of the worker's stdout and stderr (when captured)."""
    output_bytes: int = 0
    backend: str = ""
    """``bwrap``, ``unshare`` or ``unsafe``."""
    seconds: float = 0.0
    error: str | None = None
    """Why there is no report from the supervisor (it could not start the worker, or died)."""


@dataclass(frozen=True)
class _Plan:
    backend: BackendName | Literal["unsafe"]
    interpreter: Interpreter
    tools: dict[str, str] = field(default_factory=dict)
    features: frozenset[str] = frozenset()


_plans: dict[tuple[Any, ...], _Plan] = {}
_announced: set[str] = set()


class Sandbox:
    """Runs worker scripts over model-written code, each run in a fresh sandbox.

    Args:
        limits: resource limits of each run.
        backend: ``"auto"`` (bubblewrap, else ``unshare``), ``"bwrap"`` or ``"unshare"``.
        allow_unsafe_exec: where no sandbox can be made, run the code anyway, directly on this
            machine, with rlimits and an empty environment only (a warning says so). Only for
            machines that are themselves disposable sandboxes.
        python: the interpreter to run the worker with (default: the one running phi-core;
            only its standard library is visible inside).
        search_path: where to look for ``bwrap``/``unshare`` (default: ``$PATH`` and the sbin
            directories); ``""`` finds nothing, which is how tests show the refusal.
    """

    def __init__(
        self,
        *,
        limits: SandboxLimits | None = None,
        backend: Literal["auto", "bwrap", "unshare"] = "auto",
        allow_unsafe_exec: bool = False,
        python: str | None = None,
        search_path: str | None = None,
    ) -> None:
        if backend not in ("auto", *BACKENDS):
            raise UserError(
                f"Sandbox backend must be 'auto', 'bwrap' or 'unshare', got {backend!r}."
            )
        self.limits = limits or SandboxLimits()
        self.backend = backend
        self.allow_unsafe_exec = bool(allow_unsafe_exec)
        self.python = python
        self.search_path = search_path

    def __repr__(self) -> str:
        unsafe = ", allow_unsafe_exec=True" if self.allow_unsafe_exec else ""
        return f"Sandbox(backend={self.backend!r}{unsafe})"

    def replace(self, **changes: Any) -> Sandbox:
        """A copy with some settings changed (the keyword arguments of the constructor)."""
        settings = {
            "limits": self.limits,
            "backend": self.backend,
            "allow_unsafe_exec": self.allow_unsafe_exec,
            "python": self.python,
            "search_path": self.search_path,
        }
        return Sandbox(**{**settings, **changes})

    def _candidates(self) -> tuple[BackendName, ...]:
        return BACKENDS if self.backend == "auto" else (self.backend,)

    def check(self) -> None:
        """Refuse now (cheaply: are the programs there?) when no sandbox can be made and unsafe
        execution was not allowed; the first run still proves the sandbox works.

        Raises:
            SandboxUnavailableError: naming what is missing and how to install it.
        """
        if self.allow_unsafe_exec:
            return
        problems = []
        for name in self._candidates():
            _, missing = find_tools(name, self.search_path)
            if not missing:
                return
            problems.append(f"{name}: {', '.join(missing)} not found")
        raise _unavailable(problems)

    async def prepare(self) -> str:
        """Find (and prove, once per process) a way to make the sandbox here; returns its name
        (``bwrap``, ``unshare``, or ``unsafe`` when allowed and nothing else works).

        Raises:
            SandboxUnavailableError: no sandbox can be made here (and unsafe execution was not
                allowed).
        """
        return (await self._plan()).backend

    async def run(
        self,
        worker: Path,
        stdin: str,
        *,
        timeout: float,  # noqa: ASYNC109 - the sandbox is killed at the deadline
        after_ready: str | None = None,
        capture_output: bool = False,
        deadline: float | None = None,
    ) -> SandboxResult:
        """Run ``python worker`` in a new sandbox and return what the supervisor saw.

        Args:
            worker: a script that imports only the standard library; it reads ``stdin`` and
                reports JSON lines on fd 3 (see ``_supervisor.py`` for ``deadline``/``ready``).
            stdin: what the worker reads on stdin.
            timeout: seconds for the whole run; then everything in the sandbox is killed.
            after_ready: sent on the worker's stdin once it reports ``{"ready": true}``.
            capture_output: keep the end of the worker's stdout/stderr.
            deadline: seconds the worker has for its first report and after each report
                (default: no watchdog unless a report arms one; see ``_supervisor.py``).

        Raises:
            SandboxUnavailableError: no sandbox can be made here (and unsafe execution was not
                allowed).
        """
        plan = await self._plan()
        nonce = secrets.token_hex(16)
        inside = plan.backend != "unsafe"
        request = {
            "nonce": nonce,
            "limits": self.limits.rlimits(processes=inside),
            "unsafe": not inside,  # best effort there: no prctl or rlimits off Linux
            "worker": f"{INSIDE}/worker.py" if inside else str(worker),
            "python_flags": _WORKER_FLAGS,
            "env": {**environment(plan.interpreter), **_WORKER_ENV},
            "stdin": stdin,
            "after_ready": after_ready,
            "capture_output": capture_output,
            "output_bytes": self.limits.output_bytes,
            "message_bytes": self.limits.message_bytes,
            "deadline": deadline,
        }
        _announce(plan, self.limits)
        async with _command(plan, worker, self.limits) as (argv, cwd):
            raw, err, code = await _communicate(
                argv, cwd, json.dumps(request).encode(), timeout, self.limits
            )
        if raw is None:
            return SandboxResult([], None, "timeout", backend=plan.backend, seconds=timeout)
        result = _parse(raw, nonce, plan.backend)
        if result is None:
            tail = err.decode("utf-8", "replace").strip()[-300:] or "nothing on stderr"
            return SandboxResult(
                [], None, None, backend=plan.backend, error=f"no reply (exit {code}): {tail}"
            )
        return result

    async def _plan(self) -> _Plan:
        key = (self.backend, self.python, self.search_path, self.allow_unsafe_exec)
        plan = _plans.get(key)
        if plan is None:
            plan = await self._make_plan()
            _plans[key] = plan
        return plan

    async def _make_plan(self) -> _Plan:
        interpreter = await _interpreter(self.python)
        problems: list[str] = []
        for name in self._candidates():
            tools, missing = find_tools(name, self.search_path)
            if missing:
                problems.append(f"{name}: {', '.join(missing)} not found")
                continue
            features = await _features(tools["bwrap"]) if name == "bwrap" else frozenset()
            plan = _Plan(name, interpreter, tools, features)
            failure = await _probe(plan, self.limits)
            if failure is None:
                return plan
            problems.append(f"{name} ({tools.get(name, name)}) cannot make a sandbox: {failure}")
        if self.allow_unsafe_exec:
            logger.debug("no sandbox (%s); running unsafely as allowed", "; ".join(problems))
            return _Plan("unsafe", interpreter)
        raise _unavailable(problems)


def _unavailable(problems: Sequence[str]) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        "Model-written code runs only in a sandbox, and none can be made here ("
        + "; ".join(problems)
        + "). "
        + _INSTALL_HINT
    )


_default: Sandbox | None = None


def default_sandbox() -> Sandbox:
    """The sandbox used when none is passed (``phi race --unsafe-exec`` replaces it)."""
    global _default
    if _default is None:
        _default = Sandbox()
    return _default


def set_default_sandbox(sandbox: Sandbox | None) -> None:
    """Replace the default sandbox for this process (None: back to ``Sandbox()``)."""
    global _default
    _default = sandbox


def _announce(plan: _Plan, limits: SandboxLimits) -> None:
    """One line per process and backend: what runs where (the CLI prints it on stderr)."""
    if plan.backend in _announced:
        return
    _announced.add(plan.backend)
    if plan.backend == "unsafe":
        logger.warning(
            "model-written code runs WITHOUT a sandbox, as uid %d on this machine "
            "(allow_unsafe_exec=True): only rlimits and an empty environment stand between it "
            "and your files",
            os.getuid(),
        )
        return
    logger.info(
        "model-written code runs in a %s sandbox, one per answer: uid 65534, no network, "
        "read-only system, private /tmp, its own PIDs; limits %d s CPU, %d MiB memory, "
        "%d processes",
        "bubblewrap" if plan.backend == "bwrap" else "unshare",
        limits.cpu_seconds,
        limits.memory_bytes >> 20,
        limits.processes,
    )


async def _interpreter(python: str | None) -> Interpreter:
    if python is None:
        return own_interpreter()
    code = (
        "import json, os, sys; print(json.dumps([os.path.realpath(sys.executable), "
        "os.path.realpath(sys.base_prefix), '%d.%d' % sys.version_info[:2]]))"
    )
    try:
        process = await asyncio.create_subprocess_exec(
            python, "-I", "-c", code, stdout=asyncio.subprocess.PIPE, env={"PATH": "/usr/bin"}
        )
        out, _ = await process.communicate()
        executable, prefix, version = json.loads(out)
    except (OSError, ValueError) as exc:
        raise UserError(f"Cannot run the sandbox's interpreter {python!r}: {exc}.") from exc
    return Interpreter(executable=executable, prefix=prefix, version=version)


async def _features(bwrap: str) -> frozenset[str]:
    process = await asyncio.create_subprocess_exec(
        bwrap, "--help", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    text = out.decode(errors="replace")
    return frozenset(flag for flag in ("--disable-userns", "--size") if flag in text)


async def _probe(plan: _Plan, limits: SandboxLimits) -> str | None:
    """None when a sandbox starts and answers, else what went wrong."""
    nonce = secrets.token_hex(16)
    request = json.dumps({"nonce": nonce, "worker": None}).encode()
    async with _command(plan, None, limits) as (argv, cwd):
        raw, err, code = await _communicate(argv, cwd, request, 20.0, limits)
    result = None if raw is None else _parse(raw, nonce, plan.backend)
    if result is not None:
        return result.error
    detail = err.decode(errors="replace").strip().splitlines()
    return detail[-1] if detail else f"it exited with status {code} and no answer"


@contextlib.asynccontextmanager
async def _command(
    plan: _Plan, worker: Path | None, limits: SandboxLimits
) -> AsyncIterator[tuple[list[str], str | None]]:
    """The command line of one run and its working directory (host side)."""
    if plan.backend == "unsafe":
        with tempfile.TemporaryDirectory(prefix="phi-unsafe-exec-") as tmp:
            yield [plan.interpreter.executable, "-I", "-S", str(SUPERVISOR)], tmp
        return
    supervisor = [plan.interpreter.inside, "-I", "-S", f"{INSIDE}/supervisor.py"]
    mounts = layout(plan.interpreter, worker, limits.tmp_bytes)
    env = environment(plan.interpreter)
    scratch = tempfile.mkdtemp(prefix="phi-sandbox-")  # mount point in the private namespace
    try:
        prefix: list[str] = []
        stage_lines: list[str] = []
        root = scratch
        if os.geteuid() == 0:
            mounts, prefix, stage_lines = staged(plan.tools, scratch, mounts)
            root = f"{scratch}/root"
            stage_lines.append(f"mkdir {shlex.quote(root)}")
        if plan.backend == "bwrap":
            argv = bwrap_argv(plan.tools["bwrap"], set(plan.features), mounts, env, supervisor)
        else:
            argv = unshare_argv(plan.tools, root, mounts, env, supervisor)
        if prefix:
            argv = [*prefix, "\n".join([*stage_lines, drop_to_sandbox_user(plan.tools, argv)])]
        yield argv, None
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(scratch)


async def _communicate(
    argv: list[str],
    cwd: str | None,
    request: bytes,
    timeout: float,  # noqa: ASYNC109 - the process group is killed at the deadline
    limits: SandboxLimits,
) -> tuple[bytes | None, bytes, int | None]:
    """(stdout, stderr, exit status) of the run; stdout None when it timed out (and was killed).

    The process group is killed on the way out whatever happens (timeout, cancellation)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8"},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    cap = limits.message_bytes + 4 * limits.output_bytes + (64 << 10)
    try:
        async with asyncio.timeout(timeout):
            assert process.stdin is not None and process.stdout and process.stderr
            process.stdin.write(request)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await process.stdin.drain()
            process.stdin.close()
            out, err = await asyncio.gather(
                _read_capped(process.stdout, cap), _read_capped(process.stderr, 64 << 10)
            )
            code = await process.wait()
    except TimeoutError:
        return None, b"", None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    return out, err, code


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> bytes:
    """Everything up to ``cap`` bytes; the rest is read and dropped."""
    data = bytearray()
    while chunk := await stream.read(1 << 16):
        if len(data) < cap:
            data += chunk[: cap - len(data)]
    return bytes(data)


def _parse(raw: bytes, nonce: str, backend: str) -> SandboxResult | None:
    """The supervisor's reply: the line that starts with this run's nonce (None: no such line)."""
    prefix = nonce + " "
    line = next(
        (x for x in raw.decode("utf-8", "replace").splitlines() if x.startswith(prefix)), None
    )
    if line is None:
        return None
    try:
        reply = json.loads(line[len(prefix) :])
        killed = reply.get("killed")
        return SandboxResult(
            messages=[m for m in reply.get("messages", []) if isinstance(m, dict)],
            exit_code=_int_or_none(reply.get("exit")),
            killed=killed if killed in ("watchdog", "overflow") else None,
            output=str(reply.get("output", "")),
            output_bytes=int(reply.get("output_bytes", 0)),
            backend=backend,
            seconds=float(reply.get("seconds", 0.0)),
            error=reply.get("error"),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        return SandboxResult([], None, None, backend=backend, error=f"bad reply: {exc}")


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
