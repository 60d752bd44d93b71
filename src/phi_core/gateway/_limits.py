"""Per-key request rates and daily spend, in memory (one process) or in Redis (shared).

Windows are fixed: a minute for rates, a UTC day for spend. Redis counters are ``INCR`` /
``INCRBYFLOAT`` with an expiry, so every worker adds to the same numbers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Protocol

__all__ = ["LimitCounters", "MemoryCounters", "RedisCounters", "day_window", "minute_window"]


def minute_window(now: float | None = None) -> tuple[str, float]:
    """The current minute's id and the seconds until it ends."""
    now = time.time() if now is None else now
    start = int(now // 60) * 60
    return str(start), start + 60 - now


def day_window(now: float | None = None) -> tuple[str, float]:
    """The current UTC day's id and the seconds until it ends."""
    now = time.time() if now is None else now
    start = int(now // 86_400) * 86_400
    return str(start), start + 86_400 - now


class LimitCounters(Protocol):
    async def hit(self, key: str, window: str, ttl_s: float) -> int:
        """Count one request of ``key`` in ``window``; returns the count including it."""
        ...

    async def spend(self, key: str, window: str, usd: float, ttl_s: float) -> float:
        """Add ``usd`` to ``key``'s spend in ``window`` (0 reads it); returns the total."""
        ...


class MemoryCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hits: dict[tuple[str, str], int] = {}
        self._spend: dict[tuple[str, str], float] = {}

    async def hit(self, key: str, window: str, ttl_s: float) -> int:
        with self._lock:
            self._hits = {k: v for k, v in self._hits.items() if k[1] == window}
            count = self._hits.get((key, window), 0) + 1
            self._hits[(key, window)] = count
            return count

    async def spend(self, key: str, window: str, usd: float, ttl_s: float) -> float:
        with self._lock:
            total = self._spend.get((key, window), 0.0) + usd
            self._spend[(key, window)] = total
            return total


class RedisCounters:
    """Counters under ``phi:gateway:{rate|spend}:<key>:<window>`` in Redis."""

    def __init__(self, client: Any, prefix: str = "phi:gateway") -> None:
        self._client = client
        self.prefix = prefix

    async def hit(self, key: str, window: str, ttl_s: float) -> int:
        name = f"{self.prefix}:rate:{key}:{window}"

        def run() -> int:
            pipe = self._client.pipeline()
            pipe.incr(name)
            pipe.expire(name, max(1, int(ttl_s) + 1))
            return int(pipe.execute()[0])

        return await asyncio.to_thread(run)

    async def spend(self, key: str, window: str, usd: float, ttl_s: float) -> float:
        name = f"{self.prefix}:spend:{key}:{window}"

        def run() -> float:
            pipe = self._client.pipeline()
            pipe.incrbyfloat(name, usd)
            pipe.expire(name, max(1, int(ttl_s) + 1))
            return float(pipe.execute()[0])

        return await asyncio.to_thread(run)
