"""The project's one way to replace a file atomically, to lock it between processes and to
write a user-named output.

Every file store (router state, sessions, stored keys and aliases) writes through
:func:`atomic_write` and serialises writers with :func:`file_lock`, so a reader sees the old
file or the new one, never half of one, and concurrent writers do not lose each other's update.

:func:`atomic_write` writes a unique temporary file next to the target (created with the final
mode, so a secret file is 0600 from its first byte), fsyncs it, renames it over the target and
fsyncs the directory. On any failure the temporary file is removed and the target is untouched;
a full disk surfaces as the ``OSError`` it is (``ENOSPC``), not as a later symptom.

:func:`file_lock` takes an ``flock`` on a side file ``<name>.lock`` (the target itself is
replaced by renames, so it cannot carry the lock), shared or exclusive, waiting at most
``timeout`` seconds when one is given.

:func:`export_target` is where a user-named output (a CSV, a JSON report, a plot, an exported
config) is written: missing folders are made, and a path that cannot be written is a
:class:`~phi_core.errors.UserError` naming it and the reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import UserError

__all__ = ["atomic_write", "export_target", "file_lock"]


def atomic_write(path: Path, payload: bytes, *, mode: int = 0o644, dir_mode: int = 0o700) -> None:
    """Replace ``path`` with ``payload`` atomically (see the module docstring).

    Missing parent directories are created with ``dir_mode``.
    """
    directory = path.parent
    directory.mkdir(mode=dir_mode, parents=True, exist_ok=True)
    tmp = directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # the umask must not widen or narrow it
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def file_lock(
    path: Path,
    *,
    exclusive: bool = True,
    timeout: float | None = None,
    on_timeout: Callable[[], BaseException] | None = None,
) -> Iterator[None]:
    """Hold an ``flock`` on ``<path>.lock`` for the duration of the block.

    Raises:
        TimeoutError: ``timeout`` is set and the lock was not free within it (or what
            ``on_timeout()`` returns, so a store raises its own error, e.g. a locked session).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        kind = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if timeout is None:
            fcntl.flock(fd, kind)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, kind | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        if on_timeout is not None:
                            raise on_timeout() from None
                        raise TimeoutError(
                            f"{str(path)!r} stayed locked by another process for {timeout:g} s"
                        ) from None
                    time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def check_export_target(path: str | Path) -> Path:
    """``path`` as a :class:`Path` if an export could write it (checked before the work that
    produces the export): a :class:`UserError` when it is a folder or a file stands where one
    of its folders should be."""
    target = Path(path)
    blocking = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None or target.is_dir():
        why = f"{str(blocking)!r} is a file, not a folder" if blocking else "Is a directory"
        raise UserError(f"Cannot write {str(target)!r}: {why}; pass a writable file path.")
    return target


@contextlib.contextmanager
def export_target(path: str | Path) -> Iterator[Path]:
    """Where an export writes ``path``: its missing parent folders are made, and a path that
    cannot be written is a :class:`UserError` naming it and the reason."""
    target = check_export_target(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        yield target
    except OSError as error:
        raise UserError(
            f"Cannot write {str(error.filename or target)!r}: {error.strerror or error}; "
            "pass a writable file path."
        ) from None
