"""How the sandbox is built here: the file-system layout, and the command line that builds it
with bubblewrap (``bwrap``) or, without it, util-linux's ``unshare``.

One layout, two renderers. Inside the sandbox there is:

- the system directories (``/usr``; ``/bin``, ``/lib``, … as the symlinks or read-only binds
  they are on the host) and ``/etc/ld.so.cache``, read-only; nothing else of ``/etc``;
- the Python installation, read-only, at ``/opt/python`` (unless it lives under ``/usr``), its
  ``site-packages`` hidden under an empty tmpfs;
- the supervisor and the worker, read-only, in ``/opt/phi``;
- a fresh ``/proc`` of the sandbox's own PID namespace, with ``/proc/sys`` and friends
  read-only; ``/dev`` with ``null``, ``zero`` and ``urandom`` only;
- a private, size-limited tmpfs at ``/tmp``, the working directory;
- a read-only root: no ``/home``, ``/root``, ``/work``, ``/var`` or ``/run``.

Both renderers give new user, PID, network, IPC, UTS, cgroup and mount namespaces, uid and gid
65534 with no capabilities and ``no_new_privs``, no further user namespaces, and SIGKILL for the
whole sandbox when the process that started it dies.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "BACKENDS",
    "INSIDE",
    "SUPERVISOR",
    "BackendName",
    "Interpreter",
    "Mount",
    "bwrap_argv",
    "drop_to_sandbox_user",
    "environment",
    "find_tools",
    "layout",
    "own_interpreter",
    "staged",
    "unshare_argv",
]

BackendName = Literal["bwrap", "unshare"]
BACKENDS: tuple[BackendName, ...] = ("bwrap", "unshare")
SUPERVISOR = Path(__file__).with_name("_supervisor.py")
INSIDE = "/opt/phi"
PYTHON_INSIDE = "/opt/python"
WORKDIR = "/tmp"
SANDBOX_UID = 65534
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_UNSHARE_TOOLS = ("unshare", "setpriv", "mount", "umount", "pivot_root", "sh", "env")
_STAGE_TOOLS = ("unshare", "setpriv", "mount", "sh")
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")


@dataclass(frozen=True)
class Interpreter:
    """A Python installation on the host and where its binary appears inside the sandbox."""

    executable: str
    """The interpreter binary on the host (symlinks resolved)."""
    prefix: str
    """Its installation directory (``sys.base_prefix``)."""
    version: str
    """``major.minor``, e.g. ``3.11``."""

    @property
    def moved(self) -> bool:
        """True when the installation is bound at ``/opt/python`` (it is not under /usr)."""
        return not any(_under(self.prefix, d) for d in _SYSTEM)

    @property
    def inside(self) -> str:
        if not self.moved:
            return self.executable
        return PYTHON_INSIDE + "/" + os.path.relpath(self.executable, self.prefix)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def own_interpreter() -> Interpreter:
    """The interpreter running phi-core (a virtual environment's base installation)."""
    return Interpreter(
        executable=os.path.realpath(sys.executable),
        prefix=os.path.realpath(sys.base_prefix),
        version=f"{sys.version_info[0]}.{sys.version_info[1]}",
    )


@dataclass(frozen=True)
class Mount:
    """One step of the sandbox's file-system layout."""

    kind: Literal["ro", "dev", "symlink", "tmpfs", "proc", "dir"]
    dest: str
    source: str = ""
    size: int = 0
    directory: bool = True
    """For binds: the source is a directory (else a file)."""


def _bind(kind: Literal["ro", "dev"], dest: str, source: str) -> Mount:
    return Mount(kind, dest, source, directory=os.path.isdir(source))


def layout(interpreter: Interpreter, worker: Path | None, tmp_bytes: int) -> list[Mount]:
    """The mounts that make the sandbox's file system, parents before children."""
    mounts: list[Mount] = []
    for path in _SYSTEM:
        if os.path.islink(path):
            mounts.append(Mount("symlink", path, os.readlink(path)))
        elif os.path.isdir(path):
            mounts.append(_bind("ro", path, path))
    if os.path.isfile("/etc/ld.so.cache"):
        mounts.append(_bind("ro", "/etc/ld.so.cache", "/etc/ld.so.cache"))
    if interpreter.moved:
        mounts.append(_bind("ro", PYTHON_INSIDE, interpreter.prefix))
        packages = f"lib/python{interpreter.version}/site-packages"
        if os.path.isdir(os.path.join(interpreter.prefix, packages)):
            mounts.append(Mount("tmpfs", f"{PYTHON_INSIDE}/{packages}", size=4096))
    mounts.append(_bind("ro", f"{INSIDE}/supervisor.py", str(SUPERVISOR)))
    if worker is not None:
        mounts.append(_bind("ro", f"{INSIDE}/worker.py", str(worker)))
    mounts.append(Mount("proc", "/proc"))
    mounts.append(Mount("dir", "/dev"))
    for device in ("null", "zero", "urandom"):
        mounts.append(_bind("dev", f"/dev/{device}", f"/dev/{device}"))
    mounts.append(Mount("tmpfs", WORKDIR, size=tmp_bytes))
    return mounts


def environment(interpreter: Interpreter) -> dict[str, str]:
    """The whole environment inside the sandbox: nothing of the caller's."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": WORKDIR}
    if interpreter.moved:  # its libpython may be found through an absolute RUNPATH on the host
        env["LD_LIBRARY_PATH"] = f"{PYTHON_INSIDE}/lib"
    return env


def find_tools(backend: BackendName, search_path: str | None) -> tuple[dict[str, str], list[str]]:
    """The programs ``backend`` needs, found on ``search_path`` (default: ``$PATH`` plus the
    sbin directories), and the names of those missing."""
    if search_path is None:
        search_path = os.pathsep.join(
            [os.environ.get("PATH", ""), "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        )
    names = ("bwrap",) if backend == "bwrap" else _UNSHARE_TOOLS
    if os.geteuid() == 0:
        names = tuple(dict.fromkeys((*names, *_STAGE_TOOLS)))  # see staged()
    found: dict[str, str] = {}
    missing: list[str] = []
    for name in names:
        where = shutil.which(name, path=search_path)
        if where is None:
            missing.append(name)
        else:
            found[name] = where
    return found, missing


def _world_readable(path: str) -> bool:
    return any(_under(path, d) for d in (*_SYSTEM, "/etc", "/dev"))


def staged(
    tools: dict[str, str], stage: str, mounts: Sequence[Mount]
) -> tuple[list[Mount], list[str], list[str]]:
    """For a caller running as root: the same layout with every source that is not a system
    path bound first into ``stage`` (an empty host directory), where uid 65534 can reach it.

    Run by root, the sandbox's uid 65534 would be root on the host (its user namespace maps
    it to the caller), which also exempts it from ``RLIMIT_NPROC``. So the sandbox is built by
    uid 65534 instead: a private mount namespace (real root) binds what the sandbox needs where
    that uid can reach it, then drops to it. Returns the new mounts, the commands to prefix
    (``unshare --mount … sh -c``) and the script's lines before it runs the backend.
    """
    q = shlex.quote
    lines = ["set -eu", f"mount -t tmpfs -o size=1m,mode=0755 phi-stage {q(stage)}"]
    out: list[Mount] = []
    for k, m in enumerate(mounts):
        if m.kind != "ro" or _world_readable(m.source):
            out.append(m)
            continue
        target = f"{stage}/{k}"
        make = "mkdir" if m.directory else "touch"
        lines.append(f"{make} {q(target)} && mount --bind {q(m.source)} {q(target)}")
        out.append(Mount("ro", m.dest, target, directory=m.directory))
    prefix = [
        tools["setpriv"], "--pdeathsig", "KILL", "--",
        tools["unshare"], "--mount", "--propagation", "private", "--", tools["sh"], "-c",
    ]  # fmt: skip
    return out, prefix, lines


def drop_to_sandbox_user(tools: dict[str, str], argv: Sequence[str]) -> str:
    """The staging script's last line: run ``argv`` as uid/gid 65534, no other groups."""
    drop = [tools["setpriv"], f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}"]
    return "exec " + " ".join(shlex.quote(a) for a in [*drop, "--clear-groups", "--", *argv])


