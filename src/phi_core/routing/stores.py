"""Where router statistics and preview answers persist: JSON file, SQLite, Redis.

Router state is kept as **additive** sufficient statistics (:class:`~.bandits.ArmStats`) under a
*namespace* that names the feature schema and dimension, so incompatible statistics are never
mixed. Every store applies an update as an atomic addition, so several workers never lose one
another's updates:

- :class:`JsonFileStateStore`: read-add-write under an exclusive ``flock``, written to a temporary
  file, fsynced and renamed over the old one; a corrupt file is moved aside with a warning and
  learning restarts from empty statistics.
- :class:`SQLiteStateStore`: WAL mode; each addition runs in one ``BEGIN IMMEDIATE`` transaction.
- :class:`RedisStateStore`: each addition is one Lua script (atomic on the server) under versioned
  keys ``phi:router:v1:<namespace>:<arm>``; when Redis is unreachable it warns once and degrades
  to a local in-memory store for the rest of the process.

All calls are synchronous (file, SQLite and Redis client calls); async callers run them with
``asyncio.to_thread``. Preview caches (:class:`MemoryPreviewCache`, :class:`SQLitePreviewCache`,
:class:`RedisPreviewCache`) share the same shapes; the bandit race keys them by the request actually sent
(:func:`phi_core.providers.call.request_key`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .._sqlite import init_wal
from ..errors import MissingExtraError, UserError
from .bandits import ArmStats

__all__ = [
    "JsonFileStateStore",
    "MemoryPreviewCache",
    "MemoryStateStore",
    "PreviewCache",
    "RedisPreviewCache",
    "RedisStateStore",
    "RouterStateStore",
    "SQLitePreviewCache",
    "SQLiteStateStore",
    "open_state_store",
]

logger = logging.getLogger("phi_core.routing.stores")
STATE_VERSION = 1


class RouterStateStore(Protocol):
    """Additive persistence of per-arm statistics, grouped by namespace."""

    def load(self, namespace: str) -> dict[str, ArmStats]: ...

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None: ...

    def reset(self, namespace: str | None = None) -> None: ...

    def namespaces(self) -> list[str]: ...


class MemoryStateStore:
    """In-process store (tests, and the fallback of an unreachable Redis)."""

    def __init__(self) -> None:
        self._data: dict[str, dict[str, ArmStats]] = {}

    def load(self, namespace: str) -> dict[str, ArmStats]:
        return dict(self._data.get(namespace, {}))

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None:
        arms = self._data.setdefault(namespace, {})
        arms[arm] = arms[arm] + delta if arm in arms else delta

    def reset(self, namespace: str | None = None) -> None:
        if namespace is None:
            self._data.clear()
        else:
            self._data.pop(namespace, None)

    def namespaces(self) -> list[str]:
        return sorted(self._data)


# ---------------------------------------------------------------------------- JSON file


class JsonFileStateStore:
    """One JSON document ``{"version": 1, "namespaces": {ns: {arm: stats}}}``, written atomically.

    ``read_only=True`` (the web view) takes no lock (writes replace the file atomically, so a
    read sees a whole document) and never moves a corrupt file aside: it raises instead.
    """

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.read_only:
            yield
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"version": STATE_VERSION, "namespaces": {}}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
                raise ValueError(f"unsupported state version {data.get('version')!r}")
            if not isinstance(data.get("namespaces"), dict):
                raise ValueError("missing 'namespaces'")
            return data
        except (ValueError, OSError) as exc:
            if self.read_only:
                raise UserError(
                    f"The router state file {str(self.path)!r} is unreadable ({exc}); the next "
                    "bandit race moves it aside and starts from empty statistics."
                ) from None
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            os.replace(self.path, aside)
            logger.warning(
                "Router state file %s is unreadable (%s); moved it to %s and starting from "
                "empty statistics.",
                self.path,
                exc,
                aside,
            )
            return {"version": STATE_VERSION, "namespaces": {}}

    def _write(self, data: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def load(self, namespace: str) -> dict[str, ArmStats]:
        with self._locked():
            data = self._read()
        arms = data["namespaces"].get(namespace, {})
        return {arm: ArmStats.from_json(v) for arm, v in arms.items()}

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None:
        _refuse_write(self.read_only, self.path)
        with self._locked():
            data = self._read()
            arms = data["namespaces"].setdefault(namespace, {})
            current = ArmStats.from_json(arms[arm]) if arm in arms else None
            arms[arm] = (current + delta if current is not None else delta).to_json()
            self._write(data)

    def reset(self, namespace: str | None = None) -> None:
        _refuse_write(self.read_only, self.path)
        with self._locked():
            data = self._read()
            if namespace is None:
                data["namespaces"] = {}
            else:
                data["namespaces"].pop(namespace, None)
            self._write(data)

    def namespaces(self) -> list[str]:
        with self._locked():
            return sorted(self._read()["namespaces"])


# ---------------------------------------------------------------------------- SQLite


def _blob(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f8").tobytes()


class SQLiteStateStore:
    """SQLite in WAL mode; every addition is one ``BEGIN IMMEDIATE`` transaction.

    ``read_only=True`` (the web view) opens an existing file with ``mode=ro``: no table is
    created and nothing is written.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 30.0, read_only: bool = False
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._timeout = timeout
        self._missing_table = False
        if read_only:
            if not self.path.is_file():
                raise _no_state(self.path)
            with self._connect() as conn:
                self._missing_table = not conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'router_stats'"
                ).fetchone()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            init_wal(
                conn,
                "CREATE TABLE IF NOT EXISTS router_stats (namespace TEXT, arm TEXT, dim INTEGER,"
                " xx BLOB, xr BLOB, n REAL, reward_sum REAL, reward_sq REAL, updated_at REAL,"
                " PRIMARY KEY (namespace, arm))",
                timeout=timeout,
            )

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            conn = sqlite3.connect(
                self.path.resolve().as_uri() + "?mode=ro",
                uri=True,
                timeout=self._timeout,
                isolation_level=None,
            )
        else:
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    def load(self, namespace: str) -> dict[str, ArmStats]:
        if self._missing_table:
            return {}
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT arm, dim, xx, xr, n, reward_sum, reward_sq, updated_at FROM router_stats"
                " WHERE namespace = ?",
                (namespace,),
            ).fetchall()
        out = {}
        for arm, dim, xx, xr, n, rs, rq, ts in rows:
            out[arm] = ArmStats(
                xx=np.frombuffer(xx, dtype="<f8").reshape(dim, dim).copy(),
                xr=np.frombuffer(xr, dtype="<f8").copy(),
                n=n,
                reward_sum=rs,
                reward_sq=rq,
                updated_at=ts,
            )
        return out

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None:
        _refuse_write(self.read_only, self.path)
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    "SELECT dim, xx, xr, n, reward_sum, reward_sq, updated_at FROM router_stats"
                    " WHERE namespace = ? AND arm = ?",
                    (namespace, arm),
                ).fetchone()
                total = delta
                if row is not None:
                    dim, xx, xr, n, rs, rq, ts = row
                    if dim != delta.dim:
                        raise UserError(
                            f"Stored statistics of arm {arm!r} have dimension {dim}, the update "
                            f"has {delta.dim}; namespaces must name the feature schema."
                        )
                    total = delta + ArmStats(
                        xx=np.frombuffer(xx, dtype="<f8").reshape(dim, dim),
                        xr=np.frombuffer(xr, dtype="<f8"),
                        n=n,
                        reward_sum=rs,
                        reward_sq=rq,
                        updated_at=ts,
                    )
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
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def reset(self, namespace: str | None = None) -> None:
        _refuse_write(self.read_only, self.path)
        with self._connect() as conn:
            if namespace is None:
                conn.execute("DELETE FROM router_stats")
            else:
                conn.execute("DELETE FROM router_stats WHERE namespace = ?", (namespace,))

    def namespaces(self) -> list[str]:
        if self._missing_table:
            return []
        with self._connect() as conn:
            rows = conn.execute("SELECT DISTINCT namespace FROM router_stats").fetchall()
        return sorted(r[0] for r in rows)


