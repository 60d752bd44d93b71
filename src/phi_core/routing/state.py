"""The router state and its companions, opened from one location.

A bandit race keeps three kinds of state that must survive a process: the router's additive
statistics, the preview cache and the latency history. :func:`open_route_state` opens all three
from one location: a SQLite file holds all three (tables side by side), a JSON state keeps its
companions in a SQLite file beside it, and ``redis://…`` shares all three between processes —
each state under its key prefix (``ROUTER_STATE_KEY``): previews under ``<prefix>:preview:``,
and the latency history of a state with its own prefix under ``<prefix>:latency``, so states
with different prefixes share neither. :func:`clear_previews` forgets a state's previews
(``phi route reset``).
"""

from __future__ import annotations

import asyncio
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._paths import user_path
from ..providers.call import CachedResponse
from ..types import AssistantMessage
from ._redis import (
    DEFAULT_PREFIX,
    DEFAULT_SPOOL,
    RedisPreviewCache,
    RedisStateStore,
    _SpoolDefault,
    check_redis_url,
)
from .history import (
    LATENCY_PREFIX,
    LatencyHistory,
    RedisLatencyHistory,
    SQLiteLatencyHistory,
)
from .stores import (
    PreviewCache,
    RouterStateStore,
    SQLitePreviewCache,
    SQLiteStateStore,
    is_redis,
    make_parent,
    open_state_store,
)

__all__ = [
    "DEFAULT_STATE",
    "PreviewCallCache",
    "RouteState",
    "check_redis_url",
    "clear_previews",
    "is_redis",
    "open_route_state",
    "preview_prefix",
    "route_state_summary",
    "state_location",
]

DEFAULT_STATE = "router_state.sqlite"
"""File name of the default router state inside the user directory (``$PHI_HOME``)."""


def state_location(state: str | None = None) -> str:
    """``state``, else ``$PHI_ROUTER_STATE``, else ``router_state.sqlite`` in the user directory."""
    return state or os.environ.get("PHI_ROUTER_STATE") or str(user_path(DEFAULT_STATE))


def preview_prefix(location: str, key_prefix: str | None = None) -> str:
    """The prefix of the preview keys of the state at ``location``: ``<key prefix>:preview:`` in
    Redis (the router state's prefix, default ``phi:router:v1``), ``preview:`` in a file (whose
    previews table is the state's own). Feedback links and whatever else the store keeps have
    keys of their own, never under it."""
    if is_redis(location):
        return f"{key_prefix or DEFAULT_PREFIX}:preview:"
    return "preview:"


class PreviewCallCache:
    """A :class:`~phi_core.routing.PreviewCache` store (memory, SQLite, Redis; with expiry)
    serving the call path's cache protocol: replies keyed by the request actually sent, under
    ``prefix`` (see :func:`preview_prefix`)."""

    def __init__(self, store: PreviewCache, ttl_s: float = 600.0, prefix: str = "") -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.prefix = prefix

    async def get(self, key: str) -> CachedResponse | None:
        value = await asyncio.to_thread(self.store.get, self.prefix + key)
        if not isinstance(value, dict) or "message" not in value:
            return None
        message = AssistantMessage.model_validate(value["message"])
        return CachedResponse(message, float(value.get("latency", 0.0)))

    async def put(self, key: str, message: AssistantMessage, latency: float) -> None:
        value = {"message": message.model_dump(mode="json"), "latency": latency}
        await asyncio.to_thread(self.store.set, self.prefix + key, value, self.ttl_s)


@dataclass
class RouteState:
    """The router state and its companions, opened from one location."""

    location: str
    store: RouterStateStore
    cache: PreviewCallCache | None
    history: LatencyHistory | None


