"""Router state and preview answers in Redis, shared by every worker and replica.

:class:`RedisStateStore` applies each update as one idempotent Lua script (atomic on the server)
under versioned keys ``phi:router:v1:<namespace>:<arm>``; while Redis is unreachable updates are
kept in a local spool (:func:`spool_path`) and pushed once it is back, one warning per transition.
:class:`RedisPreviewCache` keeps preview answers with ``SET … EX``. The other stores and the
shapes they share are in :mod:`phi_core.routing.stores`.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import numpy as np

from .._files import atomic_write, file_lock
from .._logging import get_logger
from .._paths import user_path
from .._sqlite import quarantine
from ..errors import MissingExtraError, StateCorruptError, StateStoreError, UserError
from .bandits import ArmStats
from .stores import STATE_VERSION, _number, check_finite, stats_from_json

__all__ = [
    "APPLIED_TTL_S",
    "CLAIM_TTL_S",
    "DEFAULT_PREFIX",
    "RedisPreviewCache",
    "RedisStateStore",
    "check_redis_url",
    "safe_url",
    "spool_path",
]

# the Redis store's messages keep the stores' logger name, which users' logging configs name
logger = get_logger("phi_core.routing.stores")

_ADD_LUA = """
if redis.call('SET', KEYS[4], '1', 'NX', 'EX', ARGV[4]) == false then
  return 0
end
local current = redis.call('GET', KEYS[1])
local delta = cjson.decode(ARGV[1])
if current then
  local cur = cjson.decode(current)
  if #cur.xr ~= #delta.xr then
    redis.call('DEL', KEYS[4])
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
"""One atomic, idempotent addition: ``KEYS[4]`` marks the update's id as applied, so an update
re-sent after a time-out (the server may have run it before the client gave up) counts once."""

DEFAULT_PREFIX = "phi:router:v1"
"""The key prefix of a router state in Redis unless one is given (``ROUTER_STATE_KEY``)."""

APPLIED_TTL_S = 24 * 3600
"""How long Redis remembers an applied update's id (``<prefix>:applied:<id>``, a few bytes
each): an update re-sent later than this after an outage could count twice."""


def _redis_module() -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - redis is installed in dev
        raise MissingExtraError("The Redis store", "redis") from exc
    return redis


@dataclass
class _Pending:
    """An update Redis has not confirmed: its id is fixed once it has been sent."""

    id: str
    namespace: str
    arm: str
    delta: ArmStats
    sent: bool = False
    first_sent: float | None = None
    """Wall-clock time of the first attempt (Redis remembers the id ``APPLIED_TTL_S`` after it)."""
    claim: str | None = None
    """The store instance pushing it now (spool entries only; see :class:`_Spool`)."""
    claimed_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "arm": self.arm,
            "delta": self.delta.to_json(),
            "sent": self.sent,
            "first_sent": self.first_sent,
            "claim": self.claim,
            "claimed_at": self.claimed_at,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> _Pending:
        """One spool entry, checked: ``ValueError`` naming ``where`` when of the wrong shape."""
        if not isinstance(data, dict):
            raise ValueError(f"{where} is {type(data).__name__}, not an object")
        texts: dict[str, str] = {}
        for key in ("id", "namespace", "arm"):
            value = data.get(key)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{where}.{key} is {value!r:.40}, not a non-empty string")
            texts[key] = value
        claim = data.get("claim")
        if not isinstance(data.get("sent"), bool) or not isinstance(claim, str | None):
            raise ValueError(f"{where}.sent/claim are not a boolean and a string or null")
        first = data.get("first_sent")
        return cls(
            id=texts["id"],
            namespace=texts["namespace"],
            arm=texts["arm"],
            delta=stats_from_json(data.get("delta"), f"{where}.delta"),
            sent=data["sent"],
            first_sent=None if first is None else _number(first, f"{where}.first_sent"),
            claim=claim,
            claimed_at=_number(data.get("claimed_at", 0.0), f"{where}.claimed_at"),
        )


SPOOL_DIR = "router-spool"
"""Folder of the default spools inside the user directory (``$PHI_HOME``)."""

CLAIM_TTL_S = 120.0
"""How long a push's claim on spooled updates holds: a process killed mid-push leaves its claim
behind, and another process takes those updates over once the claim is this old."""


