"""Where router statistics and preview answers persist: JSON file, SQLite, Redis.

Router state is kept as **additive** sufficient statistics (:class:`~.bandits.ArmStats`) under a
*namespace* that names the feature schema and dimension, so incompatible statistics are never
mixed. Every store applies an update as an atomic addition, so several workers never lose one
another's updates:

- :class:`JsonFileStateStore`: read-add-write under an exclusive lock, replaced atomically (the
  project's one write-and-lock helper, :mod:`phi_core._files`).
- :class:`SQLiteStateStore`: WAL mode; each addition runs in one ``BEGIN IMMEDIATE`` transaction.
- :class:`~phi_core.routing.RedisStateStore` (:mod:`._redis`): each addition is one idempotent Lua script (atomic on the server)
  under versioned keys ``phi:router:v1:<namespace>:<arm>``; while Redis is unreachable updates
  are kept locally and pushed once it is back (one warning per transition).

A state of the wrong shape (garbage or truncated SQLite, JSON with ``[]``, ``null`` or a string
where statistics belong) is moved aside with a warning by a store that writes, and learning
restarts from empty statistics. A file that is no router state at all — a race file, a dataset,
another program's JSON or SQLite database named by a mistaken ``--state`` — is never moved: a
writer refuses it with a :class:`~phi_core.errors.UserError` naming it. Opened with ``read_only=True`` (``phi route show``) a store never
creates, locks, moves or writes anything: SQLite is opened with ``mode=ro`` and a state of the
wrong shape raises :class:`~phi_core.errors.StateCorruptError`. SQLite failures surface as
:class:`~phi_core.errors.StateStoreError` naming the real cause (disk full, locked).

All calls are synchronous (file, SQLite and Redis client calls); async callers run them with
``asyncio.to_thread``. Preview caches (:class:`MemoryPreviewCache`, :class:`SQLitePreviewCache`,
:class:`~phi_core.routing.RedisPreviewCache`) share the same shapes; the bandit race keys them by the request actually sent
(:func:`phi_core.providers.call.request_key`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .._files import atomic_write, file_lock
from .._logging import get_logger
from .._sqlite import init_wal, quarantine, sqlite_failure
from ..errors import StateCorruptError, StateStoreError, UserError
from .bandits import ArmStats, stats_problem

__all__ = [
    "JsonFileStateStore",
    "LinkStore",
    "MemoryPreviewCache",
    "MemoryStateStore",
    "PreviewCache",
    "RouterStateStore",
    "SQLitePreviewCache",
    "SQLiteStateStore",
    "check_finite",
    "is_redis",
    "make_parent",
    "open_state_store",
    "stats_from_json",
]

logger = get_logger("phi_core.routing.stores")
STATE_VERSION = 1


class RouterStateStore(Protocol):
    """Additive persistence of per-arm statistics, grouped by namespace."""

    def load(self, namespace: str) -> dict[str, ArmStats]: ...

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None: ...

    def reset(self, namespace: str | None = None) -> None: ...

    def namespaces(self) -> list[str]: ...


class MemoryStateStore:
    """In-process store (tests, and callers that need no persistence)."""

    def __init__(self) -> None:
        self._data: dict[str, dict[str, ArmStats]] = {}

    def load(self, namespace: str) -> dict[str, ArmStats]:
        return dict(self._data.get(namespace, {}))

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None:
        arms = self._data.setdefault(namespace, {})
        arms[arm] = check_finite(arms[arm] + delta if arm in arms else delta, namespace, arm)

    def reset(self, namespace: str | None = None) -> None:
        if namespace is None:
            self._data.clear()
        else:
            self._data.pop(namespace, None)

    def namespaces(self) -> list[str]:
        return sorted(self._data)


# ---------------------------------------------------------------------------- shape checks


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where} is {value!r}, not a finite number")
    return float(value)


def check_finite(stats: ArmStats, namespace: str, arm: str) -> ArmStats:
    """``stats`` if they are statistics updates could have made (every number finite, no
    negative count, a positive semi-definite ``XX``: :func:`~.bandits.stats_problem`), else a
    :class:`UserError`: a state store refuses to write what it would refuse to read (one such
    arm made the whole file be moved aside on the next load, with every other arm's learning)."""
    problem = stats_problem(stats)
    if problem is not None:
        raise UserError(
            f"The update of arm {arm!r} in {namespace!r} holds {problem}, which a state could "
            "not be read back with; it was not stored."
        )
    return stats


def stats_from_json(data: Any, where: str = "statistics") -> ArmStats:
    """One arm's statistics from JSON (``xx`` nested or flat), checked: anything of the wrong
    shape raises ``ValueError`` naming ``where`` and what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} is {type(data).__name__} {data!r:.40}, not an object")
    xr = data.get("xr")
    if not isinstance(xr, list) or not xr:
        raise ValueError(f"{where}.xr is {xr!r:.40}, not a non-empty list of numbers")
    dim = len(xr)
    try:
        xx = np.asarray(data.get("xx"), dtype=np.float64)
        xr_array = np.asarray(xr, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}.xx/xr hold something that is not a number ({exc})") from None
    if xx.size != dim * dim or xr_array.shape != (dim,):
        raise ValueError(f"{where}.xx has {xx.size} values; a {dim}-dimensional arm needs {dim**2}")
    if not (np.isfinite(xx).all() and np.isfinite(xr_array).all()):
        raise ValueError(f"{where}.xx/xr hold NaN or infinity")
    return _possible(
        ArmStats(
            xx=xx.reshape(dim, dim),
            xr=xr_array,
            n=_number(data.get("n", 0.0), f"{where}.n"),
            reward_sum=_number(data.get("reward_sum", 0.0), f"{where}.reward_sum"),
            reward_sq=_number(data.get("reward_sq", 0.0), f"{where}.reward_sq"),
            updated_at=_number(data.get("updated_at", 0.0), f"{where}.updated_at"),
        ),
        where,
    )


def _possible(stats: ArmStats, where: str) -> ArmStats:
    """``stats``, or ``ValueError`` naming ``where`` when no updates could have made them (a
    negative count, an ``XX`` that is not positive semi-definite — with which every race failed
    inverting ``λI + XX`` —, numbers beyond any sum): a state of the wrong shape."""
    problem = stats_problem(stats)
    if problem is not None:
        raise ValueError(f"{where} holds {problem}, which no updates make")
    return stats


def _check_document(data: Any) -> dict[str, dict[str, ArmStats]]:
    """Every namespace's statistics from a JSON state document; ``ValueError`` if of the wrong
    shape."""
    if not isinstance(data, dict):
        raise ValueError(f"the document is {type(data).__name__}, not an object")
    if data.get("version") != STATE_VERSION:
        raise ValueError(f"unsupported state version {data.get('version')!r}")
    namespaces = data.get("namespaces")
    if not isinstance(namespaces, dict):
        raise ValueError(f"'namespaces' is {namespaces!r:.40}, not an object")
    out: dict[str, dict[str, ArmStats]] = {}
    for ns, arms in namespaces.items():
        if not isinstance(arms, dict):
            raise ValueError(f"namespace {ns!r} is {arms!r:.40}, not an object of arms")
        out[ns] = {arm: stats_from_json(v, f"arm {arm!r} of {ns!r}") for arm, v in arms.items()}
    return out


def _corrupt(path: Path, why: str) -> StateCorruptError:
    return StateCorruptError(
        f"{path} is not a router state ({why}). It was left unchanged: move it aside, or pass "
        "another --state (a race or `phi route reset` moves it aside itself).",
        path=str(path),
        reason=why,
    )


def _not_ours(path: Path, what: str) -> UserError:
    return UserError(
        f"{path} is not a router state ({what}); it was left unchanged. Give the router state "
        "a file of its own (a new .sqlite or .json name is created), or move this file aside "
        "if it is a damaged router state."
    )


_OUR_JSON = re.compile(rb'\A\s*\{\s*"(?:version|namespaces)"')
"""How every JSON state this module writes begins (a damaged one too, if not its start)."""


def _refuse_foreign(path: Path, raw: bytes) -> None:
    """A :class:`UserError` when the file at ``path`` holds something else than a router state,
    damaged or not (a race file, a dataset, another program's JSON), which must never be moved
    aside and replaced: a ``--state`` naming the wrong file. Damage that is ours to handle: an
    empty file, anything that begins like a state, and, in a file named ``.json``, text that is
    not JSON (garbage, truncated) or JSON with no content of its own (``[]``, ``null``, a
    string)."""
    if not raw.strip() or _OUR_JSON.match(raw):
        return
    named = path.suffix.lower() == ".json"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        if named:
            return
        raise _not_ours(path, _what_text(raw)) from None
    if isinstance(data, dict):
        if data and "version" not in data and "namespaces" not in data:
            keys = ", ".join(repr(k) for k in list(data)[:4]) + (", …" if len(data) > 4 else "")
            raise _not_ours(path, f"it is a JSON object with other keys: {keys}")
    elif isinstance(data, list) and data:
        raise _not_ours(path, f"it is a JSON list of {len(data)} item(s)")
    elif not named:
        raise _not_ours(path, f"it holds a JSON {type(data).__name__}")


def _what_text(raw: bytes) -> str:
    first = next((line for line in raw.splitlines() if line.strip()), b"")
    try:
        json.loads(first.decode("utf-8"))
    except (ValueError, RecursionError):
        return "it is not JSON"
    return "it holds JSON Lines, one value a line, as a dataset does"


# ---------------------------------------------------------------------------- JSON file


class JsonFileStateStore:
    """One JSON document ``{"version": 1, "namespaces": {ns: {arm: stats}}}``, written atomically.

    A document of the wrong shape is moved aside with a warning (learning restarts from empty
    statistics) — or, with ``read_only``, reported as :class:`StateCorruptError` and left
    untouched; a read-only store never creates, locks or writes anything.
    """

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if not read_only:  # before a lock file or a cache is made beside someone else's file
            with contextlib.suppress(OSError):  # missing: made by the first write
                _refuse_foreign(self.path, self.path.read_bytes())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.read_only:  # writers replace the file atomically: a reader needs no lock
            yield
            return
        with contextlib.ExitStack() as stack:
            with _os_errors(self.path, "lock"):
                stack.enter_context(file_lock(self.path))
            yield

    def _read(self) -> dict[str, dict[str, ArmStats]]:
        with _os_errors(self.path, "read"):
            try:
                raw = self.path.read_bytes()
            except FileNotFoundError:
                return {}
        try:
            return _check_document(json.loads(raw.decode("utf-8")))
        except (ValueError, RecursionError) as exc:  # JSON, UTF-8 and shape errors
            why = str(exc) or type(exc).__name__
            if self.read_only:
                raise _corrupt(self.path, why) from None
            _refuse_foreign(self.path, raw)  # moved aside only when it is a damaged state
            quarantine(self.path, why, kind="a router state", log=logger)
            return {}

    def _write(self, data: dict[str, dict[str, ArmStats]]) -> None:
        document = {
            "version": STATE_VERSION,
            "namespaces": {
                ns: {arm: stats.to_json() for arm, stats in arms.items()}
                for ns, arms in data.items()
            },
        }
        with _os_errors(self.path, "write"):
            atomic_write(self.path, json.dumps(document).encode("utf-8"), mode=0o600)

    def _writable(self) -> None:
        if self.read_only:
            raise UserError(f"The router state {self.path} was opened read-only.")

    def load(self, namespace: str) -> dict[str, ArmStats]:
        with self._locked():
            return dict(self._read().get(namespace, {}))

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None:
        self._writable()
        with self._locked():
            data = self._read()
            arms = data.setdefault(namespace, {})
            total = arms[arm] + delta if arm in arms else delta
            arms[arm] = check_finite(total, namespace, arm)
            self._write(data)

    def reset(self, namespace: str | None = None) -> None:
        self._writable()
        with self._locked():
            data = self._read()
            if namespace is None:
                data = {}
            else:
                data.pop(namespace, None)
            self._write(data)

    def namespaces(self) -> list[str]:
        with self._locked():
            return sorted(self._read())


@contextlib.contextmanager
def _os_errors(path: Path, action: str) -> Iterator[None]:
    """File-system failures as :class:`StateStoreError` naming the real cause."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and action == "read":
            raise
        raise StateStoreError(f"Cannot {action} the router state {path}: {_cause(exc)}.") from None


def _cause(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "disk full"
    if isinstance(exc, IsADirectoryError):
        return "it is a directory, not a file (name a file in it, e.g. router_state.sqlite)"
    return exc.strerror or str(exc)


def make_parent(path: Path, what: str = "the router state") -> None:
    """Create ``path``'s folder; a :class:`StateStoreError` naming the cause when it cannot be
    (a read-only file system, a path under ``/proc``, a file where a folder belongs)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StateStoreError(
            f"Cannot create the folder of {what} {path}: {_cause(exc)}."
        ) from None
    if path.is_dir():
        raise StateStoreError(
            f"Cannot open {what} {path}: it is a directory, not a file (name a file in it, "
            "e.g. router_state.sqlite)."
        )


# ---------------------------------------------------------------------------- SQLite


def _blob(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f8").tobytes()


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS router_stats (namespace TEXT, arm TEXT, dim INTEGER,"
    " xx BLOB, xr BLOB, n REAL, reward_sum REAL, reward_sq REAL, updated_at REAL,"
    " PRIMARY KEY (namespace, arm))"
)
_OUR_TABLES = frozenset({"router_stats", "previews", "latency_samples"})
"""The tables a router state's SQLite file holds (statistics, previews and links, latency)."""
_COLUMNS = ("namespace", "arm", "dim", "xx", "xr", "n", "reward_sum", "reward_sq", "updated_at")


def _row_stats(row: tuple[Any, ...], where: str) -> ArmStats:
    """One ``router_stats`` row's statistics; ``ValueError`` when it is of the wrong shape."""
    dim, xx, xr, n, rs, rq, ts = row
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"{where} has dimension {dim!r}")
    if not isinstance(xx, bytes) or not isinstance(xr, bytes):
        raise ValueError(f"{where} holds {type(xx).__name__}/{type(xr).__name__}, not blobs")
    if len(xx) != dim * dim * 8 or len(xr) != dim * 8:
        raise ValueError(f"{where} has blobs of {len(xx)} and {len(xr)} bytes for dimension {dim}")
    return _possible(
        ArmStats(
            xx=np.frombuffer(xx, dtype="<f8").reshape(dim, dim).copy(),
            xr=np.frombuffer(xr, dtype="<f8").copy(),
            n=_number(n, f"{where}.n"),
            reward_sum=_number(rs, f"{where}.reward_sum"),
            reward_sq=_number(rq, f"{where}.reward_sq"),
            updated_at=_number(ts, f"{where}.updated_at"),
        ),
        where,
    )


class SQLiteStateStore:
    """SQLite in WAL mode; every addition is one ``BEGIN IMMEDIATE`` transaction.

    A file that is not a router state (garbage, truncated, a ``router_stats`` table of another
    shape) is moved aside with a warning and recreated — or, with ``read_only``, reported as
    :class:`StateCorruptError`; a read-only store opens the file with ``mode=ro`` and never
    changes it.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 30.0, read_only: bool = False
    ) -> None:
        self.path = Path(path)
        self._timeout = timeout
        self.read_only = read_only
        self._companions: list[str] = []
        """Schemas of the tables kept beside the statistics in the same file (the preview
        cache's, the latency history's): recreated with it when a corrupt file is moved aside."""
        if read_only:
            self._check_shape()
            return
        make_parent(self.path)
        try:
            self._init()
        except StateCorruptError as exc:
            quarantine(self.path, exc.reason, kind="a router state", log=logger)
            self._init()

    def keep_tables(self, schema: str) -> None:
        """Also (re)create ``schema`` (``CREATE … IF NOT EXISTS`` statements) whenever this
        store creates its file: a file moved aside while a process runs is replaced by one
        holding every table that process uses, not the statistics' alone."""
        if schema not in self._companions:
            self._companions.append(schema)

    def _init(self) -> None:
        self._check_shape()  # before anything is written (WAL mode changes the file's header)
        schema = ";\n".join([_SCHEMA, *(s.rstrip("; \n") for s in self._companions)])
        try:
            with self._connect() as conn:
                init_wal(conn, schema, timeout=self._timeout)
        except sqlite3.OperationalError as exc:
            raise sqlite_failure(exc, self.path, "open the router state") from None
        except sqlite3.DatabaseError as exc:  # not a database, malformed
            raise _corrupt(self.path, str(exc)) from None

    def _check_shape(self) -> None:
        try:
            with self._connect() as conn:
                tables = sorted(
                    r[0]
                    for r in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table'"
                    ).fetchall()
                )
                columns = tuple(
                    r[1] for r in conn.execute("PRAGMA table_info(router_stats)").fetchall()
                )
        except sqlite3.OperationalError as exc:
            raise sqlite_failure(exc, self.path, "open the router state") from None
        except sqlite3.DatabaseError as exc:
            raise _corrupt(self.path, str(exc)) from None
        if tables and not set(tables) & _OUR_TABLES and not self.read_only:
            # another program's database: a writer would add its tables to it
            shown = ", ".join(tables[:4]) + (", …" if len(tables) > 4 else "")
            raise _not_ours(self.path, f"it is a SQLite database with other tables: {shown}")
        if columns and columns != _COLUMNS:
            raise _corrupt(self.path, f"its router_stats table has columns {columns}")

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            # Without a write-ahead log beside it nobody is writing: ``immutable`` then keeps
            # SQLite from creating its -wal/-shm files (``mode=ro`` alone would).
            wal = self.path.with_name(self.path.name + "-wal").exists()
            flags = "mode=ro" if wal else "mode=ro&immutable=1"
            uri = f"{self.path.resolve().as_uri()}?{flags}"
            conn = sqlite3.connect(uri, uri=True, timeout=self._timeout, isolation_level=None)
        else:
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    def _rows(self, conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[Any]:
        """The rows of a read. A writer that finds the file corrupt moves it aside and
        recreates it (one warning), and one that finds the tables gone (the file was deleted
        or replaced under it) recreates them: either way nothing is learned yet, no rows."""
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                if not self.read_only:
                    conn.close()
                    self._recreate_tables()
                return []  # an empty database: a state with nothing learned yet
            raise sqlite_failure(exc, self.path, "read the router state") from None
        except sqlite3.DatabaseError as exc:
            conn.close()
            error = self._corruption(str(exc))
            if self.read_only:
                raise error from None
            return []

    def _recreate_tables(self) -> None:
        logger.warning(
            "the router state %s lost its tables (the file was deleted or replaced while in "
            "use); recreated them empty.",
            self.path,
        )
        self._init()

    def _corruption(self, why: str) -> StateCorruptError:
        """A corrupt file found while reading: writers move it aside (one warning naming where
        to) and recreate it empty, with every table kept beside the statistics."""
        if self.read_only:
            return _corrupt(self.path, why)
        aside = quarantine(self.path, why, kind="a router state", log=logger)
        self._init()
        return StateCorruptError(
            f"{self.path} was not a router state ({why}); it was moved to {aside} and a new, "
            "empty state took its place.",
            path=str(self.path),
            reason=why,
        )

    def load(self, namespace: str) -> dict[str, ArmStats]:
        with self._connect() as conn:
            rows = self._rows(
                conn,
                "SELECT arm, dim, xx, xr, n, reward_sum, reward_sq, updated_at FROM router_stats"
                " WHERE namespace = ?",
                (namespace,),
            )
        out = {}
        try:
            for arm, *row in rows:
                out[arm] = _row_stats(tuple(row), f"arm {arm!r} of {namespace!r}")
        except ValueError as exc:
            error = self._corruption(str(exc))
            if self.read_only:
                raise error from None
            return {}
        return out

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None:
        if self.read_only:
            raise UserError(f"The router state {self.path} was opened read-only.")
        try:
            added = self._add(namespace, arm, delta)
        except StateCorruptError:
            added = False
        if not added:  # moved aside, or its tables were gone: add to the recreated state
            self._add(namespace, arm, delta)

    def _add(self, namespace: str, arm: str, delta: ArmStats) -> bool:
        """Add ``delta``; ``False`` when the tables were gone and were recreated instead."""
        with self._connect() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                row = conn.execute(
                    "SELECT dim, xx, xr, n, reward_sum, reward_sq, updated_at FROM router_stats"
                    " WHERE namespace = ? AND arm = ?",
                    (namespace, arm),
                ).fetchone()
                total = delta
                if row is not None:
                    if row[0] != delta.dim:
                        raise UserError(
                            f"Stored statistics of arm {arm!r} have dimension {row[0]}, the "
                            f"update has {delta.dim}; namespaces must name the feature schema."
                        )
                    try:
                        total = delta + _row_stats(row, f"arm {arm!r} of {namespace!r}")
                    except ValueError as exc:
                        raise _corrupt(self.path, str(exc)) from None
                check_finite(total, namespace, arm)
                conn.execute(
                    "INSERT OR REPLACE INTO router_stats VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        namespace,
                        arm,
                        total.dim,
                        _blob(total.xx),
                        _blob(total.xr),
                        total.n,
                        total.reward_sum,
                        total.reward_sq,
                        total.updated_at,
                    ),
                )
                conn.execute("COMMIT")
            except BaseException as exc:
                # SQLite rolls a failed transaction back itself on some errors (a full disk):
                # a second ROLLBACK would hide the real cause behind "no transaction is active".
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if isinstance(exc, StateCorruptError):
                    conn.close()
                    quarantine(self.path, exc.reason, kind="a router state", log=logger)
                    self._init()
                    raise
                if isinstance(exc, sqlite3.OperationalError):
                    if "no such table" in str(exc):
                        conn.close()
                        self._recreate_tables()
                        return False
                    raise sqlite_failure(exc, self.path, "update the router state") from None
                if isinstance(exc, sqlite3.DatabaseError):
                    conn.close()
                    raise self._corruption(str(exc)) from None
                raise
        return True

    def reset(self, namespace: str | None = None) -> None:
        if self.read_only:
            raise UserError(f"The router state {self.path} was opened read-only.")
        with self._connect() as conn:
            try:
                if namespace is None:
                    conn.execute("DELETE FROM router_stats")
                else:
                    conn.execute("DELETE FROM router_stats WHERE namespace = ?", (namespace,))
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):  # deleted or replaced: nothing left to reset
                    conn.close()
                    self._recreate_tables()
                    return
                raise sqlite_failure(exc, self.path, "reset the router state") from None
            except sqlite3.DatabaseError as exc:  # corrupt: moved aside, a new empty one is reset
                conn.close()
                self._corruption(str(exc))

    def namespaces(self) -> list[str]:
        with self._connect() as conn:
            rows = self._rows(conn, "SELECT DISTINCT namespace FROM router_stats", ())
        return sorted(r[0] for r in rows)