def open_route_state(
    location: str | None = None,
    *,
    preview_cache: bool = True,
    cache_ttl_s: float = 600.0,
    key_prefix: str | None = None,
    spool: str | os.PathLike[str] | _SpoolDefault | None = DEFAULT_SPOOL,
) -> RouteState:
    """Open the router state at ``location`` (see :func:`state_location`) with its preview
    cache and latency history beside it; ``key_prefix`` names the router state's keys in Redis
    (and its previews' and, when not the default, its latency history's), ``spool`` where
    updates Redis has not confirmed are kept (see :class:`~phi_core.routing.RedisStateStore`;
    default :func:`~phi_core.routing.spool_path`).

    Raises:
        StateStoreError: the state cannot be opened (a directory, a folder that cannot be made
            or written, an unreachable or refusing store), naming it and why.
    """
    where = state_location(location)
    redis = is_redis(where)
    if not redis:
        make_parent(Path(where))
    store = (
        RedisStateStore(where, prefix=key_prefix, spool=spool) if redis else open_state_store(where)
    )
    cache_store: PreviewCache
    history: LatencyHistory
    if redis:
        client = getattr(store, "_client", None)
        cache_store = RedisPreviewCache(where, ttl_s=cache_ttl_s, client=client)
        # the default prefix keeps the history where it always was (samples are worth keeping)
        own = key_prefix is not None and key_prefix != DEFAULT_PREFIX
        latency = f"{key_prefix}:latency" if own else LATENCY_PREFIX
        history = (
            RedisLatencyHistory(client, prefix=latency)
            if client is not None
            else _sqlite_beside(where)
        )
    else:
        path = Path(where)
        companions = _companions(path)
        cache_store = SQLitePreviewCache(companions, ttl_s=cache_ttl_s)
        history = SQLiteLatencyHistory(companions)
        if companions == path and isinstance(store, SQLiteStateStore):
            # one file: a corrupt one moved aside is recreated with every table, not the
            # statistics' alone
            store.keep_tables(SQLitePreviewCache.schema)
            store.keep_tables(SQLiteLatencyHistory._SCHEMA)
    cache = (
        PreviewCallCache(cache_store, cache_ttl_s, prefix=preview_prefix(where, key_prefix))
        if preview_cache
        else None
    )
    return RouteState(where, store, cache, history)


def clear_previews(location: str | None = None, *, key_prefix: str | None = None) -> int:
    """Forget the cached previews of the router state at ``location`` (``phi route reset``: a
    reset router that found its old previews cached would not learn from them again); how many
    were deleted. Nothing is created where there is no preview cache; feedback links kept in
    the same store stay.

    Raises:
        StateStoreError: the cache cannot be reached or written, naming why.
    """
    where = state_location(location)
    prefix = preview_prefix(where, key_prefix)
    if is_redis(where):
        return RedisPreviewCache(where).clear(prefix)
    companions = _companions(Path(where))
    if not companions.is_file():
        return 0
    return SQLitePreviewCache(companions).clear(prefix)


def _companions(path: Path) -> Path:
    """The SQLite file of a file state's preview cache and latency history: the state itself
    when it is SQLite, else a file beside it."""
    return path if path.suffix in (".sqlite", ".sqlite3", ".db") else _beside(path)


def _beside(path: Path) -> Path:
    return path.with_name(path.name + ".cache.sqlite")


def _sqlite_beside(where: str) -> SQLiteLatencyHistory:
    return SQLiteLatencyHistory(user_path("latency.sqlite", create_dir=True))


def route_state_summary(store: RouterStateStore) -> dict[str, Any]:
    """``{namespace: {arm: {n, mean_reward, reward_sd, ci95, updated_at}}}`` for ``phi route
    show`` and the web view: ``reward_sd`` is the rewards' standard deviation and ``ci95`` the
    half-width of the mean's 95 % interval (``None`` below two observations)."""
    out: dict[str, Any] = {}
    for namespace in store.namespaces():
        arms = {}
        for arm, stats in sorted(store.load(namespace).items()):
            mean = stats.reward_sum / stats.n if stats.n else None
            sd = (
                math.sqrt(max(0.0, stats.reward_sq / stats.n - (mean or 0.0) ** 2))
                if stats.n
                else None
            )
            arms[arm] = {
                "n": stats.n,
                "mean_reward": mean,
                "reward_sd": sd,
                "ci95": 1.96 * sd / math.sqrt(stats.n) if sd is not None and stats.n >= 2 else None,
                "updated_at": stats.updated_at,
            }
        out[namespace] = arms
    return out