def spool_path(url: str, prefix: str) -> Path:
    """The default spool of a Redis router state: ``$PHI_HOME/router-spool/<name>.json``, the
    name made of the server (host and port, or socket) and database plus a hash of them, the
    scheme and the key prefix — never of the URL's user name or password — so other servers,
    databases or prefixes never share a spool, and one server written two ways
    (``redis://h`` and ``redis://h:6379/0``) has one."""
    parts = urlsplit(url)
    query_db = parse_qs(parts.query).get("db", [""])[0]
    try:
        port = parts.port
    except ValueError:  # redis-py rejects such a URL itself; the spool name needs no port
        port = None
    if parts.scheme == "unix":
        server, db = parts.path, query_db or "0"
    else:
        server = f"{parts.hostname or 'localhost'}:{port or 6379}"
        db = parts.path.strip("/") or query_db or "0"
    digest = hashlib.sha256(f"{parts.scheme}://{server}/{db}\n{prefix}".encode()).hexdigest()
    readable = re.sub(r"[^A-Za-z0-9.]+", "-", f"{server}-{db}").strip("-.")[:60] or "redis"
    return user_path(SPOOL_DIR) / f"{readable}-{digest[:12]}.json"


class _Spool:
    """The pending updates of a Redis router state in a local JSON file, so that they outlive
    the process that made them: ``{"version": 1, "updates": [entry, ...]}``, read and replaced
    under :func:`~phi_core._files.file_lock` with :func:`~phi_core._files.atomic_write` (0600).

    Any store instance using the spool may push any entry in it, which is how updates left by a
    process that exited are taken over. A push first *claims* the entries it sends (its token and
    the time, written under the lock), sends them without holding the lock, then removes the ones
    Redis confirmed and releases the rest — so two instances sharing one spool never push one
    update twice (a claim older than :data:`CLAIM_TTL_S` is taken over: its owner died mid-push)
    and never lose one. A spool of the wrong shape is moved aside with a warning naming it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.token = uuid.uuid4().hex

    def _read(self) -> list[_Pending]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
                raise ValueError("not a version-1 spool document")
            updates = data.get("updates")
            if not isinstance(updates, list):
                raise ValueError(f"'updates' is {updates!r:.40}, not a list")
            return [_Pending.from_json(u, f"updates[{i}]") for i, u in enumerate(updates)]
        except (ValueError, RecursionError) as exc:  # JSON, UTF-8 and shape errors
            quarantine(
                self.path, str(exc) or type(exc).__name__, kind="a router update spool", log=logger
            )
            return []

    def peek(self) -> list[_Pending]:
        """The entries now (nothing is created when there is no spool yet)."""
        if not self.path.exists():
            return []
        with file_lock(self.path):
            return self._read()

    @contextlib.contextmanager
    def entries(self) -> Iterator[list[_Pending]]:
        """The entries under the lock, to change in place; written back when the block ends."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with file_lock(self.path):
            entries = self._read()
            yield entries
            document = {"version": STATE_VERSION, "updates": [e.to_json() for e in entries]}
            atomic_write(self.path, json.dumps(document).encode("utf-8"), mode=0o600)

    def claim(self, entries: list[_Pending]) -> list[_Pending]:
        """Claim every entry nobody is pushing (or whose pusher died); the claimed ones."""
        now = time.time()
        free = [e for e in entries if e.claim is None or now - e.claimed_at > CLAIM_TTL_S]
        for entry in free:
            entry.claim, entry.claimed_at = self.token, now
        return free

    def release(self, entries: list[_Pending], done: set[str], tried: dict[str, float]) -> None:
        """Drop the entries Redis confirmed; release this instance's claims on the others."""
        entries[:] = [e for e in entries if e.id not in done]
        for entry in entries:
            if entry.id in tried:
                entry.sent = True
                entry.first_sent = entry.first_sent or tried[entry.id]
            if entry.claim == self.token:
                entry.claim, entry.claimed_at = None, 0.0


class _SpoolDefault(enum.Enum):
    DEFAULT = "default"


DEFAULT_SPOOL = _SpoolDefault.DEFAULT
"""``RedisStateStore(spool=...)``'s default: :func:`spool_path` of the URL and the prefix."""


