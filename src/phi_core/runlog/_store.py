"""The run log's SQLite store: ``$PHI_HOME/logs.db`` in WAL mode, migrated on open.

Writing: :meth:`RunLog.write` stores one :class:`RunRecord` (the run, its branches, its router
events and a full-text entry) in one transaction, with every string passed through
:func:`~phi_core.errors.redact` first, so no API key is ever stored. :meth:`RunLog.awrite` does
the same from a worker thread, for callers inside an event loop (the gateway).

Reading (the CLI's ``phi logs`` and a web view): :meth:`RunLog.list_runs` (newest first,
filtered by :class:`RunQuery`), :meth:`RunLog.get_run` (one run whole, by id or unique id
prefix), :meth:`RunLog.conversation` (a conversation's runs in order), :meth:`RunLog.route_events`
(the router's decisions over time, per namespace) and :meth:`RunLog.status`.

Whether the CLI logs at all: :func:`logging_enabled` — off when ``PHI_NO_LOG`` is set to a true
value or after ``phi logs off`` (a ``logs-off`` file in the user directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import ValidationError

from .._paths import check_user_dir, user_path
from .._sqlite import init_wal
from ..errors import RunNotFoundError, UserError, redact_tree
from ..types import lone_surrogate
from ._migrations import MIGRATIONS, applied_migrations, migrate
from ._records import (
    BranchRecord,
    LogStatus,
    RouteEventRecord,
    RunFacets,
    RunQuery,
    RunRecord,
    check_count,
    check_text,
)

__all__ = [
    "LOG_FILE",
    "NO_LOG_ENV",
    "RunLog",
    "default_log_path",
    "log_status",
    "logging_enabled",
    "open_run_log",
    "set_logging_enabled",
    "why_logging_disabled",
]

LOG_FILE = "logs.db"
NO_LOG_ENV = "PHI_NO_LOG"
_OFF_FILE = "logs-off"
_TRUE = {"1", "true", "yes", "on"}


def default_log_path() -> Path:
    """``$PHI_HOME/logs.db``."""
    return user_path(LOG_FILE)


def why_logging_disabled() -> str | None:
    """Why runs are not logged (``None``: they are)."""
    if os.environ.get(NO_LOG_ENV, "").strip().lower() in _TRUE:
        return f"the environment variable {NO_LOG_ENV} is set"
    if user_path(_OFF_FILE).exists():
        return "`phi logs off` turned it off; `phi logs on` turns it back on"
    return None


def logging_enabled() -> bool:
    """Whether runs are logged by default (see the module docstring)."""
    return why_logging_disabled() is None


def _unreadable(path: Path, exc: sqlite3.Error | str) -> UserError:
    shown = str(path)
    why = exc if isinstance(exc, str) else str(exc).splitlines()[0][:200]
    if why.startswith("Could not decode to UTF-8"):  # SQLite's message quotes the garbage
        why = "a damaged row: " + " ".join(why.split()[:7])
    return UserError(
        f"{shown!r} is not a readable phi run log ({why}). Move it aside (for example "
        f"`mv {shown} {shown}.bad`) and the next run starts a new log; `phi logs path` shows "
        "where the log is."
    )


def _damaged(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the file is not a database or a damaged one (not a busy or locked
    database, a full disk or a query error: other ``OperationalError`` cases)."""
    if isinstance(exc, sqlite3.OperationalError):
        # a text cell holds garbage, or a table the migrations made was dropped since
        return str(exc).startswith(("Could not decode to UTF-8", "no such table"))
    return isinstance(exc, sqlite3.DatabaseError)


def set_logging_enabled(enabled: bool) -> None:
    """``phi logs on`` / ``phi logs off``: logging by default or not, remembered in the user
    directory.

    Raises:
        UserError: the user directory (``PHI_HOME``) is a file, not a folder.
    """
    check_user_dir()
    marker = user_path(_OFF_FILE, create_dir=True)
    if enabled:
        marker.unlink(missing_ok=True)
    else:
        marker.write_text("Runs are not logged; `phi logs on` removes this file.\n")