def bwrap_argv(
    bwrap: str,
    features: set[str],
    mounts: Sequence[Mount],
    env: dict[str, str],
    command: Sequence[str],
) -> list[str]:
    """bubblewrap's command line; ``features`` are the optional flags this bwrap knows
    (``--disable-userns``, ``--size``)."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"]
    argv += ["--as-pid-1", "--cap-drop", "ALL", "--uid", str(SANDBOX_UID)]
    argv += ["--gid", str(SANDBOX_UID), "--hostname", "sandbox", "--clearenv"]
    if "--disable-userns" in features:
        argv.append("--disable-userns")
    for key, value in env.items():
        argv += ["--setenv", key, value]
    for m in mounts:
        if m.kind == "ro":
            argv += ["--ro-bind", m.source, m.dest]
        elif m.kind == "dev":
            argv += ["--dev-bind", m.source, m.dest]
        elif m.kind == "symlink":
            argv += ["--symlink", m.source, m.dest]
        elif m.kind == "tmpfs":
            if "--size" in features:
                argv += ["--size", str(m.size)]
            argv += ["--tmpfs", m.dest]
        elif m.kind == "proc":
            argv += ["--proc", m.dest]  # bwrap covers /proc/sys & co. read-only itself
        else:
            argv += ["--dir", m.dest]
    argv += ["--remount-ro", "/", "--chdir", WORKDIR, "--", *command]
    return argv


def unshare_argv(
    tools: dict[str, str],
    root: str,
    mounts: Sequence[Mount],
    env: dict[str, str],
    command: Sequence[str],
) -> list[str]:
    """util-linux's ``unshare`` with a shell script that builds the same layout in ``root`` (an
    empty host directory; the mounts exist only in the sandbox's mount namespace), pivots into
    it, and drops to uid 65534 in a nested user namespace before running ``command``."""
    q = shlex.quote
    r = q(root)
    lines = [
        "set -eu",
        # The one further user namespace we need (uid 65534, below); the code gets none.
        "echo 1 > /proc/sys/user/max_user_namespaces",
        f"mount -t tmpfs -o size=4m,mode=0755 phi-root {r}",
    ]
    for m in mounts:
        dest = f"{r}{q(m.dest)}"
        if m.kind in ("ro", "dev"):
            make = "mkdir -p" if m.directory else "touch"
            lines.append(f"mkdir -p {r}{q(os.path.dirname(m.dest))} && {make} {dest}")
            lines.append(f"mount --bind {q(m.source)} {dest}")
            flags = "remount,bind,ro,nosuid" + (",nodev" if m.kind == "ro" else "")
            lines.append(f"mount -o {flags} {dest}")
        elif m.kind == "symlink":
            lines.append(f"mkdir -p {r}{q(os.path.dirname(m.dest))} && ln -s {q(m.source)} {dest}")
        elif m.kind == "tmpfs":
            lines.append(f"mkdir -p {dest}")
            lines.append(f"mount -t tmpfs -o size={m.size},nosuid,nodev,mode=1777 tmpfs {dest}")
        elif m.kind == "proc":
            lines.append(f"mkdir -p {dest} && mount -t proc -o nosuid,nodev,noexec proc {dest}")
            for sub in _PROC_READ_ONLY:
                inner = f"{dest}/{sub}"
                lines.append(
                    f"if [ -e {inner} ]; then mount --bind {inner} {inner} && "
                    f"mount -o remount,bind,ro {inner}; fi"
                )
        else:
            lines.append(f"mkdir -p {dest}")
    lines += [
        f"cd {r} && mkdir .old && pivot_root . .old",
        "umount -l /.old && rmdir /.old",
        "mount -o remount,ro,bind /",
        f"cd {WORKDIR}",
        "exec setpriv --no-new-privs --inh-caps=-all -- "
        f"unshare --user --map-user={SANDBOX_UID} --map-group={SANDBOX_UID} -- "
        "env -i " + " ".join(q(f"{k}={v}") for k, v in env.items()) + " "
        + " ".join(q(c) for c in command),
    ]  # fmt: skip
    return [
        tools["setpriv"], "--pdeathsig", "KILL", "--",
        tools["unshare"], "--user", "--map-root-user", "--mount", "--pid", "--fork",
        "--kill-child", "--net", "--ipc", "--uts", "--cgroup", "--propagation", "private",
        "--", tools["sh"], "-c", "\n".join(lines),
    ]  # fmt: skip
