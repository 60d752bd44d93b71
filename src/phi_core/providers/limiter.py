"""One process-wide cap on model calls in flight, per provider and per model, adapting to 429s.

Every call takes one slot from its provider's gate and one from its model's gate. Each gate has a
cap that follows AIMD (additive increase, multiplicative decrease), the rule TCP uses:

* a rate-limited answer (429) multiplies the cap by ``decrease`` (0.5), never below ``min_cap``;
  the 429s of calls that started before the last cut do not cut again, so one burst of
  rejections halves the cap once instead of collapsing it to 1;
* a success while the gate is full (or calls wait) raises the cap by ``increase / cap`` (about +1
  per cap's worth of successes), up to the gate's ``max_cap``.

Waiting is FIFO and cancellation-safe: slots are released in ``finally``, a cancelled waiter
gives its turn to the next one. :func:`default_limiter` is the one instance shared by the loop,
races, judges and selection; :func:`~phi_core.providers.retry.stream_with_retry` uses it unless
told otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..errors import UserError

__all__ = ["GateStats", "Limiter", "LimiterSlot", "default_limiter", "set_default_limiter"]


@dataclass(frozen=True, slots=True)
class GateStats:
    """A snapshot of one gate: its current cap, calls in flight and waiting, 429s seen."""

    key: str
    cap: float
    in_flight: int
    waiting: int
    rate_limited: int
    successes: int


class _Gate:
    __slots__ = (
        "cap",
        "epoch",
        "in_flight",
        "key",
        "max_cap",
        "rate_limited",
        "successes",
        "waiters",
    )

    def __init__(self, key: str, cap: float) -> None:
        self.key = key
        self.cap = cap
        self.max_cap = cap
        self.in_flight = 0
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.epoch = 0
        self.rate_limited = 0
        self.successes = 0

    def has_room(self) -> bool:
        return self.in_flight < max(1, math.floor(self.cap))

    def wake(self) -> None:
        while self.waiters and self.has_room():
            waiter = self.waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)

    def stats(self) -> GateStats:
        return GateStats(
            self.key, self.cap, self.in_flight, len(self.waiters), self.rate_limited, self.successes
        )


class LimiterSlot:
    """A held slot; report how the call went so the caps can adapt."""

    __slots__ = ("_epochs", "_gates", "_limiter", "outcome")

    def __init__(self, limiter: Limiter, gates: tuple[_Gate, ...]) -> None:
        self._limiter = limiter
        self._gates = gates
        self._epochs = tuple(g.epoch for g in gates)
        self.outcome: str | None = None

    def rate_limited(self) -> None:
        """The call got a 429: cut the caps (once per burst)."""
        self.outcome = "rate_limited"
        limiter = self._limiter
        for gate, epoch in zip(self._gates, self._epochs, strict=True):
            gate.rate_limited += 1
            if epoch == gate.epoch:
                gate.cap = max(limiter.min_cap, gate.cap * limiter.decrease)
                gate.epoch += 1

    def success(self) -> None:
        """The call succeeded: grow the caps a little."""
        self.outcome = "success"
        for gate in self._gates:
            gate.successes += 1
            # Grow only while the cap is what holds calls back (full, or calls waiting): a cap
            # that is never reached says nothing about the vendor's limit.
            if gate.waiters or gate.in_flight >= math.floor(gate.cap):
                gate.cap = min(gate.max_cap, gate.cap + self._limiter.increase / max(gate.cap, 1.0))


class Limiter:
    """Caps calls in flight per provider and per model with AIMD; see the module docstring.

    Args:
        per_provider: initial (and maximum) cap for each provider.
        per_model: initial (and maximum) cap for each model.
        min_cap: the cap never drops below this (>= 1).
        decrease: factor applied to the cap on a 429 (0 < decrease < 1).
        increase: additive growth per cap's worth of successes.
        max_queued: calls allowed to wait per gate; more raise a ``UserError`` (None: no bound).
    """

    def __init__(
        self,
        *,
        per_provider: int = 64,
        per_model: int = 32,
        min_cap: int = 1,
        decrease: float = 0.5,
        increase: float = 1.0,
        max_queued: int | None = None,
    ) -> None:
        if per_provider < 1 or per_model < 1:
            raise UserError(
                f"Limiter caps must be >= 1, got per_provider={per_provider!r}, "
                f"per_model={per_model!r}."
            )
        if min_cap < 1:
            raise UserError(f"min_cap must be >= 1, got {min_cap!r}.")
        if not 0 < decrease < 1:
            raise UserError(f"decrease must be between 0 and 1, got {decrease!r}.")
        self.per_provider = per_provider
        self.per_model = per_model
        self.min_cap = min_cap
        self.decrease = decrease
        self.increase = increase
        self.max_queued = max_queued
        self._gates: dict[str, _Gate] = {}
        self._caps: dict[str, int] = {}

    def set_cap(self, key: str, cap: int) -> None:
        """Fix the maximum cap of one gate (``"provider:openai"`` or ``"model:openai:gpt-4o"``)."""
        if cap < 1:
            raise UserError(f"cap for {key!r} must be >= 1, got {cap!r}.")
        self._caps[key] = cap
        gate = self._gates.get(key)
        if gate is not None:
            gate.max_cap = cap
            gate.cap = min(gate.cap, cap)

    def _gate(self, key: str, default: int) -> _Gate:
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate(key, float(self._caps.get(key, default)))
        return gate

    def stats(self) -> list[GateStats]:
        return [gate.stats() for gate in self._gates.values()]

    def gate_stats(self, key: str) -> GateStats | None:
        gate = self._gates.get(key)
        return gate.stats() if gate else None

    @contextlib.asynccontextmanager
    async def slot(self, provider: str, model: str) -> AsyncIterator[LimiterSlot]:
        """Hold one slot of ``provider`` and of ``model`` (a ``provider:model`` spec)."""
        gates = (
            self._gate(f"provider:{provider}", self.per_provider),
            self._gate(f"model:{model}", self.per_model),
        )
        acquired: list[_Gate] = []
        try:
            for gate in gates:
                await self._acquire(gate)
                acquired.append(gate)
            yield LimiterSlot(self, gates)
        finally:
            for gate in acquired:
                gate.in_flight -= 1
                gate.wake()

    async def _acquire(self, gate: _Gate) -> None:
        if not gate.waiters and gate.has_room():
            gate.in_flight += 1
            return
        if self.max_queued is not None and len(gate.waiters) >= self.max_queued:
            raise UserError(
                f"Too many calls waiting for {gate.key!r} ({len(gate.waiters)} queued, "
                f"max_queued={self.max_queued}). Raise max_queued or send fewer calls at once."
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        gate.waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                # We were handed the slot just as we were cancelled: give it back.
                gate.in_flight -= 1
                gate.wake()
            else:
                with contextlib.suppress(ValueError):
                    gate.waiters.remove(waiter)
            raise


_default: Limiter | None = None


def default_limiter() -> Limiter:
    """The process-wide limiter shared by everything that calls models."""
    global _default
    if _default is None:
        _default = Limiter()
    return _default


def set_default_limiter(limiter: Limiter) -> None:
    """Replace the process-wide limiter (for example with different caps at start-up)."""
    global _default
    _default = limiter
