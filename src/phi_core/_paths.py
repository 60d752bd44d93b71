"""The one user directory that holds phi-core's state, caches and logs.

``$PHI_HOME`` when set, else ``~/.phi``. Every command and every default location (router
state, preview and response caches, the run log, stored keys and aliases) lives below it, so
one environment variable moves or isolates all of it (the tests point it at a temporary
directory).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["HOME_ENV", "user_dir", "user_path"]

HOME_ENV = "PHI_HOME"


def user_dir(*, create: bool = False) -> Path:
    """``$PHI_HOME`` (default ``~/.phi``); created (mode 0700) when ``create`` is true."""
    raw = os.environ.get(HOME_ENV, "").strip()
    path = Path(raw or "~/.phi").expanduser()
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def user_path(name: str, *, create_dir: bool = False) -> Path:
    """A file or folder ``name`` inside the user directory (the directory made on request)."""
    return user_dir(create=create_dir) / name
