"""A persistent response cache for selection runs (SQLite, WAL).

The key is :func:`~phi_core.providers.call.request_key`, a SHA-256 of the *whole* request: model, endpoint, system prompt, messages (without
their timestamps), tools, thinking level, max tokens, temperature, top-p, seed, response format
— and a **sample index**. Re-running a selection is free, while several samples of the same
prompt at temperature > 0 (sample 0, 1, 2, ...) stay distinct instead of collapsing into one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path

from .._logging import get_logger
from .._sqlite import init_wal, quarantine, sqlite_failure
from ..providers.call import CachedResponse
from ..types import AssistantMessage

logger = get_logger("phi_core.select.cache")

__all__ = ["ResponseCache"]


class ResponseCache:
    """``key -> (assistant message, original latency)`` in a SQLite file (``":memory:"`` works too).

    Reads and writes run in a worker thread so the event loop never blocks on disk. A write that
    fails (another process holds the file locked for longer than ``timeout`` seconds, a full
    disk) raises; the call path logs it and keeps the answer it paid for.
    """

    def __init__(self, path: str | Path = ":memory:", *, timeout: float = 5.0) -> None:
        self.path = str(path)
        self.set_aside: Path | None = None
        """Where a damaged file found at ``path`` was moved (``None``: none was)."""
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = self._open(timeout)
        except (sqlite3.OperationalError, OSError) as exc:  # locked, read-only, full: for the user
            raise sqlite_failure(exc, self.path, "open the response cache") from None
        except sqlite3.DatabaseError as exc:  # garbage or truncated: a cache can start afresh
            self.set_aside = quarantine(
                Path(self.path), str(exc), kind="a response cache", log=logger
            )
            self._db = self._open(timeout)
        self.hits = 0
        self.misses = 0

    def _open(self, timeout: float) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=timeout)
        try:
            init_wal(
                db,
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, message TEXT NOT NULL,"
                " latency REAL NOT NULL)",
                timeout=max(timeout, 1.0),
            )
        except BaseException:
            db.close()
            raise
        return db

    def get_sync(self, key: str) -> CachedResponse | None:
        with self._lock:
            row = self._db.execute(
                "SELECT message, latency FROM responses WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return CachedResponse(AssistantMessage.model_validate_json(row[0]), float(row[1]))

    def put_sync(self, key: str, message: AssistantMessage, latency: float) -> None:
        with self._lock:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO responses (key, message, latency) VALUES (?, ?, ?)",
                    (key, message.model_dump_json(), latency),
                )
                self._db.commit()
            except sqlite3.Error as exc:
                if self._db.in_transaction:  # leave no half-open transaction behind
                    with contextlib.suppress(sqlite3.Error):
                        self._db.rollback()
                raise sqlite_failure(exc, self.path, "write the response cache") from None

    async def get(self, key: str) -> CachedResponse | None:
        return await asyncio.to_thread(self.get_sync, key)

    async def put(self, key: str, message: AssistantMessage, latency: float) -> None:
        await asyncio.to_thread(self.put_sync, key, message, latency)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
