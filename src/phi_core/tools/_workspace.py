"""The workspace root the built-in tools may not leave.

A path from the model is resolved to its real path (``..``, absolute paths and symbolic links
followed) and refused unless it lies inside the root; the pseudo-filesystems ``/proc``, ``/sys``
and ``/dev`` are refused even when the root contains them. Files are then opened by walking from
an open descriptor of the root, one component at a time, with ``O_NOFOLLOW``: a directory swapped
for a symbolic link between the check and the open makes the open fail instead of escaping.
Only regular files are read or written (``O_NONBLOCK`` keeps a FIFO from blocking the open), and
writes replace the file (write a temporary file, then rename), so a hard link never carries a
write out of the workspace.

Every refusal is a :class:`PathError`, a :class:`ToolError`: the model gets an error result that
says what was wrong, and the run goes on.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .._paths import user_dir
from ..errors import PathError, UserError

__all__ = ["Entry", "Workspace"]

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
_PSEUDO_FILESYSTEMS = ("/proc", "/sys", "/dev")
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC


_PHRASES = {
    "dir": "a directory", "fifo": "a FIFO (named pipe)", "socket": "a socket",
    "device": "a device", "symbolic link": "a symbolic link",
}  # fmt: skip


def _kind(mode: int) -> str:
    return _PHRASES.get(_entry_kind(mode), "not a regular file")


@dataclass(frozen=True)
class Resolved:
    """A checked path: its real absolute form and its components below the root."""

    shown: str
    real: str
    parts: tuple[str, ...]


class Workspace:
    """A directory the tools are confined to. ``root`` defaults to the current directory."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        raw = os.fspath(root) if root is not None else os.getcwd()
        real = os.path.realpath(raw)
        if not os.path.isdir(real):
            raise UserError(
                f"The tools' workspace {raw!r} is not an existing directory; create it or pass "
                "the folder the agent should work in."
            )
        self.root = real

    def __repr__(self) -> str:
        return f"Workspace({self.root!r})"

    def __fspath__(self) -> str:
        return self.root

    # ------------------------------------------------------------------ checking paths

    def resolve(self, path: str) -> Resolved:
        """Check ``path`` (relative to the root, or absolute inside it); raise :class:`PathError`."""
        if not isinstance(path, str):
            raise PathError(f"A path must be a string, got {type(path).__name__}.")
        if "\x00" in path:
            raise PathError(f"The path {path[:200]!r} contains a NUL byte; no file has that name.")
        shown = path if len(path) <= 200 else path[:200] + "…"
        try:
            encoded = os.fsencode(path)
        except UnicodeEncodeError:
            raise PathError(f"The path {shown!r} is not valid text.") from None
        if len(encoded) > MAX_PATH_BYTES or any(
            len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")
        ):
            raise PathError(
                f"The path {shown!r} is too long ({len(encoded)} bytes; at most "
                f"{MAX_PATH_BYTES} in all and {MAX_NAME_BYTES} per name)."
            )
        if path.startswith("~"):
            raise PathError(
                f"The path {shown!r} starts with `~`, which is not expanded: paths are relative "
                f"to the workspace {self.root}."
            )
        joined = os.path.join(self.root, path or ".")
        real = os.path.realpath(joined)
        if not self.contains(real):
            raise PathError(
                f"The path {shown!r} is outside the workspace {self.root}; the tools can only "
                "reach files inside it. Use a path relative to the workspace."
            )
        private = self._private()
        if private is not None and (real == private or real.startswith(private + "/")):
            raise PathError(
                f"The path {shown!r} is in phi-core's user directory ({private}: stored API "
                "keys, logs, caches), which the tools never touch."
            )
        for pseudo in _PSEUDO_FILESYSTEMS:
            if real == pseudo or real.startswith(pseudo + "/"):
                raise PathError(f"The path {shown!r} is in {pseudo}, which the tools never touch.")
        rel = os.path.relpath(real, self.root)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        return Resolved(shown=shown, real=real, parts=parts)

    def _private(self) -> str | None:
        """phi-core's user directory (``$PHI_HOME``) when it lies inside the root: stored API
        keys, the run log and caches, which no tool reads, writes, lists or searches."""
        private = os.path.realpath(user_dir())
        return private if self.contains(private) and private != self.root else None

    def contains(self, real: str) -> bool:
        root = self.root
        return real == root or real.startswith(root.rstrip("/") + "/")

    def relative(self, real: str) -> str:
        """How a path inside the root is shown to the model."""
        rel = os.path.relpath(real, self.root)
        return "." if rel == "." else rel

    # ------------------------------------------------------------------ opening

    @contextlib.contextmanager
    def _directory(
        self, parts: tuple[str, ...], shown: str, *, create: bool = False
    ) -> Iterator[int]:
        """An fd of the directory ``parts`` below the root, walked without following links."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise PathError(f"No such folder: {shown!r}.") from None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    child = self._open_dir_child(fd, part, shown)
                except OSError as exc:
                    raise self._walk_error(exc, shown) from None
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _open_dir_child(self, fd: int, part: str, shown: str) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise self._walk_error(exc, shown) from None

    @staticmethod
    def _walk_error(exc: OSError, shown: str) -> PathError:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return PathError(
                f"The path {shown!r} changed while it was opened (a folder became a link or a "
                "file); nothing was done."
            )
        return PathError(f"Cannot open {shown!r}: {exc.strerror or exc}.")

    def open_file(self, path: str) -> tuple[int, os.stat_result, Resolved]:
        """An fd of the regular file ``path`` opened for reading, its stat and its resolution."""
        resolved = self.resolve(path)
        if not resolved.parts:
            raise PathError(f"{resolved.shown!r} is the workspace folder, not a file.")
        with self._directory(resolved.parts[:-1], resolved.shown) as parent:
            try:
                fd = os.open(
                    resolved.parts[-1],
                    os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC,
                    dir_fd=parent,
                )
            except FileNotFoundError:
                raise PathError(f"File not found: {resolved.shown!r}.") from None
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # a socket
                    raise PathError(f"{resolved.shown!r} is a socket, not a file.") from None
                raise self._walk_error(exc, resolved.shown) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise PathError(f"{resolved.shown!r} is {_kind(info.st_mode)}, not a regular file.")
        return fd, info, resolved

    def open_directory(self, path: str) -> tuple[int, Resolved]:
        """An fd of the directory ``path`` (the caller closes it)."""
        resolved = self.resolve(path)
        with self._directory(resolved.parts, resolved.shown) as fd:
            return os.dup(fd), resolved

    def write_file(self, path: str, data: bytes, *, max_bytes: int) -> Resolved:
        """Replace (or create) the regular file ``path`` with ``data``; parents are created."""
        if len(data) > max_bytes:
            raise PathError(
                f"Refusing to write {len(data)} bytes to {path[:200]!r}: the limit is {max_bytes}."
            )
        resolved = self.resolve(path)
        if not resolved.parts:
            raise PathError(f"{resolved.shown!r} is the workspace folder, not a file.")
        name = resolved.parts[-1]
        with self._directory(resolved.parts[:-1], resolved.shown, create=True) as parent:
            mode = 0o644
            try:
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is not None:
                if not stat.S_ISREG(info.st_mode):
                    raise PathError(
                        f"{resolved.shown!r} is {_kind(info.st_mode)}; only regular files are "
                        "written."
                    )
                mode = stat.S_IMODE(info.st_mode)
            temp = f".{name[:200]}.phi-{os.getpid()}-{id(data):x}.tmp"
            fd = os.open(
                temp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                mode,
                dir_fd=parent,
            )
            try:
                with os.fdopen(fd, "wb", closefd=True) as handle:
                    handle.write(data)
                os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=parent)
                raise
        return resolved

    # ------------------------------------------------------------------ walking

    def walk(self, path: str, max_depth: int, skip_dirs: Iterable[str] = ()) -> Iterator[Entry]:
        """Entries under the folder ``path`` (or the file itself), depth first, sorted by name.

        Symbolic links are reported and never followed; folders are opened relative to their
        parent's descriptor with ``O_NOFOLLOW``, so the walk cannot be led out of the root.
        """
        resolved = self.resolve(path)
        skip = set(skip_dirs)
        if resolved.parts:
            with self._directory(resolved.parts[:-1], resolved.shown) as parent:
                info = os.stat(resolved.parts[-1], dir_fd=parent, follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode):
                    rel = self.relative(resolved.real)
                    yield Entry(rel, resolved.parts[-1], _entry_kind(info.st_mode), parent)
                    return
        private = self._private()
        hidden = self.relative(private) if private is not None else None
        with self._directory(resolved.parts, resolved.shown) as top:
            yield from self._walk_fd(top, self.relative(resolved.real), 1, max_depth, skip, hidden)

    def _walk_fd(
        self,
        fd: int,
        prefix: str,
        depth: int,
        max_depth: int,
        skip: set[str],
        hidden: str | None = None,
    ) -> Iterator[Entry]:
        try:
            with os.scandir(fd) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            rel = entry.name if prefix == "." else f"{prefix}/{entry.name}"
            if rel == hidden:  # phi-core's user directory: not listed, not searched
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            kind = _entry_kind(mode)
            yield Entry(rel, entry.name, kind, fd)
            if kind == "dir" and depth < max_depth and entry.name not in skip:
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                try:
                    yield from self._walk_fd(child, rel, depth + 1, max_depth, skip, hidden)
                finally:
                    os.close(child)


def _entry_kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


@dataclass(frozen=True)
class Entry:
    """One entry of :meth:`Workspace.walk`, valid until the walk moves on.

    :meth:`open` opens it (relative to its folder's descriptor, without following links) if it
    is still a regular file.
    """

    path: str
    name: str
    kind: str
    dir_fd: int

    def open(self) -> tuple[int, os.stat_result] | None:
        """A read fd and stat of this entry if it is (still) a regular file, else None."""
        try:
            fd = os.open(
                self.name,
                os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC,
                dir_fd=self.dir_fd,
            )
        except OSError:
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return None
        return fd, info