_TABLES = ("runs", "branches", "route_events")
"""The tables every migrated run log holds (``runs_fts`` only where SQLite has FTS5)."""


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(redact_tree(value), ensure_ascii=False)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# Columns of `runs` (in the order the queries select them) and the JSON-valued ones.
_RUN_FIELDS = (
    "id", "kind", "source", "conversation_id", "created_at", "duration_s", "prompt", "system",
    "strategy", "status", "winner", "winner_model", "text", "input_tokens", "output_tokens",
    "cost_usd", "verdict", "plan", "warnings", "extra", "messages",
)  # fmt: skip
_RUN_JSON = {"verdict", "plan", "warnings", "extra", "messages"}
_RUN_COLUMNS = ", ".join(f"r.{name}" for name in _RUN_FIELDS[:-1])
"""Every column but the history (listings leave it out)."""
# BranchRecord fields → `branches` columns.
_BRANCH_COLUMNS = {
    "index": "idx", "label": "label", "model": "model", "phase": "phase", "status": "status",
    "error": "error", "error_kind": "error_kind", "text": "text",
    "input_tokens": "input_tokens", "output_tokens": "output_tokens", "cost_usd": "cost_usd",
    "latency_s": "latency_s", "score": "score", "winner": "is_winner", "spec": "spec",
}  # fmt: skip
_EVENT_FIELDS = ("run_id", "seq", "type", "namespace", "action", "timestamp", "payload")


def _run_values(record: RunRecord) -> tuple[Any, ...]:
    data = record.model_dump(mode="json")
    return tuple(_dump(data[f]) if f in _RUN_JSON else data[f] for f in _RUN_FIELDS)


def _event_values(run_id: str, e: RouteEventRecord) -> tuple[Any, ...]:
    return (run_id, e.seq, e.type, e.namespace, e.action, e.timestamp, _dump(e.payload))


def _branch_values(run_id: str, branch: BranchRecord) -> tuple[Any, ...]:
    data = branch.model_dump(mode="json")
    data["winner"] = int(branch.winner)
    data["spec"] = _dump(branch.spec)
    return (run_id, *(data[f] for f in _BRANCH_COLUMNS))


def _branch_of(row: tuple[Any, ...]) -> BranchRecord:
    data = dict(zip(_BRANCH_COLUMNS, row, strict=True))
    data.update(text=data["text"] or "", winner=bool(data["winner"]), spec=_load(data["spec"]))
    return BranchRecord.model_validate(data)


def _run_of(
    row: tuple[Any, ...], branches: list[BranchRecord], events: list[RouteEventRecord]
) -> RunRecord:
    data = {f: (_load(v) if f in _RUN_JSON else v) for f, v in zip(_RUN_FIELDS, row, strict=False)}
    data.update(
        text=data["text"] or "",
        warnings=data["warnings"] or [],
        extra=data["extra"] or {},
        branches=branches,
        route_events=events,
    )
    return RunRecord.model_validate(data)


