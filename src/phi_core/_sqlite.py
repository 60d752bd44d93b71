"""One way to open the project's SQLite files (session store, router state, preview and response
caches): WAL mode plus the schema, retried while another process holds the database.

SQLite's busy timeout does not cover every lock taken while a fresh database file is switched
to WAL and its tables are created: a second process starting at the same moment can get
"database is locked" at once. Initialisation is idempotent, so it is retried until ``timeout``.
"""

from __future__ import annotations

import sqlite3
import time

__all__ = ["init_wal"]


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
