"""Where sessions persist: JSON files (one per session) or one SQLite database.

Both stores are safe for several processes at once.

* :class:`JsonFileSessionStore` writes ``{dir}/{session_id}.json``. A save takes an exclusive
  advisory lock on ``{session_id}.json.lock`` (retried every 50 ms up to ``lock_timeout``, then
  :class:`SessionLockedError`), writes a unique temporary file in the same directory, fsyncs it and
  renames it over the target, so a reader never sees a half-written file and no temporary file
  is left behind. Loads take a shared lock.
* :class:`SqliteSessionStore` keeps one row per session in a WAL-mode database; a save is one
  ``BEGIN IMMEDIATE`` transaction, so SQLite's own locking serialises writers.

**A save merges; it never replaces.** Under the lock (or in the transaction) the store reads
what is stored for the session and writes :func:`merge_sessions` of the two: loops are keyed by
loop id, a loop the saved session holds replaces the stored record of that loop, and every
stored loop the saved session does not hold is kept. So a process that continues a stored
session (its recorder saw only its own loops) or two writers sharing one session never lose a
loop another writer saved. To drop loops, delete the session and save it anew.

:meth:`~JsonFileSessionStore.claim_loop_ids` is the other read-modify-write: it picks new loop
ids against the stored ones and stores them as ``pending`` placeholders in the same locked step,
so two writers never pick the same id (``BasicAgent`` numbers its loops this way).

The async methods run the blocking file and database work in a thread, so they never block the
event loop. The module-level functions (:func:`save_session`, …) are the synchronous forms over
a directory.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from .._files import atomic_write, file_lock
from .._sqlite import init_wal
from ..errors import SessionLockedError, SessionNotFoundError, UserError, redact_tree
from ..types import now_ms
from ._model import LoopRecord, Session

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
    "merge_sessions",
    "open_session_store",
    "save_session",
]

SessionChange = Callable[[Session | None], Session | None]
"""``change(stored)`` → what to write (``None``: write nothing); ``stored`` is None when the
store has no such session."""


def _same_loop(stored: LoopRecord, incoming: LoopRecord) -> bool:
    """Whether two records with one loop id are the same execution (an update of it), rather
    than two writers that happened to pick the same id: a ``pending`` record is a reservation
    the real one fills; otherwise the start times agree (0: unknown, matches)."""
    if stored.loop_id != incoming.loop_id:
        return False
    if "pending" in (stored.status, incoming.status):
        return True
    return stored.started_at == incoming.started_at or 0 in (stored.started_at, incoming.started_at)


def _merge_loop(stored: LoopRecord, incoming: LoopRecord) -> LoopRecord:
    """The incoming record (a pending placeholder never replaces a started loop), with the
    same-session child links of both."""
    base = stored if incoming.status == "pending" and stored.status != "pending" else incoming
    other = incoming if base is stored else stored
    children = [*base.children_loop_ids]
    children += [c for c in other.children_loop_ids if c not in children]
    refs = [*base.child_loop_refs]
    known = {r.child_loop_id for r in refs}
    refs += [r for r in other.child_loop_refs if r.child_loop_id not in known]
    if children == base.children_loop_ids and refs == base.child_loop_refs:
        return base
    return base.model_copy(update={"children_loop_ids": children, "child_loop_refs": refs})


def merge_sessions(stored: Session | None, incoming: Session) -> Session:
    """What a store writes when ``incoming`` is saved over ``stored`` (see the module docstring).

    * Loops are keyed by loop id: an incoming loop replaces the stored record of the same loop
      in place (a ``pending`` placeholder is filled; a placeholder never overwrites a started
      loop); incoming loops the store lacks are appended in their order; stored loops the
      incoming session lacks are kept. Two different executions that share an id (different
      start times) are both kept. Child links (``children_loop_ids``, ``child_loop_refs``) of
      both versions are united, and an incoming loop whose parent is a stored loop is added to
      that parent's ``children_loop_ids``.
    * The header keeps the stored identity: ``agent_id``, ``formation`` and
      ``parent_spawn_ref`` come from the stored session when it has them, ``created_at`` is the
      earliest and ``last_active`` the latest known, ``scope`` is ``persistent`` if either is.

    With nothing stored the incoming session is returned unchanged. Neither argument is changed.
    """
    if stored is None:
        return incoming
    if stored.session_id != incoming.session_id:
        raise ValueError(
            f"Cannot merge session {incoming.session_id!r} into {stored.session_id!r}."
        )
    loops = list(stored.loops)
    taken: set[int] = set()
    added: list[LoopRecord] = []
    for record in incoming.loops:
        index = next(
            (
                i
                for i in range(len(loops) - 1, -1, -1)
                if i not in taken and _same_loop(loops[i], record)
            ),
            None,
        )
        if index is None:
            added.append(record)
        else:
            loops[index] = _merge_loop(loops[index], record)
            taken.add(index)
    loops.extend(added)
    merged = incoming.model_copy(
        update={
            "agent_id": stored.agent_id or incoming.agent_id,
            "created_at": min(
                (t for t in (stored.created_at, incoming.created_at) if t), default=0
            ),
            "last_active": max(stored.last_active, incoming.last_active),
            "formation": stored.formation or incoming.formation,
            "scope": "persistent"
            if "persistent" in (stored.scope, incoming.scope)
            else "ephemeral",
            "parent_spawn_ref": stored.parent_spawn_ref or incoming.parent_spawn_ref,
            "loops": loops,
        }
    )
    incoming_ids = {r.loop_id for r in incoming.loops}
    for record in [r for r in merged.loops if r.loop_id in incoming_ids and r.parent_loop_id]:
        parent = merged.get_loop(record.parent_loop_id or "")
        if parent is not None and record.loop_id not in parent.children_loop_ids:
            position = next(i for i, r in enumerate(merged.loops) if r is parent)
            merged.loops[position] = parent.model_copy(
                update={"children_loop_ids": [*parent.children_loop_ids, record.loop_id]}
            )
    return merged


@runtime_checkable
class SessionStore(Protocol):
    async def save(self, session: Session) -> None: ...
    async def load(self, session_id: str) -> Session: ...
    async def list_ids(self) -> list[str]: ...
    async def delete(self, session_id: str) -> None: ...
    async def list_for_agent(self, agent_id: str) -> list[Session]: ...


def stored_json(session: Session, indent: int | None = None) -> str:
    """``session`` as a store writes it: JSON with every string redacted (see
    :func:`~phi_core.errors.redact`), so a key a user pasted, a tool printed or an error quoted
    is never kept on disk; resuming such a session sends ``[REDACTED]`` in its place."""
    data = redact_tree(session.model_dump(mode="json"))
    return json.dumps(data, indent=indent, ensure_ascii=False)


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
    def update_sync(self, session_id: str, change: SessionChange) -> Session | None:
        """Read-modify-write one session atomically with respect to every other writer (other
        processes included): ``change(stored)`` runs while the store's write lock is held and
        its result (unless None) is written. Returns what was written (None: nothing)."""

    def save_sync(self, session: Session) -> None:
        """Merge ``session`` into what is stored (:func:`merge_sessions`), under the lock."""
        self.update_sync(session.session_id, lambda stored: merge_sessions(stored, session))

    def claim_loop_ids_sync(
        self,
        session_id: str,
        agent_id: str,
        choose: Callable[[Session], Sequence[str]],
    ) -> list[str]:
        """Reserve new loop ids in one locked step: ``choose(stored)`` gets the stored session
        (an empty one when there is none; it must not change it) and returns the ids to use;
        those not stored yet are written as ``pending`` loops of ``agent_id``, which the real
        records replace when the session is saved. Returns ``choose``'s ids."""
        chosen: list[str] = []

        def change(stored: Session | None) -> Session | None:
            now = now_ms()
            session = stored or Session(
                session_id=session_id, agent_id=agent_id, created_at=now, last_active=now
            )
            chosen.extend(choose(session))
            new = [i for i in dict.fromkeys(chosen) if session.get_loop(i) is None]
            if not new:
                return None
            placeholders = [
                LoopRecord(
                    loop_id=loop_id,
                    session_id=session_id,
                    agent_id=agent_id,
                    status="pending",
                    started_at=now,
                )
                for loop_id in new
            ]
            return session.model_copy(update={"loops": [*session.loops, *placeholders]})

        self.update_sync(session_id, change)
        return chosen

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

    async def update(self, session_id: str, change: SessionChange) -> Session | None:
        return await asyncio.to_thread(self.update_sync, session_id, change)

    async def claim_loop_ids(
        self,
        session_id: str,
        agent_id: str,
        choose: Callable[[Session], Sequence[str]],
    ) -> list[str]:
        return await asyncio.to_thread(self.claim_loop_ids_sync, session_id, agent_id, choose)

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

    def update_sync(self, session_id: str, change: SessionChange) -> Session | None:
        target = self.path_of(session_id)
        with self._locked(session_id, exclusive=True):
            try:
                stored: Session | None = Session.model_validate_json(
                    target.read_text(encoding="utf-8")
                )
            except FileNotFoundError:
                stored = None
            session = change(stored)
            if session is not None:
                data = stored_json(session, indent=2)
                atomic_write(target, data.encode("utf-8"), dir_mode=0o755)
        return session

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

    def update_sync(self, session_id: str, change: SessionChange) -> Session | None:
        with self._connect() as conn:
            # IMMEDIATE takes the write lock before the read, so no writer slips in between.
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    "SELECT data FROM sessions WHERE session_id = ?", (session_id,)
                ).fetchone()
                stored = Session.model_validate_json(row[0]) if row is not None else None
                session = change(stored)
                if session is not None:
                    conn.execute(
                        "INSERT INTO sessions(session_id, agent_id, updated_ns, data) "
                        "VALUES (?,?,?,?) ON CONFLICT(session_id) DO UPDATE SET "
                        "agent_id=excluded.agent_id, updated_ns=excluded.updated_ns, "
                        "data=excluded.data",
                        (session_id, session.agent_id, time.time_ns(), stored_json(session)),
                    )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return session

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
