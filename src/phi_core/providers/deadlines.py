"""Deadlines for every model call: connect, first byte, idle between chunks, and total.

An SDK's own time-out is per read: a stream that stalls after its headers, or drips a byte a
second, never trips it. The call path (:func:`~phi_core.providers.retry.stream_with_retry`, so
every provider) therefore enforces :class:`CallDeadlines` itself, around each item the provider
yields:

- **first byte**: seconds from sending an attempt to its first delta (this bounds connecting,
  the TLS handshake and the vendor's queue, whatever the transport);
- **idle**: seconds between two deltas;
- **total**: seconds for the whole call, retries and back-off included;
- **connect**: seconds to open the TCP connection, passed to the SDK transport by the providers
  that can set it (the OpenAI family); everywhere it is also bounded by ``first_byte``.

One clock for the run: the call also ends at the deadline of the scope it runs in
(:func:`deadline_scope`, which the agent loop opens for ``ExecutionLimits.max_duration``) and at
the wall-clock budget of every active :class:`~phi_core.metering.Meter` (``Budget.max_wall_s``).
A call that misses a deadline raises :class:`CallTimeoutError` (kind ``"timeout"``); the usage
that had streamed is kept by :class:`~phi_core.providers.call.ModelCall`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass

from ..errors import UserError
from ..metering import Meter, active_meters

__all__ = [
    "DEFAULT_DEADLINES",
    "CallDeadlines",
    "current_deadlines",
    "deadline_scope",
    "reset_current",
    "scope_deadline",
    "set_current",
]


@dataclass(frozen=True, slots=True)
class CallDeadlines:
    """Seconds each phase of a model call may take; ``None`` switches one off.

    The defaults suit streamed replies of a few thousand tokens from a hosted model: 10 s to
    connect, 120 s to the first delta (reasoning models think before they stream), 60 s of
    silence between deltas, 600 s for the whole call. Lower ``total`` for interactive use; raise
    ``first_byte`` for long-thinking models.
    """

    connect: float | None = 10.0
    first_byte: float | None = 120.0
    idle: float | None = 60.0
    total: float | None = 600.0

    def __post_init__(self) -> None:
        for name in ("connect", "first_byte", "idle", "total"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise UserError(
                    f"CallDeadlines.{name} must be a number of seconds or None, got {value!r}."
                )
            if not math.isfinite(value) or value <= 0:
                raise UserError(
                    f"CallDeadlines.{name} must be > 0 seconds, got {value!r}; use None for "
                    "no deadline."
                )

    @classmethod
    def none(cls) -> CallDeadlines:
        """No deadline at all (the run's own deadline and budget still apply)."""
        return cls(connect=None, first_byte=None, idle=None, total=None)


DEFAULT_DEADLINES = CallDeadlines()


_scope: ContextVar[float | None] = ContextVar("phi_call_deadline", default=None)


@contextlib.contextmanager
def deadline_scope(seconds: float | None = None, *, at: float | None = None) -> Iterator[None]:
    """Every model call in the block ends by ``at`` (a ``time.monotonic()`` value) or within
    ``seconds`` from now, whichever is given; an outer scope's earlier deadline still wins."""
    if seconds is not None:
        at = time.monotonic() + seconds if at is None else min(at, time.monotonic() + seconds)
    outer = _scope.get()
    if at is None or (outer is not None and outer <= at):
        yield
        return
    token = _scope.set(at)
    try:
        yield
    finally:
        _scope.reset(token)


def scope_deadline(meters: tuple[Meter, ...] | None = None) -> float | None:
    """The earliest run deadline here: the :func:`deadline_scope`, and the wall-clock budget of
    every active meter (as ``time.monotonic()`` values; ``None``: none)."""
    found = [d for d in (_scope.get(),) if d is not None]
    for meter in active_meters() if meters is None else meters:
        budget = meter.budget
        if budget is not None and budget.max_wall_s is not None:
            found.append(meter.started + budget.max_wall_s)
    return min(found) if found else None


_current: ContextVar[CallDeadlines] = ContextVar("phi_call_deadlines", default=DEFAULT_DEADLINES)


def current_deadlines() -> CallDeadlines:
    """The deadlines of the call being made (for providers that pass ``connect`` to their
    transport)."""
    return _current.get()


def set_current(deadlines: CallDeadlines) -> Token[CallDeadlines]:
    """Make ``deadlines`` current for one step of a provider's stream; reset with the token."""
    return _current.set(deadlines)


def reset_current(token: Token[CallDeadlines]) -> None:
    _current.reset(token)