class RedisStateStore:
    """Atomic additive updates in Redis (one Lua script each), versioned keys; nothing lost in
    an outage.

    When Redis cannot be reached the store warns once and keeps working locally: updates are
    kept as pending deltas (reads return the last statistics read from Redis plus them). Every
    later call first tries to reconnect, with exponential back-off (``retry_min_s`` doubling to
    ``retry_max_s``); once Redis answers, the pending deltas are pushed — each an idempotent
    addition under its own id, so one that reached Redis before the connection broke is not
    counted twice — and a second warning says so. :meth:`flush` pushes them at once (call it
    before a worker exits); :attr:`pending` counts them.

    Pending updates are also kept in a *spool* file before :meth:`add` returns (``spool``:
    default :func:`spool_path` — ``$PHI_HOME/router-spool/<server>-<hash>.json``, one per server
    and key prefix —, a path of your choice, or ``None`` for memory only), so they survive the
    process: a later instance on the same spool (the next CLI run, a restarted gateway worker)
    takes them over on construction and pushes them once Redis answers; instances sharing one
    spool claim what they push (see :class:`_Spool`). Redis remembers an update's id for
    :data:`APPLIED_TTL_S`: an update first sent longer ago is pushed again with a warning, as it
    may be counted twice if that first attempt had reached Redis. A spool that cannot be read is
    moved aside with a warning naming it; one that cannot be written is given up with one warning
    (updates are then kept in memory only).

    With ``read_only`` nothing is written and an unreachable Redis raises
    :class:`StateStoreError` instead of answering from local statistics.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str | None = None,
        client: Any | None = None,
        read_only: bool = False,
        retry_min_s: float = 0.25,
        retry_max_s: float = 30.0,
        socket_timeout: float = 5.0,
        spool: str | os.PathLike[str] | _SpoolDefault | None = DEFAULT_SPOOL,
    ) -> None:
        redis = _redis_module()
        self._redis = redis
        self._errors: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
        # No retries inside the client: this store retries itself, with back-off across calls,
        # and a call never blocks for long on an unreachable server.
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._client = client or _from_url(
            redis,
            url,
            socket_connect_timeout=min(2.0, socket_timeout),
            socket_timeout=socket_timeout,
            retry=Retry(NoBackoff(), 0),
        )
        self.url = url
        self.prefix = prefix or DEFAULT_PREFIX
        self.read_only = read_only
        self.retry_min_s = retry_min_s
        self.retry_max_s = retry_max_s
        self._degraded = False
        self._backoff_started = False
        """Whether the outage was reported (a warning); pushes then say Redis is back."""
        self._backoff = retry_min_s
        self._next_try = 0.0
        self._pending: list[_Pending] = []
        self._lock = threading.RLock()
        """Serialises the pending list and the pushes: a server calls ``add`` from several
        threads at once (two pushes of one update would count it twice)."""
        self._seen: dict[str, dict[str, ArmStats]] = {}
        self._script = self._client.register_script(_ADD_LUA)
        if read_only or spool is None:
            self._spool: _Spool | None = None
        else:
            where = spool_path(url, self.prefix) if spool is DEFAULT_SPOOL else Path(spool)
            self._spool = _Spool(where)
        self._adopted = 0
        self._expired: set[str] = set()
        with self._lock:
            self._spooled(self._spool_peek)
        if self._pending:  # left by an earlier process: pushed at the next call Redis answers
            self._adopted = len(self._pending)
            self._degraded = True

    @property
    def spool_path(self) -> Path | None:
        """Where pending updates are kept across processes (``None``: in memory only)."""
        return self._spool.path if self._spool is not None else None

    def _spool_peek(self, spool: _Spool) -> None:
        self._pending = spool.peek()

    def _spooled(self, action: Callable[[_Spool], None]) -> bool:
        """Run ``action(spool)``; on a file-system failure give the spool up with one warning
        (updates are then kept in memory only). Whether it ran."""
        if self._spool is None:
            return False
        try:
            action(self._spool)
        except OSError as exc:
            logger.warning(
                "Cannot use the router update spool %s (%s); updates Redis has not confirmed are "
                "kept in memory only and are lost if this process exits before Redis is back.",
                self._spool.path,
                exc.strerror or exc,
            )
            self._spool = None
            return False
        return True

    def _edit_pending(self, edit: Callable[[list[_Pending]], None]) -> None:
        """Apply ``edit`` to the pending updates: the spool's, under its lock (then also this
        store's), or the in-memory list when there is no usable spool."""

        def spooled(spool: _Spool) -> None:
            with spool.entries() as entries:
                edit(entries)
                self._pending = list(entries)

        if not self._spooled(spooled):
            edit(self._pending)

    @property
    def degraded(self) -> bool:
        """Whether Redis was unreachable at the last attempt, or updates an earlier process left
        in the spool wait for the next call (updates are pending)."""
        return self._degraded

    @property
    def pending(self) -> int:
        """Updates kept locally until Redis confirms them (with a spool: the spooled ones as
        last seen, other processes' included)."""
        return len(self._pending)

    def _degrade(self, exc: BaseException) -> None:
        now = time.monotonic()
        if not self._backoff_started:
            self._backoff_started = True
            self._backoff = self.retry_min_s
            logger.warning(
                "Redis at %s is unreachable (%s); router updates are kept locally and pushed "
                "when it is back.",
                safe_url(self.url),
                type(exc).__name__,
            )
        else:
            self._backoff = min(self._backoff * 2, self.retry_max_s)
        self._degraded = True
        self._next_try = now + self._backoff

    def _read(self, key: str, command: Callable[[str], Any]) -> Any:
        """``command(key)``; Redis refusing it (``WRONGTYPE``: a key holding another type of
        value) is a state of the wrong shape, as a value that is not JSON is; another refusal
        (an ACL, a server error) a :class:`StateStoreError` naming it."""
        try:
            return command(key)
        except self._redis.ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                raise self._not_statistics(key, "it holds another type of value") from None
            raise StateStoreError(
                f"Redis at {safe_url(self.url)} refused to read the router state key {key} ({exc})."
            ) from None

    def _not_statistics(self, key: str, why: str) -> StateCorruptError:
        return StateCorruptError(
            f"Redis key {key} is not router statistics ({why}); reset the state (`phi route "
            "reset`), delete the key (`redis-cli DEL`), or use another key prefix.",
            path=key,
            reason=why,
        )

    def _unavailable(self, exc: BaseException) -> StateStoreError:
        return StateStoreError(
            f"Cannot read the router state at {safe_url(self.url)}: Redis cannot be reached "
            f"({type(exc).__name__}). Start it, or pass another --state."
        )

    def _reconnect(self, *, force: bool = False) -> bool:
        """Whether Redis is usable now: push the pending updates first when it was not."""
        if not self._degraded:
            return True
        if not force and time.monotonic() < self._next_try:
            return False
        warned = self._backoff_started
        try:
            pushed = self._push_pending()
        except self._errors as exc:
            self._degrade(exc)
            return False
        self._degraded = False
        self._backoff_started = False
        if warned:
            logger.warning(
                "Redis at %s is reachable again; pushed %d router update(s) kept while it was not.",
                safe_url(self.url),
                pushed,
            )
        elif self._adopted:
            logger.info(
                "Pushed %d router update(s) an earlier process left in %s.",
                pushed,
                self.spool_path,
            )
        self._adopted = 0
        return True

    def _push_pending(self) -> int:
        if self._spool is not None:
            pushed = self._push_spooled()
            if pushed is not None:
                return pushed
        pushed = 0
        while self._pending:
            item = self._pending[0]
            item.sent = True
            item.first_sent = item.first_sent or time.time()
            self._send(item)
            self._pending.pop(0)
            pushed += 1
        return pushed

    def _push_spooled(self) -> int | None:
        """Claim what is in the spool, push it, drop what Redis confirmed (``None``: the spool
        was given up, the in-memory list is pushed instead)."""
        claimed: list[_Pending] = []

        def claim(spool: _Spool) -> None:
            with spool.entries() as entries:
                claimed.extend(spool.claim(entries))
                self._pending = list(entries)

        if not self._spooled(claim):
            return None
        self._warn_if_expired(claimed)
        done: set[str] = set()
        tried: dict[str, float] = {}

        def release(spool: _Spool) -> None:
            with spool.entries() as entries:
                spool.release(entries, done, tried)
                self._pending = list(entries)

        try:
            for item in claimed:
                tried[item.id] = time.time()
                try:
                    self._send(item)
                except UserError:  # another dimension than Redis holds: it can never be applied,
                    done.add(item.id)  # and kept in the spool it would fail every later run
                    raise
                done.add(item.id)
        finally:
            if not self._spooled(release):  # keep what was not confirmed in memory
                self._pending = [p for p in self._pending if p.id not in done]
                for item in self._pending:
                    item.claim = None
                    item.sent = item.sent or item.id in tried
        return len(done)

    def _warn_if_expired(self, items: list[_Pending]) -> None:
        """Warn (once per update) about updates Redis may no longer recognise as applied."""
        now = time.time()
        old = [
            i.id
            for i in items
            if i.first_sent is not None
            and now - i.first_sent > APPLIED_TTL_S
            and i.id not in self._expired
        ]
        self._expired.update(old)
        if old:
            logger.warning(
                "%d router update(s) in %s were first sent more than %d h ago, longer than Redis "
                "remembers an update's id: they are pushed again, and one whose first attempt "
                "had reached Redis is counted twice.",
                len(old),
                self.spool_path,
                APPLIED_TTL_S // 3600,
            )

    def _keep(self, item: _Pending) -> None:
        """Add an update to the pending ones, in the spool too when there is one. An unsent one
        is merged into the pending update of the same arm that was never sent nor claimed (its
        id was never applied, so it is still free to grow): a long outage keeps about one
        entry per arm, not one per update."""

        def keep(pending: list[_Pending]) -> None:
            if not item.sent:
                for other in reversed(pending):
                    if (
                        not other.sent
                        and other.claim is None
                        and (other.namespace, other.arm) == (item.namespace, item.arm)
                    ):
                        other.delta = other.delta + item.delta
                        return
            pending.append(item)

        self._edit_pending(keep)

    def _send(self, item: _Pending) -> None:
        payload = item.delta.to_json()
        payload["xx"] = np.asarray(item.delta.xx).reshape(-1).tolist()
        ns = item.namespace
        try:
            self._script(
                keys=[
                    self._key(ns, item.arm),
                    f"{self.prefix}:{ns}:arms",
                    f"{self.prefix}:namespaces",
                    f"{self.prefix}:applied:{item.id}",
                ],
                args=[json.dumps(payload), item.arm, ns, APPLIED_TTL_S],
            )
        except self._redis.ResponseError as exc:
            if "dimension mismatch" in str(exc):
                raise UserError(
                    f"Stored statistics of arm {item.arm!r} in Redis have another dimension "
                    f"than the update ({item.delta.dim}); namespaces must name the feature "
                    "schema."
                ) from None
            raise StateCorruptError(
                f"Redis key {self._key(ns, item.arm)} is not router statistics ({exc}); "
                "delete it or use another key prefix.",
                path=self._key(ns, item.arm),
            ) from None

    def _key(self, namespace: str, arm: str) -> str:
        return f"{self.prefix}:{namespace}:{arm}"

    def _local(self, namespace: str) -> dict[str, ArmStats]:
        out = dict(self._seen.get(namespace, {}))
        mine = self._spool.token if self._spool is not None else None
        for item in self._pending:
            # Another store is pushing the ones it claimed: Redis may hold them already.
            if item.namespace == namespace and item.claim in (None, mine):
                current = out.get(item.arm)
                out[item.arm] = current + item.delta if current is not None else item.delta
        return out

    def load(self, namespace: str) -> dict[str, ArmStats]:
        with self._lock:
            if not self._reconnect():
                return self._local(namespace)
            try:
                listing = f"{self.prefix}:{namespace}:arms"
                members = self._read(listing, self._client.smembers)
                out = {}
                for arm in sorted(a.decode() for a in members):
                    key = self._key(namespace, arm)
                    raw = self._read(key, self._client.get)
                    if raw is None:
                        continue
                    try:
                        out[arm] = stats_from_json(json.loads(raw), key)
                    except (ValueError, RecursionError) as exc:  # JSON, UTF-8 and shape errors
                        raise self._not_statistics(key, str(exc) or type(exc).__name__) from None
            except self._errors as exc:
                if self.read_only:
                    raise self._unavailable(exc) from None
                self._degrade(exc)
                return self._local(namespace)
            self._seen[namespace] = dict(out)
            return self._local(namespace)

    def add(self, namespace: str, arm: str, delta: ArmStats) -> None:
        check_finite(delta, namespace, arm)
        with self._lock:
            if self.read_only:
                raise UserError(f"The router state {safe_url(self.url)} was opened read-only.")
            item = _Pending(uuid.uuid4().hex, namespace, arm, delta)
            if not self._degraded:  # the common case: one round trip, no file touched
                item.sent, item.first_sent = True, time.time()
                try:
                    self._send(item)
                    return
                except self._errors as exc:
                    self._degrade(exc)
                    self._keep(item)  # under its id: it may have reached Redis
                    return
            self._keep(item)
            self._reconnect()

    def flush(self, timeout: float = 30.0) -> bool:
        """Push the pending updates now, retrying until ``timeout``; whether none is left."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._degraded:
                    try:
                        self._push_pending()
                    except self._errors as exc:
                        self._degrade(exc)
                elif self._reconnect(force=True):
                    continue
                if not self._pending:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(self._backoff, max(deadline - time.monotonic(), 0.0)))

    def reset(self, namespace: str | None = None) -> None:
        with self._lock:
            if self.read_only:
                raise UserError(f"The router state {safe_url(self.url)} was opened read-only.")
            try:
                targets = [namespace] if namespace is not None else self._namespaces()
                for ns in targets:
                    listing = f"{self.prefix}:{ns}:arms"
                    arms = [a.decode() for a in self._read(listing, self._client.smembers)]
                    # an arm's key of the wrong type goes too: DEL takes any type
                    self._client.delete(*[self._key(ns, a) for a in arms], listing)
                    self._client.srem(f"{self.prefix}:namespaces", ns)
            except self._errors as exc:
                raise StateStoreError(
                    f"Cannot reset the router state at {safe_url(self.url)}: Redis is unreachable "
                    f"({type(exc).__name__}); nothing was reset."
                ) from None
            except self._redis.ResponseError as exc:  # not a read: DEL or SREM refused
                raise StateStoreError(
                    f"Cannot reset the router state at {safe_url(self.url)}: Redis refused it "
                    f"({exc})."
                ) from None
            for ns in targets:
                self._seen.pop(ns, None)

            def forget(pending: list[_Pending]) -> None:
                pending[:] = [
                    p for p in pending if namespace is not None and p.namespace != namespace
                ]

            self._edit_pending(forget)

    def check_reachable(self, action: str = "reset") -> None:
        """Raise :class:`StateStoreError` (naming the cause, never the password) unless Redis
        answers now: for commands that must not act on the local statistics an outage
        leaves (``phi route reset --namespace``)."""
        try:
            self._client.ping()
        except self._errors as exc:
            raise StateStoreError(
                f"Cannot {action} the router state at {safe_url(self.url)}: Redis is "
                f"unreachable ({type(exc).__name__}); nothing was {action}."
            ) from None

    def _namespaces(self) -> list[str]:
        members = self._read(f"{self.prefix}:namespaces", self._client.smembers)
        return sorted(n.decode() for n in members)

    def namespaces(self) -> list[str]:
        with self._lock:
            local = {p.namespace for p in self._pending} | set(self._seen)
            if not self._reconnect():
                return sorted(local)
            try:
                return sorted(set(self._namespaces()) | {p.namespace for p in self._pending})
            except self._errors as exc:
                if self.read_only:
                    raise self._unavailable(exc) from None
                self._degrade(exc)
                return sorted(local)


def safe_url(url: str) -> str:
    """``url`` without its password (``redis://:secret@host`` → ``redis://:***@host``)."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


_REDIS_FORM = "redis://[:password@]host:port/db, e.g. redis://127.0.0.1:6379/0"


def check_redis_url(url: str) -> None:
    """Nothing when redis-py can open ``url``; else a :class:`UserError` naming it (its
    password starred), what is wrong and the form expected: a port that is not a number, an
    unclosed ``[`` of an IPv6 address, a location that is not ``redis://``, ``rediss://`` or
    ``unix://`` at all (``--redis-url notaurl``)."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise UserError(
            f"{safe_url(url)!r} is not a Redis URL; write it as {_REDIS_FORM} "
            "(rediss:// for TLS, unix:///path/to/socket for a socket)."
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing it is the check (not a number, out of range)
        with contextlib.suppress(ImportError):
            from redis import connection

            cast(Callable[[str], object], connection.parse_url)(url)  # its query options
    except ValueError as exc:
        raise _invalid_url(url, exc) from None


def _invalid_url(url: str, exc: ValueError) -> UserError:
    why = str(exc).rstrip(".")
    password = re.search(r"//[^:/@]*:([^@/]*)@", url)
    if password and password.group(1):
        why = why.replace(password.group(1), "***")
    return UserError(
        f"{safe_url(url)} is not a valid Redis URL ({why}); write it as {_REDIS_FORM}."
    )


def _from_url(redis: Any, url: str, **options: Any) -> Any:
    """A client for ``url``; a URL redis-py refuses is a :class:`UserError` saying why."""
    check_redis_url(url)
    try:
        return redis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise _invalid_url(url, exc) from None


_CLAIM_LUA = """
local found = redis.call('GET', KEYS[1])
if found then
  return found
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return false
"""
"""Set-if-absent that returns what was there (``false`` → ``None``: this call set it)."""


class RedisPreviewCache:
    """Preview cache in Redis (``SET … EX``); for previews an unreachable Redis counts as a
    miss, with a warning, while the strict forms (:meth:`read`, :meth:`write`, :meth:`claim`;
    feedback links) raise :class:`StateStoreError`."""

    def __init__(
        self, url: str = "redis://127.0.0.1:6379/0", ttl_s: float = 600.0, client: Any | None = None
    ) -> None:
        redis = _redis_module()
        self._redis = redis
        self._errors: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
        self._client = client or _from_url(
            redis, url, socket_connect_timeout=2.0, socket_timeout=5.0
        )
        self.ttl_s = ttl_s
        self.url = url
        self._warned = False
        self._claim = self._client.register_script(_CLAIM_LUA)

    def _warn(self, exc: StateStoreError) -> None:
        if not self._warned:
            logger.warning("Redis preview cache unreachable; previews are not cached. %s", exc)
        self._warned = True

    # The lenient forms (previews): an unreachable Redis is a miss, warned about once.

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            return self.read(key)
        except StateStoreError as exc:
            self._warn(exc)
            return None

    def set(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        try:
            self.write(key, value, ttl_s)
        except StateStoreError as exc:
            self._warn(exc)

    # The strict forms (feedback links): an unreachable Redis raises, never reads as a miss.

    def _unreachable(self, exc: BaseException, action: str) -> StateStoreError:
        return StateStoreError(
            f"Cannot {action} Redis at {safe_url(self.url)}: it cannot be reached "
            f"({type(exc).__name__})."
        )

    def _ttl(self, ttl_s: float | None) -> int:
        return max(1, round(ttl_s if ttl_s is not None else self.ttl_s))

    def read(self, key: str) -> dict[str, Any] | None:
        try:
            raw = self._client.get(key)
        except self._errors as exc:
            raise self._unreachable(exc, "read") from None
        if raw is None:
            return None
        value: dict[str, Any] = json.loads(raw)
        return value

    def write(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        try:
            self._client.set(key, json.dumps(value), ex=self._ttl(ttl_s))
        except self._errors as exc:
            raise self._unreachable(exc, "write to") from None

    def claim(
        self, key: str, value: dict[str, Any], ttl_s: float | None = None
    ) -> dict[str, Any] | None:
        """``SET key value NX EX ttl``, or the value already there: one script, atomic on the
        server, so two workers claiming one key never both win."""
        try:
            raw = self._claim(keys=[key], args=[json.dumps(value), self._ttl(ttl_s)])
        except self._errors as exc:
            raise self._unreachable(exc, "write to") from None
        if raw is None:
            return None
        found: dict[str, Any] = json.loads(raw)
        return found

    def delete(self, key: str) -> None:
        try:
            self._client.delete(key)
        except self._errors as exc:
            raise self._unreachable(exc, "write to") from None

    def clear(self, prefix: str) -> int:
        """Delete every entry whose key starts with ``prefix`` (``SCAN`` + ``DEL`` in batches);
        how many were deleted. An unreachable Redis raises :class:`StateStoreError`."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"
        deleted = 0
        try:
            batch: list[bytes] = []
            for key in self._client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    deleted += int(self._client.delete(*batch))
                    batch = []
            if batch:
                deleted += int(self._client.delete(*batch))
        except self._errors as exc:
            raise self._unreachable(exc, "clear the preview cache in") from None
        except self._redis.ResponseError as exc:
            raise StateStoreError(
                f"Cannot clear the preview cache in Redis at {safe_url(self.url)}: {exc}."
            ) from None
        return deleted
