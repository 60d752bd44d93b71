"""Where a ``bash`` command runs: confined by the kernel when this machine allows it.

* ``filesystem`` (bubblewrap): the command sees a file system built for it —
  the system directories (``/usr``, ``/bin``, ``/lib*``, ``/etc``, ``/opt``, ``/sys``)
  read-only, the toolchains its ``PATH`` names (see :func:`toolchain_paths`) read-only, the
  workspace read-write, a private ``/tmp`` (empty, gone after the command), minimal ``/dev``
  (no disks), its own ``/proc`` and PID namespace. Nothing else of the host is there: no home
  folders (``~/.ssh``, ``~/.aws``, other projects' ``.env`` files), no ``/root``, ``/var`` or
  ``/run`` (no sockets of other services), no phi-core user directory (stored API keys). Run
  by root, what of ``/etc`` other users may not read (``/etc/shadow``, host keys) cannot be
  read either, nor the credential stores of visible toolchains (``~/.cargo/credentials``). A
  command — or a script it runs, which the command policy cannot read — can neither write
  outside the workspace nor read what was left out, whatever the policy made of it: run by
  root it has no capabilities, so it cannot unmount or remount what it was given. More host
  paths are made visible with ``BashSettings.visible``. The network is the host's unless
  ``BashSettings.network`` is off — and with it the abstract Unix sockets of the host's
  services (X11, some D-Bus and container daemons), which live in the network namespace.
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
import functools
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal

from .._logging import get_logger
from .._paths import user_dir
from .base import ToolError

__all__ = ["Isolation", "isolation_prefix", "toolchain_paths"]

Isolation = Literal["auto", "filesystem", "processes", "never"]
UNSHARE_ARGS = ("--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child")

logger = get_logger("phi_core.tools")
_works: dict[tuple[str, ...], bool] = {}
_warned = False


SYSTEM_DIRS = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys",
    "/nix",
)  # fmt: skip
"""Visible (read-only) to every command under ``filesystem`` isolation, where they exist."""
_HOME_SECRETS = (
    ".cargo/credentials", ".cargo/credentials.toml", ".cargo/config", ".cargo/config.toml",
    ".local/share/keyrings", ".local/share/python_keyring", ".local/share/gnome-keyring",
    ".local/share/fish", ".local/share/zsh", ".local/share/recently-used.xbel", ".local/state",
)  # fmt: skip
"""Credential stores, and shell histories (which hold the passwords typed on command lines),
inside the folders a ``PATH`` entry can make visible (``~/.cargo``, ``~/.local``): hidden. A
registry token may sit in cargo's config as in its credentials file."""
_INSTALL_BINS = ("bin", "sbin", "shims")
_ETC_WALK_LIMIT = 20_000


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _homes() -> set[str]:
    homes = {"/", "/home", "/root", os.path.realpath(os.path.expanduser("~"))}
    with contextlib.suppress(OSError):
        homes.update(e.path for e in os.scandir("/home") if e.is_dir(follow_symlinks=False))
    return homes


def toolchain_paths(search_path: str, extra: Iterable[str] = ()) -> list[str]:
    """The host folders a command needs, outside the system directories, to run what its
    ``PATH`` names: each absolute ``PATH`` entry and, for a ``bin``, ``sbin`` or ``shims``
    folder, the installation it belongs to (its parent: a virtual environment, ``~/.pyenv``,
    ``~/.cargo``) unless that is a home folder; the running Python's installations (a virtual
    environment and its base); and ``extra``. Symbolic links resolved, missing ones left out."""
    homes = _homes()
    found: list[str] = []
    entries = [e for e in search_path.split(os.pathsep) if e.startswith("/")]
    for entry in entries:
        real = os.path.realpath(entry)
        found.append(real)
        parent = os.path.dirname(real)
        if os.path.basename(real) in _INSTALL_BINS and parent not in homes:
            found.append(parent)
    found += [os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)]
    found += [os.path.realpath(os.path.expanduser(e)) for e in extra]
    kept: list[str] = []
    for path in dict.fromkeys(found):
        if os.path.exists(path) and not any(_under(path, d) for d in SYSTEM_DIRS):
            kept.append(path)
    return kept


