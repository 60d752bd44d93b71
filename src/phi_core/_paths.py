"""The one user directory that holds phi-core's state, caches and logs.

``$PHI_HOME`` when set, else ``~/.phi``. Every command and every default location (router
state, preview and response caches, the run log, stored keys and aliases) lives below it, so
one environment variable moves or isolates all of it (the tests point it at a temporary
directory).

A user directory that exists but is not a folder (``PHI_HOME`` pointing at a file) is reported
with a message naming the path and saying how to fix it: :func:`check_user_dir` raises it as a
:class:`~phi_core.errors.UserError`, and ``user_dir(create=True)`` as the ``FileExistsError``
``mkdir`` raised before (so callers that treat it as an ``OSError`` keep doing so).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError

__all__ = ["HOME_ENV", "check_user_dir", "user_dir", "user_path"]

HOME_ENV = "PHI_HOME"


def _not_a_folder(path: Path) -> str:
    if os.environ.get(HOME_ENV, "").strip():
        where = f"{HOME_ENV} ({str(path)!r})"
    else:
        where = f"The user directory {str(path)!r} (the default, as {HOME_ENV} is not set)"
    return (
        f"{where} is not a folder; phi keeps its keys, run log and router state in that folder, "
        f"so it must be one. Point {HOME_ENV} at a folder (it is created if missing), or move "
        "the file aside."
    )


def check_user_dir() -> Path:
    """The user directory, checked to be a folder (or missing: made when first needed).

    Raises:
        UserError: it exists but is not a folder, or lies below a file (names it and says what
            to do).
    """
    path = user_dir()
    for folder in (path, *path.parents):  # PHI_HOME itself, or a folder above it, is a file
        if folder.exists():
            if not folder.is_dir():
                raise UserError(_not_a_folder(path))
            break
    return path


def user_dir(*, create: bool = False) -> Path:
    """``$PHI_HOME`` (default ``~/.phi``); created (mode 0700) when ``create`` is true.

    Raises:
        FileExistsError: ``create`` and the path is a file or lies below one (the message names
            it and says what to do).
    """
    raw = os.environ.get(HOME_ENV, "").strip()
    path = Path(raw or "~/.phi").expanduser()
    if create:
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise FileExistsError(_not_a_folder(path)) from None
    return path


def user_path(name: str, *, create_dir: bool = False) -> Path:
    """A file or folder ``name`` inside the user directory (the directory made on request).

    Raises:
        FileExistsError: ``create_dir`` and the user directory is a file (see :func:`user_dir`).
    """
    return user_dir(create=create_dir) / name
