"""One way to open the project's SQLite files (session store, router state, preview and response
caches): WAL mode plus the schema, retried while another process holds the database; and one way
to report their failures (:func:`sqlite_failure` names the real cause: disk full, locked).

SQLite's busy timeout does not cover every lock taken while a fresh database file is switched
to WAL and its tables are created: a second process starting at the same moment can get
"database is locked" at once. Initialisation is idempotent, so it is retried until ``timeout``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path

from .errors import StateStoreError

__all__ = ["init_wal", "quarantine", "sqlite_failure"]


def init_wal(conn: sqlite3.Connection, schema: str, *, timeout: float = 30.0) -> None:
    """Switch ``conn``'s database to WAL and run ``schema`` (``CREATE ... IF NOT EXISTS``),
    retrying on a locked or busy database for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(schema)
            return
        except sqlite3.OperationalError as exc:
            message = str(exc).lower()
            if ("locked" not in message and "busy" not in message) or (
                time.monotonic() + delay > deadline
            ):
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


def sqlite_failure(exc: sqlite3.Error | OSError, path: Path | str, action: str) -> StateStoreError:
    """A SQLite failure as a :class:`StateStoreError` that names the real cause."""
    text = str(exc)
    lowered = text.lower()
    if "disk is full" in lowered or "disk full" in lowered:
        cause = "disk full (free some space, or move the state elsewhere)"
    elif "locked" in lowered or "busy" in lowered:
        cause = (
            "the database is locked: another process kept it busy for too long (retry, or "
            "stop the other process)"
        )
    elif "readonly" in lowered or "read-only" in lowered:
        cause = "the file or its folder is read-only"
    elif "not a database" in lowered or "malformed" in lowered:
        cause = "it is not a SQLite database, or a damaged one (move it aside, or use another file)"
    elif "unable to open" in lowered:
        cause = "it cannot be opened (check that the folder exists and is readable)"
    else:
        cause = text
    return StateStoreError(f"Cannot {action} {path}: {cause}.")


def quarantine(path: Path, why: str, *, kind: str, log: logging.Logger) -> Path:
    """Move a file that is not ``kind`` (garbage, truncated, the wrong shape) and its SQLite
    companions aside, with one warning on ``log`` (the owner's logger), so a fresh one can take
    its place; nothing is deleted."""
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm", "-journal"):
        companion = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            os.replace(companion, aside.with_name(aside.name + suffix))
    log.warning("%s is not %s (%s); moved it to %s and starting afresh.", path, kind, why, aside)
    return aside
