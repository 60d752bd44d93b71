"""Latency history that outlives a process: the samples the reward's P95 is computed from.

A :class:`LatencyTracker` keeps the last ``window`` latencies per model in memory; with a
:class:`LatencyHistory` it starts from the stored samples and appends each new one, so the P95
that the latency term compares against is the same across runs and, with Redis, across workers.
Stores: :class:`MemoryLatencyHistory`, :class:`SQLiteLatencyHistory` (a table beside the router
state) and :class:`RedisLatencyHistory` (a capped list per model: ``RPUSH`` + ``LTRIM``, atomic).
A history that cannot be read or written is reported once and skipped: latency samples are a
refinement of the reward, never a reason to fail a race.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from .._logging import get_logger
from .._sqlite import init_wal

__all__ = [
    "LATENCY_PREFIX",
    "LatencyHistory",
    "MemoryLatencyHistory",
    "RedisLatencyHistory",
    "SQLiteLatencyHistory",
]

logger = get_logger("phi_core.routing.history")
T = TypeVar("T")


class LatencyHistory(Protocol):
    """Where latency samples persist, per namespace and model (most recent last)."""

    def load(self, namespace: str, window: int) -> dict[str, list[float]]: ...

    def add(self, namespace: str, model: str, seconds: float, window: int) -> None: ...


class MemoryLatencyHistory:
    def __init__(self) -> None:
        self._data: dict[tuple[str, str], list[float]] = {}

    def load(self, namespace: str, window: int) -> dict[str, list[float]]:
        return {m: list(v[-window:]) for (ns, m), v in self._data.items() if ns == namespace}

    def add(self, namespace: str, model: str, seconds: float, window: int) -> None:
        samples = self._data.setdefault((namespace, model), [])
        samples.append(seconds)
        del samples[:-window]


class SQLiteLatencyHistory:
    """Samples in a SQLite table (WAL), trimmed to the window on every write."""

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS latency_samples (namespace TEXT NOT NULL, model TEXT NOT NULL,"
        " at REAL NOT NULL, seconds REAL NOT NULL);"
        "CREATE INDEX IF NOT EXISTS latency_by_model ON latency_samples (namespace, model, at);"
    )

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        if not self._ready:
            init_wal(conn, self._SCHEMA)
            self._ready = True
        return conn

    def _healing(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(conn)``; when the table is gone (the file was moved aside or replaced while
        in use) it is created again and ``work`` runs once more."""
        with self._lock:
            try:
                with contextlib.closing(self._connect()) as conn:
                    return work(conn)
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                self._ready = False
                with contextlib.closing(self._connect()) as conn:
                    return work(conn)

    def load(self, namespace: str, window: int) -> dict[str, list[float]]:
        rows = self._healing(
            lambda conn: conn.execute(
                "SELECT model, seconds FROM latency_samples WHERE namespace = ? ORDER BY at",
                (namespace,),
            ).fetchall()
        )
        out: dict[str, list[float]] = {}
        for model, seconds in rows:
            out.setdefault(model, []).append(float(seconds))
        return {m: v[-window:] for m, v in out.items()}

    def add(self, namespace: str, model: str, seconds: float, window: int) -> None:
        self._healing(lambda conn: self._add(conn, namespace, model, seconds, window))

    @staticmethod
    def _add(
        conn: sqlite3.Connection, namespace: str, model: str, seconds: float, window: int
    ) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO latency_samples VALUES (?, ?, ?, ?)",
                (namespace, model, time.time(), seconds),
            )
            conn.execute(
                "DELETE FROM latency_samples WHERE namespace = ? AND model = ? AND rowid NOT IN"
                " (SELECT rowid FROM latency_samples WHERE namespace = ? AND model = ?"
                "  ORDER BY at DESC LIMIT ?)",
                (namespace, model, namespace, model, window),
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


LATENCY_PREFIX = "phi:latency:v1"
"""The key prefix of the latency history in Redis unless one is given."""


class RedisLatencyHistory:
    """A capped list per (namespace, model) in Redis; several workers append atomically."""

    def __init__(self, client: Any, *, prefix: str = LATENCY_PREFIX) -> None:
        self._client = client
        self.prefix = prefix

    def _key(self, namespace: str, model: str) -> str:
        return f"{self.prefix}:{namespace}:{model}"

    def load(self, namespace: str, window: int) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for raw in self._client.smembers(f"{self.prefix}:{namespace}:models"):
            model = raw.decode() if isinstance(raw, bytes) else str(raw)
            values = self._client.lrange(self._key(namespace, model), -window, -1)
            out[model] = [float(v) for v in values]
        return out

    def add(self, namespace: str, model: str, seconds: float, window: int) -> None:
        pipe = self._client.pipeline(transaction=True)
        pipe.sadd(f"{self.prefix}:{namespace}:models", model)
        pipe.rpush(self._key(namespace, model), repr(float(seconds)))
        pipe.ltrim(self._key(namespace, model), -window, -1)
        pipe.execute()