# ---------------------------------------------------------------------------- Redis

_ADD_LUA = """
local current = redis.call('GET', KEYS[1])
local delta = cjson.decode(ARGV[1])
if current then
  local cur = cjson.decode(current)
  if #cur.xr ~= #delta.xr then
    return redis.error_reply('dimension mismatch')
  end
  for i = 1, #delta.xx do delta.xx[i] = delta.xx[i] + cur.xx[i] end
  for i = 1, #delta.xr do delta.xr[i] = delta.xr[i] + cur.xr[i] end
  delta.n = delta.n + cur.n
  delta.reward_sum = delta.reward_sum + cur.reward_sum
  delta.reward_sq = delta.reward_sq + cur.reward_sq
  if cur.updated_at > delta.updated_at then delta.updated_at = cur.updated_at end
end
redis.call('SET', KEYS[1], cjson.encode(delta))
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[3])
return 1
"""


def _redis_module() -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - redis is installed in dev
        raise MissingExtraError("The Redis store", "redis") from exc
    return redis


class RedisStateStore:
    """Atomic additive updates in Redis (one Lua script each), versioned keys, local fallback."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "phi:router:v1",
        fallback: RouterStateStore | None = None,
        client: Any | None = None,
    ) -> None:
        redis = _redis_module()
        self._errors: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
        self._client = client or redis.Redis.from_url(
            url, socket_connect_timeout=2.0, socket_timeout=5.0
        )
        self.prefix = prefix
        self._fallback: RouterStateStore = fallback or MemoryStateStore()
        self._degraded = False
        self._script = self._client.register_script(_ADD_LUA)

    @property
    def degraded(self) -> bool:
        return self._degraded

    def _degrade(self, exc: BaseException) -> None:
        if not self._degraded:
            logger.warning(
                "Redis is unreachable (%s); router state now lives in a local store for this "
                "process and is not shared with other workers.",
                type(exc).__name__,
            )
        self._degraded = True

    def _key(self, namespace: str, arm: str) -> str:
        return f"{self.prefix}:{namespace}:{arm}"

    def load(self, namespace: str) -> dict[str, ArmStats]:
        if self._degraded:
            return self._fallback.load(namespace)
        try:
            arms = sorted(
                a.decode() for a in self._client.smembers(f"{self.prefix}:{namespace}:arms")
            )
            out = {}
            for arm in arms:
                raw = self._client.get(self._key(namespace, arm))
                if raw is None:
                    continue
                data = json.loads(raw)
                dim = len(data["xr"])
                data["xx"] = np.asarray(data["xx"], dtype=np.float64).reshape(dim, dim)
                out[arm] = ArmStats.from_json(data)
            return out
        except self._errors as exc:
            self._degrade(exc)
            return self._fallback.load(namespace)

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None:
        if self._degraded:
            self._fallback.add(namespace, arm, delta)
            return
        payload = delta.to_json()
        payload["xx"] = np.asarray(delta.xx).reshape(-1).tolist()
        try:
            self._script(
                keys=[
                    self._key(namespace, arm),
                    f"{self.prefix}:{namespace}:arms",
                    f"{self.prefix}:namespaces",
                ],
                args=[json.dumps(payload), arm, namespace],
            )
        except self._errors as exc:
            self._degrade(exc)
            self._fallback.add(namespace, arm, delta)

    def reset(self, namespace: str | None = None) -> None:
        if self._degraded:
            self._fallback.reset(namespace)
            return
        targets = [namespace] if namespace is not None else self.namespaces()
        for ns in targets:
            arms = [a.decode() for a in self._client.smembers(f"{self.prefix}:{ns}:arms")]
            keys = [self._key(ns, a) for a in arms] + [f"{self.prefix}:{ns}:arms"]
            self._client.delete(*keys)
            self._client.srem(f"{self.prefix}:namespaces", ns)

    def namespaces(self) -> list[str]:
        if self._degraded:
            return self._fallback.namespaces()
        try:
            return sorted(n.decode() for n in self._client.smembers(f"{self.prefix}:namespaces"))
        except self._errors as exc:
            self._degrade(exc)
            return self._fallback.namespaces()


def open_state_store(
    location: str | os.PathLike[str], *, read_only: bool = False
) -> RouterStateStore:
    """``redis://…`` → Redis, ``*.sqlite``/``*.db`` → SQLite, anything else → JSON file.

    ``read_only=True`` opens files without creating, migrating or writing anything (reading
    Redis never writes)."""
    text = str(location)
    if text.startswith(("redis://", "rediss://", "unix://")):
        return RedisStateStore(text)
    if text.endswith((".sqlite", ".sqlite3", ".db")):
        return SQLiteStateStore(text, read_only=read_only)
    if read_only and not Path(text).is_file():
        raise _no_state(text)
    return JsonFileStateStore(text, read_only=read_only)


def _no_state(location: str | os.PathLike[str]) -> UserError:
    return UserError(
        f"No router state at {str(location)!r}; race with --strategy bandit first, or pass the "
        "state's location (a .sqlite/.json file or redis://…)."
    )


def _refuse_write(read_only: bool, path: Path) -> None:
    if read_only:
        raise UserError(f"The router state {str(path)!r} was opened read-only; it cannot change.")


# ---------------------------------------------------------------------------- preview cache


class PreviewCache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def set(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None: ...


class MemoryPreviewCache:
    """LRU with per-entry TTL (seconds); ``clock`` is injectable for tests."""

    def __init__(
        self, max_entries: int = 1024, ttl_s: float = 600.0, clock: Any = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._data: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    def get(self, key: str) -> dict[str, Any] | None:
        item = self._data.get(key)
        if item is None:
            return None
        expires, value = item
        if self._clock() >= expires:
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def set(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        self._data[key] = (self._clock() + (ttl_s if ttl_s is not None else self.ttl_s), value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)


class SQLitePreviewCache:
    """Preview cache in SQLite (WAL) with expiry timestamps."""

    def __init__(self, path: str | os.PathLike[str], ttl_s: float = 600.0) -> None:
        self.path = Path(path)
        self.ttl_s = ttl_s
        with contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
            init_wal(
                conn,
                "CREATE TABLE IF NOT EXISTS previews (key TEXT PRIMARY KEY, value TEXT, expires REAL)",
            )

    def get(self, key: str) -> dict[str, Any] | None:
        with contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
            row = conn.execute(
                "SELECT value, expires FROM previews WHERE key = ?", (key,)
            ).fetchone()
        if row is None or row[1] <= time.time():
            return None
        value: dict[str, Any] = json.loads(row[0])
        return value

    def set(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        expires = time.time() + (ttl_s if ttl_s is not None else self.ttl_s)
        with contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
            conn.execute(
                "INSERT OR REPLACE INTO previews VALUES (?, ?, ?)",
                (key, json.dumps(value), expires),
            )


class RedisPreviewCache:
    """Preview cache in Redis (``SET … EX``); unreachable Redis counts as a miss, with a warning."""

    def __init__(
        self, url: str = "redis://127.0.0.1:6379/0", ttl_s: float = 600.0, client: Any | None = None
    ) -> None:
        redis = _redis_module()
        self._errors: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
        self._client = client or redis.Redis.from_url(
            url, socket_connect_timeout=2.0, socket_timeout=5.0
        )
        self.ttl_s = ttl_s
        self._warned = False

    def _warn(self, exc: BaseException) -> None:
        if not self._warned:
            logger.warning(
                "Redis preview cache unreachable (%s); previews are not cached.", type(exc).__name__
            )
        self._warned = True

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            raw = self._client.get(key)
        except self._errors as exc:
            self._warn(exc)
            return None
        if raw is None:
            return None
        value: dict[str, Any] = json.loads(raw)
        return value

    def set(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        ttl = ttl_s if ttl_s is not None else self.ttl_s
        try:
            self._client.set(key, json.dumps(value), ex=max(1, round(ttl)))
        except self._errors as exc:
            self._warn(exc)
