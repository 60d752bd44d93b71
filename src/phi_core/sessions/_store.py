"""Where sessions persist: JSON files (one per session) or one SQLite database.

Both stores are safe for several processes at once.

* :class:`JsonFileSessionStore` writes ``{dir}/{session_id}.json``. A save takes an exclusive
  advisory lock on ``{session_id}.json.lock`` (retried every 50 ms up to ``lock_timeout``, then
  :class:`SessionLockedError`), writes a unique temporary file in the same directory, fsyncs it and
  renames it over the target, so a reader never sees a half-written file and no temporary file
  is left behind. Loads take a shared lock.
* :class:`SqliteSessionStore` keeps one row per session in a WAL-mode database; SQLite's own
  locking serialises writers.

The async methods run the blocking file and database work in a thread, so they never block the
event loop. The module-level functions (:func:`save_session`, …) are the synchronous forms over
a directory.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

from .._files import atomic_write, file_lock
from .._sqlite import init_wal
from ..errors import SessionLockedError, SessionNotFoundError, UserError
from ._model import Session

__all__ = [
    "JsonFileSessionStore",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionStore",
    "SqliteSessionStore",
    "delete_session",
    "list_session_ids",
    "load_session",
    "load_sessions_for_agent",
    "open_session_store",
    "save_session",
]


@runtime_checkable
class SessionStore(Protocol):
    async def save(self, session: Session) -> None: ...
    async def load(self, session_id: str) -> Session: ...
    async def list_ids(self) -> list[str]: ...
    async def delete(self, session_id: str) -> None: ...
    async def list_for_agent(self, agent_id: str) -> list[Session]: ...


def _check_id(session_id: str) -> None:
    if not session_id or "/" in session_id or "\\" in session_id or session_id.startswith("."):
        raise UserError(
            f"Session id {session_id!r} cannot be used as a file name; use ids without "
            "path separators or a leading dot."
        )


class _ThreadedStore(abc.ABC):
    """The async :class:`SessionStore` protocol over a store's blocking ``*_sync`` methods,
    each run in a worker thread so file locks and SQLite never block the event loop."""

    @abc.abstractmethod
    def save_sync(self, session: Session) -> None: ...

    @abc.abstractmethod
    def load_sync(self, session_id: str) -> Session: ...

    @abc.abstractmethod
    def list_ids_sync(self) -> list[str]: ...

    @abc.abstractmethod
    def delete_sync(self, session_id: str) -> None: ...

    @abc.abstractmethod
    def list_for_agent_sync(self, agent_id: str) -> list[Session]: ...

    async def save(self, session: Session) -> None:
        await asyncio.to_thread(self.save_sync, session)

    async def load(self, session_id: str) -> Session:
        return await asyncio.to_thread(self.load_sync, session_id)

    async def list_ids(self) -> list[str]:
        return await asyncio.to_thread(self.list_ids_sync)

    async def delete(self, session_id: str) -> None:
        await asyncio.to_thread(self.delete_sync, session_id)

    async def list_for_agent(self, agent_id: str) -> list[Session]:
        return await asyncio.to_thread(self.list_for_agent_sync, agent_id)


class JsonFileSessionStore(_ThreadedStore):
    """One pretty-printed JSON file per session; see the module docstring."""

    def __init__(self, directory: str | os.PathLike[str], *, lock_timeout: float = 5.0) -> None:
        self.directory = Path(directory)
        self.lock_timeout = lock_timeout

    def __repr__(self) -> str:
        return f"JsonFileSessionStore({str(self.directory)!r})"

    def path_of(self, session_id: str) -> Path:
        _check_id(session_id)
        return self.directory / f"{session_id}.json"

    @contextlib.contextmanager
    def _locked(self, session_id: str, *, exclusive: bool) -> Iterator[None]:
        with file_lock(
            self.path_of(session_id),
            exclusive=exclusive,
            timeout=self.lock_timeout,
            on_timeout=lambda: SessionLockedError(session_id, self.lock_timeout),
        ):
            yield

    # -- synchronous forms -------------------------------------------------------

    def save_sync(self, session: Session) -> None:
        target = self.path_of(session.session_id)
        data = session.model_dump_json(indent=2)
        with self._locked(session.session_id, exclusive=True):
            atomic_write(target, data.encode("utf-8"), dir_mode=0o755)

    def load_sync(self, session_id: str) -> Session:
        path = self.path_of(session_id)
        if not path.exists():
            raise SessionNotFoundError(session_id, str(self.directory))
        with self._locked(session_id, exclusive=False):
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise SessionNotFoundError(session_id, str(self.directory)) from None
        return Session.model_validate_json(text)

    def list_ids_sync(self) -> list[str]:
        """Session ids, most recently written first (empty when the directory is missing)."""
        if not self.directory.is_dir():
            return []
        files = [p for p in self.directory.glob("*.json") if not p.name.startswith(".")]
        files.sort(key=lambda p: p.stat().st_mtime_ns, reverse=True)
        return [p.stem for p in files]

    def delete_sync(self, session_id: str) -> None:
        path = self.path_of(session_id)
        with self._locked(session_id, exclusive=True):
            try:
                path.unlink()
            except FileNotFoundError:
                raise SessionNotFoundError(session_id, str(self.directory)) from None
        with contextlib.suppress(FileNotFoundError):
            (self.directory / f"{session_id}.json.lock").unlink()

    def list_for_agent_sync(self, agent_id: str) -> list[Session]:
        sessions = []
        for session_id in self.list_ids_sync():
            with contextlib.suppress(SessionNotFoundError):
                session = self.load_sync(session_id)
                if session.agent_id == agent_id:
                    sessions.append(session)
        return sessions


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    updated_ns INTEGER NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_agent ON sessions(agent_id);
"""