def is_redis(location: str) -> bool:
    """Whether the router state at ``location`` is in Redis (not a file)."""
    return location.startswith(("redis://", "rediss://", "unix://"))


def open_state_store(
    location: str | os.PathLike[str], *, read_only: bool = False, prefix: str | None = None
) -> RouterStateStore:
    """``redis://…`` → Redis, ``*.sqlite``/``*.db`` → SQLite, anything else → JSON file.

    ``read_only`` (``phi route show``): nothing is created, locked, moved or written; a state of
    the wrong shape raises :class:`~phi_core.errors.StateCorruptError`. ``prefix``: the key
    prefix of a state in Redis (``ROUTER_STATE_KEY``; ``None``: the default); files have none.
    """
    text = str(location)
    if is_redis(text):
        from ._redis import RedisStateStore  # imports this module: not at the top

        return RedisStateStore(text, read_only=read_only, prefix=prefix)
    if read_only and not Path(text).is_file():
        raise UserError(
            f"No router state at {text!r}; race with --strategy bandit first, or pass the "
            "state's location (a .sqlite/.json file or redis://…)."
        )
    if text.endswith((".sqlite", ".sqlite3", ".db")):
        return SQLiteStateStore(text, read_only=read_only)
    return JsonFileStateStore(text, read_only=read_only)