class RunLog:
    """The run log at ``path`` (default ``$PHI_HOME/logs.db``); see the module docstring.

    Opening creates the file (and the user directory) if needed and applies every pending
    migration. Safe for several processes (SQLite's WAL locking) and threads (one lock).

    ``read_only=True`` (the web view) opens an existing log with SQLite's ``mode=ro``: nothing
    is created, migrated or written, and a log whose schema is older than this version's is a
    :class:`~phi_core.errors.UserError` saying how to upgrade it.

    A file that is not a SQLite database, or a damaged one (garbage, truncated, a table
    dropped), raises SQLite's ``sqlite3.DatabaseError`` on opening (:func:`open_run_log` makes it a
    :class:`~phi_core.errors.UserError` saying what to do), and the reading methods raise such
    a ``UserError`` when the damage lies further in. Nothing is moved or deleted: the log is
    the user's record.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, read_only: bool = False
    ) -> None:
        if path is None:
            check_user_dir()  # PHI_HOME is a file: that, not "File exists", is what to fix
        self.path = Path(path) if path is not None else default_log_path()
        self.read_only = read_only
        self._lock = threading.Lock()
        if read_only:
            self._conn = _connect_read_only(self.path)
        else:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            try:
                self._conn.execute("PRAGMA foreign_keys=ON")
                init_wal(self._conn, "")
                migrate(self._conn)
            except BaseException:
                self._conn.close()
                raise
        self._fts = self._has_table("runs_fts")
        missing = [table for table in _TABLES if not self._has_table(table)]
        if missing:  # dropped after the migrations made them: a damaged log, said once here
            self._conn.close()
            why = f"no such table: {', '.join(missing)}"
            if read_only:
                raise _unreadable(self.path, why)
            raise sqlite3.DatabaseError(why)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Hold the lock while reading; a damaged file is a :class:`UserError` saying so."""
        with self._lock:
            try:
                yield
            except sqlite3.Error as exc:
                if _damaged(exc):
                    raise _unreadable(self.path, exc) from exc
                raise
            except (json.JSONDecodeError, ValidationError) as exc:  # a row that is not a run's
                raise _unreadable(self.path, "a damaged row") from exc

    def __enter__(self) -> RunLog:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunLog({str(self.path)!r})"

    def _has_table(self, name: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None

    # ------------------------------------------------------------------ writing

    def write(self, record: RunRecord) -> RunRecord:
        """Store ``record`` (every string redacted); returns it as stored."""
        [clean] = self.write_many([record])
        return clean

    def write_many(self, records: Sequence[RunRecord]) -> list[RunRecord]:
        """Store ``records`` in one transaction (all or none); returns them as stored."""
        if self.read_only:
            raise UserError(
                f"The run log {str(self.path)!r} was opened read-only; it cannot store runs."
            )
        stored = [RunRecord.model_validate(redact_tree(r.model_dump(mode="json"))) for r in records]
        marks = ", ".join("?" * len(_RUN_FIELDS))
        branch_marks = ", ".join("?" * (len(_BRANCH_COLUMNS) + 1))
        with self._lock, self._transaction():
            for clean in stored:
                self._conn.execute(
                    f"INSERT INTO runs ({', '.join(_RUN_FIELDS)}) VALUES ({marks})",
                    _run_values(clean),
                )
                self._conn.executemany(
                    f"INSERT INTO branches (run_id, {', '.join(_BRANCH_COLUMNS.values())}) "
                    f"VALUES ({branch_marks})",
                    [_branch_values(clean.id, b) for b in clean.branches],
                )
                self._conn.executemany(
                    f"INSERT INTO route_events ({', '.join(_EVENT_FIELDS)}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [_event_values(clean.id, e) for e in clean.route_events],
                )
                if self._fts:
                    self._conn.execute(
                        "INSERT INTO runs_fts (run_id, body) VALUES (?, ?)",
                        (clean.id, _search_body(clean)),
                    )
        return stored

    async def awrite(self, record: RunRecord) -> RunRecord:
        """:meth:`write` in a worker thread (for callers inside an event loop)."""
        return await asyncio.to_thread(self.write, record)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn)

    # ------------------------------------------------------------------ reading

    def list_runs(self, query: RunQuery | None = None) -> list[RunRecord]:
        """The runs ``query`` selects, newest first, with branches and router events but
        without the conversation history (:meth:`get_run` has it)."""
        query = query or RunQuery()
        where, params = self._where(query)
        sql = f"SELECT {_RUN_COLUMNS} FROM runs r"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r.created_at DESC, r.rowid DESC LIMIT ? OFFSET ?"
        # RunQuery checked both (check_count): they fit SQLite's integers.
        params += [-1 if query.limit is None else query.limit, query.offset]
        with self._reading():
            rows = self._conn.execute(sql, params).fetchall()
            return [self._record(row, with_messages=False) for row in rows]

    def count_runs(self, query: RunQuery | None = None) -> int:
        """How many runs ``query``'s filters select (its limit and offset aside)."""
        where, params = self._where(query or RunQuery())
        sql = "SELECT count(*) FROM runs r" + (" WHERE " + " AND ".join(where) if where else "")
        with self._reading():
            return int(self._conn.execute(sql, params).fetchone()[0])

    def facets(self) -> RunFacets:
        """The models, strategies, kinds and statuses the logged runs use, and their time span
        (what a search form offers)."""

        def distinct(sql: str) -> list[str]:
            return [row[0] for row in self._conn.execute(sql) if row[0]]

        with self._reading():
            first, last = self._conn.execute(
                "SELECT min(created_at), max(created_at) FROM runs"
            ).fetchone()
            return RunFacets(
                models=distinct("SELECT DISTINCT model FROM branches ORDER BY model"),
                strategies=distinct("SELECT DISTINCT strategy FROM runs ORDER BY strategy"),
                kinds=distinct("SELECT DISTINCT kind FROM runs ORDER BY kind"),
                statuses=distinct("SELECT DISTINCT status FROM runs ORDER BY status"),
                first=first,
                last=last,
            )

    def _where(self, query: RunQuery) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        if query.model:
            model = query.model.strip()
            where.append(
                "EXISTS (SELECT 1 FROM branches b WHERE b.run_id = r.id AND "
                "(b.model = ? OR b.label = ? OR b.model LIKE ? ESCAPE '\\'))"
            )
            params += [model, model, "%:" + _like_escape(model)]
        for column, value in (
            ("strategy", query.strategy),
            ("kind", query.kind),
            ("status", query.status),
            ("conversation_id", query.conversation_id),
        ):
            if value:
                where.append(f"r.{column} = ?")
                params.append(value.strip())
        if query.since:
            where.append("r.created_at >= ?")
            params.append(query.since)
        if query.until:
            where.append("r.created_at <= ?")
            params.append(query.until)
        words = (query.text or "").split()
        if words and self._fts:
            where.append("r.id IN (SELECT run_id FROM runs_fts WHERE runs_fts MATCH ?)")
            params.append(" ".join('"' + w.replace('"', '""') + '"' for w in words))
        elif words:
            for word in words:
                pattern = "%" + _like_escape(word) + "%"
                where.append(
                    "(r.prompt LIKE ? ESCAPE '\\' OR coalesce(r.system, '') LIKE ? ESCAPE '\\' "
                    "OR EXISTS (SELECT 1 FROM branches b WHERE b.run_id = r.id AND "
                    "(coalesce(b.text, '') LIKE ? ESCAPE '\\' OR b.model LIKE ? ESCAPE '\\')))"
                )
                params += [pattern] * 4
        return where, params

    def get_run(self, run_id: str) -> RunRecord:
        """One run whole (history included), by its id or a unique prefix of it.

        Raises:
            RunNotFoundError: no run, or a prefix several runs share (lists some).
        """
        key = run_id.strip().upper()
        if not key:
            raise RunNotFoundError("Give a run id (`phi logs` lists them).")
        if lone_surrogate(key) is not None:  # no id holds one, and SQLite cannot take it
            try:
                check_text(run_id, "The run id")
            except UserError as exc:
                raise RunNotFoundError(f"{exc} `phi logs` lists the runs.") from None
        with self._reading():
            rows = self._conn.execute(
                f"SELECT {_RUN_COLUMNS}, r.messages FROM runs r WHERE r.id >= ? AND r.id < ? "
                "ORDER BY r.id LIMIT 6",
                (key, key + "\U0010ffff"),
            ).fetchall()
            if len(rows) == 1 or (rows and rows[0][0] == key):
                return self._record(rows[0], with_messages=True)
        if not rows:
            raise RunNotFoundError(
                f"No run {run_id!r} in the run log {str(self.path)!r}; `phi logs` lists the runs."
            )
        shown = ", ".join(row[0] for row in rows[:5])
        raise RunNotFoundError(
            f"Run id prefix {run_id!r} matches several runs ({shown}, …); give more of the id."
        )

    def last_run(self) -> RunRecord | None:
        """The newest run (history included), or ``None`` when the log is empty."""
        with self._reading():
            row = self._conn.execute(
                f"SELECT {_RUN_COLUMNS}, r.messages FROM runs r "
                "ORDER BY r.created_at DESC, r.rowid DESC LIMIT 1"
            ).fetchone()
            return self._record(row, with_messages=True) if row else None

    def conversation(self, conversation_id: str) -> list[RunRecord]:
        """Every run of a conversation, oldest first (histories included)."""
        with self._reading():
            rows = self._conn.execute(
                f"SELECT {_RUN_COLUMNS}, r.messages FROM runs r WHERE r.conversation_id = ? "
                "ORDER BY r.created_at, r.rowid",
                (conversation_id,),
            ).fetchall()
            return [self._record(row, with_messages=True) for row in rows]

    def last_conversation_id(self) -> str | None:
        """The conversation of the newest run that has one and can be continued (a model
        selection, ``phi select``, answers nothing to continue from)."""
        with self._reading():
            row = self._conn.execute(
                "SELECT conversation_id FROM runs WHERE conversation_id IS NOT NULL "
                "AND kind != 'select' ORDER BY created_at DESC, rowid DESC LIMIT 1"
            ).fetchone()
        return row[0] if row else None

    def route_events(
        self, namespace: str | None = None, *, limit: int | None = 500
    ) -> list[RouteEventRecord]:
        """The router's decisions and updates across runs, oldest first (the newest
        ``limit``), optionally of one namespace.

        Raises:
            UserError: ``limit`` below 0 or beyond SQLite's integers (:func:`check_count`).
        """
        sql = f"SELECT {', '.join(_EVENT_FIELDS)} FROM route_events"
        params: list[Any] = []
        if namespace is not None:
            sql += " WHERE namespace = ?"
            params.append(namespace)
        sql += " ORDER BY timestamp DESC, run_id DESC, seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(check_count(limit, "limit"))
        with self._reading():
            rows = self._conn.execute(sql, params).fetchall()
        return [_route_event(row) for row in reversed(rows)]

    def status(self) -> LogStatus:
        """Where the log is and what it holds (see :func:`log_status` for a log not opened)."""
        with self._reading():
            runs = self._conn.execute("SELECT count(*) FROM runs").fetchone()[0]
            conversations = self._conn.execute(
                "SELECT count(DISTINCT conversation_id) FROM runs"
            ).fetchone()[0]
            migrations = applied_migrations(self._conn)
        why = why_logging_disabled()
        return LogStatus(
            path=str(self.path),
            enabled=why is None,
            why_disabled=why,
            exists=True,
            runs=runs,
            conversations=conversations,
            size_bytes=sum(
                p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists()
            ),
            migrations=migrations,
            full_text_search=self._fts,
        )

    # ------------------------------------------------------------------ rows → records

    def _record(self, row: tuple[Any, ...], *, with_messages: bool) -> RunRecord:
        run_id = row[0]
        branches = [
            _branch_of(b)
            for b in self._conn.execute(
                f"SELECT {', '.join(_BRANCH_COLUMNS.values())} FROM branches WHERE run_id = ? "
                "ORDER BY idx",
                (run_id,),
            )
        ]
        events = [
            _route_event(e)
            for e in self._conn.execute(
                f"SELECT {', '.join(_EVENT_FIELDS)} FROM route_events WHERE run_id = ? "
                "ORDER BY seq",
                (run_id,),
            )
        ]
        return _run_of(row if with_messages else row[: len(_RUN_FIELDS) - 1], branches, events)