def walk_bounded(
    root: str, limit: int, descend: Callable[[str, os.stat_result], bool]
) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` with its own ``lstat`` (links are not followed), at most
    ``limit`` of them; a folder is entered when ``descend(path, info)`` says so. Entries that
    vanish or cannot be read meanwhile are passed over."""
    pending, seen = [root], 0
    while pending and seen < limit:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode) and descend(entry.path, info):
                pending.append(entry.path)
            yield entry.path, info


def _others_may_read(info: os.stat_result) -> bool:
    folder = stat.S_ISDIR(info.st_mode)
    return bool(info.st_mode & stat.S_IROTH) and (not folder or bool(info.st_mode & stat.S_IXOTH))


@functools.cache
def _unreadable_in_etc() -> tuple[tuple[str, bool], ...]:
    """What of ``/etc`` other users may not read (path, is a folder): hidden from commands
    run by root, who could otherwise read it (``/etc/shadow``, SSH host keys)."""
    return tuple(
        (path, stat.S_ISDIR(info.st_mode))
        for path, info in walk_bounded("/etc", _ETC_WALK_LIMIT, lambda _p, i: _others_may_read(i))
        if not stat.S_ISLNK(info.st_mode) and not _others_may_read(info)
    )


def _bwrap(
    binary: str, workspace: str, visible: Sequence[str], network: bool = True
) -> tuple[str, ...]:
    argv: list[str] = [binary]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    resolv = os.path.realpath("/etc/resolv.conf")  # often a link into /run (systemd-resolved)
    extra = list(visible)
    if not _under(resolv, "/etc") and os.path.exists(resolv):
        extra.append(resolv)
    binds = {p: "--ro-bind" for p in extra if not _under(p, workspace)}
    binds[workspace] = "--bind"
    for path in sorted(binds, key=lambda p: (p.count("/"), p != workspace)):
        argv += [binds[path], path, path]
    # what must stay hidden even where a visible folder holds it
    masks = [(os.path.realpath(user_dir()), True)]
    masks += [(os.path.join(home, s), True) for home in _homes() for s in _HOME_SECRETS]
    if os.geteuid() == 0:
        masks += list(_unreadable_in_etc())
    for path, folder in masks:
        if (
            not any(_under(path, p) for p in (*binds, *SYSTEM_DIRS))
            or _under(workspace, path)
            or not os.path.lexists(path)
        ):
            continue
        if folder and os.path.isdir(path) and not os.path.islink(path):
            argv += ["--tmpfs", path]
        elif not os.path.islink(path):
            argv += ["--ro-bind", "/dev/null", path]
    argv += ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--chdir", workspace]
    if not network:
        argv.append("--unshare-net")
    if os.geteuid() == 0:
        # run by root, the command would keep every capability: it could unmount the masks,
        # remount the read-only binds writable and make device nodes
        argv += ["--cap-drop", "ALL"]
    return (*argv, "--")


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


async def isolation_prefix(
    mode: Isolation, workspace: str, visible: Sequence[str] = (), *, network: bool = True
) -> tuple[str, tuple[str, ...]]:
    """(the isolation used, the argv a command runs under) for ``mode``; ``visible``: the host
    folders a ``filesystem``-isolated command sees read-only besides the system directories
    (:func:`toolchain_paths`); ``network=False``: a ``filesystem``-isolated command gets its
    own network namespace (loopback only)."""
    global _warned
    if mode == "never":
        return "never", ()
    if mode in ("auto", "filesystem"):
        bwrap = shutil.which("bwrap") or ""
        probe = (bwrap, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                 "--unshare-pid", "--die-with-parent", "--")  # fmt: skip
        if bwrap and await _probe(probe):
            return "filesystem", _bwrap(bwrap, workspace, visible, network)
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