class SqliteSessionStore(_ThreadedStore):
    """All sessions in one SQLite file (WAL mode); see the module docstring."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._ready = False

    def __repr__(self) -> str:
        return f"SqliteSessionStore({str(self.path)!r})"

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            if not self._ready:
                init_wal(conn, _SCHEMA, timeout=self.timeout)
                self._ready = True
            yield conn
        finally:
            conn.close()

    def save_sync(self, session: Session) -> None:
        data = session.model_dump_json()
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO sessions(session_id, agent_id, updated_ns, data) VALUES (?,?,?,?) "
                "ON CONFLICT(session_id) DO UPDATE SET agent_id=excluded.agent_id, "
                "updated_ns=excluded.updated_ns, data=excluded.data",
                (session.session_id, session.agent_id, time.time_ns(), data),
            )

    def load_sync(self, session_id: str) -> Session:
        with self._connect() as conn:
            row = conn.execute(
                "SELECT data FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id, str(self.path))
        return Session.model_validate_json(row[0])

    def list_ids_sync(self) -> list[str]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT session_id FROM sessions ORDER BY updated_ns DESC, session_id"
            ).fetchall()
        return [r[0] for r in rows]

    def delete_sync(self, session_id: str) -> None:
        with self._connect() as conn:
            cursor = conn.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
        if cursor.rowcount == 0:
            raise SessionNotFoundError(session_id, str(self.path))

    def list_for_agent_sync(self, agent_id: str) -> list[Session]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT data FROM sessions WHERE agent_id = ? ORDER BY updated_ns DESC",
                (agent_id,),
            ).fetchall()
        return [Session.model_validate_json(r[0]) for r in rows]


def open_session_store(spec: str | os.PathLike[str]) -> JsonFileSessionStore | SqliteSessionStore:
    """``sqlite:PATH`` or a path ending in ``.db``/``.sqlite`` → SQLite; anything else (or
    ``json:DIR``) → a directory of JSON files."""
    text = os.fspath(spec)
    if text.startswith("sqlite:"):
        return SqliteSessionStore(text.removeprefix("sqlite:"))
    if text.startswith("json:"):
        return JsonFileSessionStore(text.removeprefix("json:"))
    if text.endswith((".db", ".sqlite", ".sqlite3")):
        return SqliteSessionStore(text)
    return JsonFileSessionStore(text)


def save_session(session: Session, directory: str | os.PathLike[str]) -> Path:
    store = JsonFileSessionStore(directory)
    store.save_sync(session)
    return store.path_of(session.session_id)


def load_session(session_id: str, directory: str | os.PathLike[str]) -> Session:
    return JsonFileSessionStore(directory).load_sync(session_id)


def list_session_ids(directory: str | os.PathLike[str]) -> list[str]:
    return JsonFileSessionStore(directory).list_ids_sync()


def load_sessions_for_agent(agent_id: str, directory: str | os.PathLike[str]) -> list[Session]:
    return JsonFileSessionStore(directory).list_for_agent_sync(agent_id)


def delete_session(session_id: str, directory: str | os.PathLike[str]) -> None:
    JsonFileSessionStore(directory).delete_sync(session_id)