def log_status(path: str | os.PathLike[str] | None = None) -> LogStatus:
    """:meth:`RunLog.status` without creating the log when it does not exist yet.

    Raises:
        UserError: the file is not a readable run log, or the default log's folder
            (``PHI_HOME``) is a file: nothing can be logged (the message says what to do).
    """
    if path is None:
        check_user_dir()
    target = Path(path) if path is not None else default_log_path()
    if not target.exists():
        why = why_logging_disabled()
        return LogStatus.missing(str(target), why is None, why)
    with open_run_log(target) as log:
        return log.status()


def open_run_log(path: str | os.PathLike[str] | None = None) -> RunLog:
    """``RunLog(path)`` for the commands that read it (``phi logs``): a file that is not a
    readable run log (garbage, truncated) or a default log whose folder (``PHI_HOME``) is a
    file is a :class:`~phi_core.errors.UserError` naming it and saying what to do.

    Raises:
        UserError: as above.
    """
    if path is None:
        check_user_dir()
    target = Path(path) if path is not None else default_log_path()
    try:
        return RunLog(target)
    except sqlite3.Error as exc:
        if _damaged(exc):
            raise _unreadable(target, exc) from None
        raise


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """``path`` opened with ``mode=ro`` (and ``query_only``), after checking that it is a run
    log this version can read: every known migration applied."""
    if not path.is_file():
        raise UserError(
            f"No run log at {str(path)!r}; runs are logged by `phi race`, `phi run` and "
            "`phi select` (unless --no-log or PHI_NO_LOG), so run one first."
        )
    conn = sqlite3.connect(
        path.resolve().as_uri() + "?mode=ro",
        uri=True,
        timeout=30.0,
        isolation_level=None,
        check_same_thread=False,
    )
    try:
        try:
            applied = {row[0] for row in conn.execute("SELECT name FROM _migrations")}
        except sqlite3.DatabaseError as exc:
            raise UserError(
                f"{str(path)!r} is not a phi run log ({exc}); pass the logs.db that "
                "`phi logs path` prints."
            ) from None
        missing = [m.__name__ for m in MIGRATIONS if m.__name__ not in applied]
        if missing:
            raise UserError(
                f"The run log {str(path)!r} has an older schema (missing {', '.join(missing)}); "
                "run `phi logs status` once to upgrade it, then open it again."
            )
        conn.execute("PRAGMA query_only=ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _route_event(row: tuple[Any, ...]) -> RouteEventRecord:
    data = dict(zip(_EVENT_FIELDS, row, strict=True))
    data["payload"] = _load(data["payload"]) or {}
    return RouteEventRecord.model_validate(data)


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _search_body(record: RunRecord) -> str:
    parts = [record.prompt, record.system or "", record.text]
    for branch in record.branches:
        parts += [branch.text, branch.model, branch.label]
    return "\n".join(p for p in parts if p)


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on any error) on an autocommit
    connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.conn.execute("COMMIT" if kind is None else "ROLLBACK")