# ---------------------------------------------------------------------------- preview cache


class PreviewCache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def set(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None: ...


class LinkStore(PreviewCache, Protocol):
    """A preview cache that also keeps the gateway's feedback links: ``get``/``set`` may treat
    a store they cannot reach as a miss (a preview is then simply not cached), while ``read``,
    ``write`` and ``claim`` raise :class:`~phi_core.errors.StateStoreError` naming the cause,
    so a link that cannot be read is never mistaken for one that does not exist."""

    def read(self, key: str) -> dict[str, Any] | None: ...

    def write(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None: ...

    def claim(
        self, key: str, value: dict[str, Any], ttl_s: float | None = None
    ) -> dict[str, Any] | None:
        """Store ``value`` under ``key`` unless a live value is there, atomically: ``None``
        when this call stored it, else the value found (which is left as it was)."""
        ...

    def delete(self, key: str) -> None: ...


class MemoryPreviewCache:
    """LRU with per-entry TTL (seconds); ``clock`` is injectable for tests. Thread-safe (the
    gateway calls it from worker threads)."""

    def __init__(
        self, max_entries: int = 1024, ttl_s: float = 600.0, clock: Any = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._data: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def _live(self, key: str) -> dict[str, Any] | None:
        item = self._data.get(key)
        if item is None:
            return None
        expires, value = item
        if self._clock() >= expires:
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def _put(self, key: str, value: dict[str, Any], ttl_s: float | None) -> None:
        self._data[key] = (self._clock() + (ttl_s if ttl_s is not None else self.ttl_s), value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._live(key)

    def set(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        with self._lock:
            self._put(key, value, ttl_s)

    read = get
    write = set

    def claim(
        self, key: str, value: dict[str, Any], ttl_s: float | None = None
    ) -> dict[str, Any] | None:
        with self._lock:
            found = self._live(key)
            if found is None:
                self._put(key, value, ttl_s)
            return found

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)


_PREVIEWS = "CREATE TABLE IF NOT EXISTS previews (key TEXT PRIMARY KEY, value TEXT, expires REAL)"


class SQLitePreviewCache:
    """Preview cache in SQLite (WAL) with expiry timestamps.

    A file whose table is gone (moved aside or replaced while in use) gets it back, and a
    corrupt one is moved aside with a warning and started afresh: a cache loses nothing that
    matters. Other failures (locked, disk full) raise :class:`StateStoreError` naming them."""

    def __init__(self, path: str | os.PathLike[str], ttl_s: float = 600.0) -> None:
        self.path = Path(path)
        self.ttl_s = ttl_s
        try:
            self._init()
        except sqlite3.OperationalError as exc:
            raise sqlite_failure(exc, self.path, "open the preview cache") from None
        except sqlite3.DatabaseError as exc:  # garbage or truncated: a cache can start afresh
            quarantine(self.path, str(exc), kind="a preview cache", log=logger)
            self._init()

    schema = _PREVIEWS

    def _init(self) -> None:
        with contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
            init_wal(conn, _PREVIEWS)

    def _run(self, action: str, work: Any) -> Any:
        """``work(conn)`` on a fresh connection; the table recreated (once) when it is gone,
        a corrupt file moved aside (once), other failures as :class:`StateStoreError`."""
        for attempt in (1, 2):
            try:
                with contextlib.closing(
                    sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
                ) as conn:
                    return work(conn)
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc) and attempt == 1:
                    self._init()
                    continue
                raise sqlite_failure(exc, self.path, f"{action} the preview cache") from None
            except sqlite3.DatabaseError as exc:
                if attempt == 1:
                    quarantine(self.path, str(exc), kind="a preview cache", log=logger)
                    self._init()
                    continue
                raise sqlite_failure(exc, self.path, f"{action} the preview cache") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def get(self, key: str) -> dict[str, Any] | None:
        def work(conn: sqlite3.Connection) -> Any:
            return conn.execute(
                "SELECT value, expires FROM previews WHERE key = ?", (key,)
            ).fetchone()

        row = self._run("read", work)
        if row is None or row[1] <= time.time():
            return None
        value: dict[str, Any] = json.loads(row[0])
        return value

    def set(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        expires = time.time() + (ttl_s if ttl_s is not None else self.ttl_s)
        text = json.dumps(value)
        self._run(
            "write",
            lambda conn: conn.execute(
                "INSERT OR REPLACE INTO previews VALUES (?, ?, ?)", (key, text, expires)
            ),
        )

    read = get
    write = set

    def claim(
        self, key: str, value: dict[str, Any], ttl_s: float | None = None
    ) -> dict[str, Any] | None:
        now = time.time()
        expires = now + (ttl_s if ttl_s is not None else self.ttl_s)
        text = json.dumps(value)

        def work(conn: sqlite3.Connection) -> Any:
            # one statement: SQLite runs it atomically, whichever process asks first wins
            stored = conn.execute(
                "INSERT INTO previews VALUES (?, ?, ?) ON CONFLICT (key) DO UPDATE SET"
                " value = excluded.value, expires = excluded.expires WHERE previews.expires <= ?"
                " RETURNING value",
                (key, text, expires, now),
            ).fetchall()
            if stored:
                return None
            return conn.execute("SELECT value FROM previews WHERE key = ?", (key,)).fetchone()

        row = self._run("write", work)
        if row is None:
            return None
        found: dict[str, Any] = json.loads(row[0])
        return found

    def delete(self, key: str) -> None:
        self._run("write", lambda conn: conn.execute("DELETE FROM previews WHERE key = ?", (key,)))

    def clear(self, prefix: str) -> int:
        """Delete every entry whose key starts with ``prefix``, and every expired one; how many
        were deleted."""
        now = time.time()

        def work(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "DELETE FROM previews WHERE substr(key, 1, ?) = ? OR expires <= ?",
                (len(prefix), prefix, now),
            )
            return int(cursor.rowcount)

        deleted: int = self._run("write", work)
        return deleted
