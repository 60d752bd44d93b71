"""One retry policy for every provider: exponential back-off with jitter, honouring Retry-After.

Only retryable :class:`~phi_core.errors.ProviderError` kinds (rate-limited, overloaded, server,
network) are retried, and never once a delta of the reply has reached the caller: a half-streamed
answer cannot be taken back. Back-off sleeps are ordinary ``asyncio.sleep`` calls (or the injected
``sleep``), so cancelling the run interrupts them at once.

Each attempt holds a slot of the process-wide :class:`~phi_core.providers.limiter.Limiter` (or the
one passed as ``limiter=``; ``None`` disables limiting) and reports 429s and successes to it, so
every caller of :func:`stream_with_retry` shares one adaptive cap per provider and per model.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .._logging import get_logger
from ..errors import CallTimeoutError, DeadlineKind, ProviderError, RateLimitedError
from .base import Provider, StreamDone, StreamEvent, StreamRequest
from .deadlines import (
    DEFAULT_DEADLINES,
    CallDeadlines,
    reset_current,
    scope_deadline,
    set_current,
)
from .limiter import Limiter, LimiterSlot, default_limiter

__all__ = ["DEFAULT_LIMITER", "RetryPolicy", "stream_with_retry"]

logger = get_logger("phi_core.providers.retry")
_T = TypeVar("_T")


class _DefaultLimiter:
    """Sentinel: use :func:`default_limiter` (``None`` means no limiting)."""

    def __repr__(self) -> str:
        return "DEFAULT_LIMITER"


DEFAULT_LIMITER: Any = _DefaultLimiter()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_retries`` extra attempts after the first; delays grow ``base_delay * 2**n``.

    A vendor's ``Retry-After`` wins over the computed delay (capped at ``max_retry_after``); no
    retry starts once ``max_total`` seconds would be exceeded.
    """

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: float = 0.25
    max_total: float = 120.0
    max_retry_after: float = 60.0

    @classmethod
    def none(cls) -> RetryPolicy:
        return cls(max_retries=0)

    def delay_for(self, attempt: int, error: ProviderError) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        if error.retry_after is not None:
            return min(max(float(error.retry_after), 0.0), self.max_retry_after)
        delay = min(self.base_delay * (2.0 ** (attempt - 1)), self.max_delay)
        if self.jitter:
            delay *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(delay, 0.0)


async def stream_with_retry(
    provider: Provider,
    request: StreamRequest,
    policy: RetryPolicy | None = None,
    *,
    on_retry: Callable[[int, ProviderError, float], None] | None = None,
    limiter: Limiter | None = DEFAULT_LIMITER,
    sleep: Callable[[float], Awaitable[Any]] | None = None,
    deadlines: CallDeadlines | None = None,
    deadline: float | None = None,
) -> AsyncIterator[StreamEvent]:
    """Iterate ``provider.stream(request)``, retrying failures that happen before the first delta.

    Args:
        provider: the provider to call.
        request: the request (not mutated).
        policy: the retry policy (default :class:`RetryPolicy`).
        on_retry: called with (attempt, error, delay) before each back-off sleep.
        limiter: the limiter each attempt holds a slot of (default: the process-wide one;
            ``None``: no limiting).
        sleep: the back-off sleep (default ``asyncio.sleep``; tests inject a recorder).
        deadlines: first-byte, idle and total deadlines (default
            :data:`~phi_core.providers.deadlines.DEFAULT_DEADLINES`).
        deadline: the run's deadline as a ``time.monotonic()`` value (default: the enclosing
            :func:`~phi_core.providers.deadlines.deadline_scope` and wall-clock budgets).

    Raises:
        CallTimeoutError: a deadline passed; the stream was closed.
    """
    policy = policy or RetryPolicy()
    deadlines = deadlines or DEFAULT_DEADLINES
    if limiter is DEFAULT_LIMITER:
        limiter = default_limiter()
    do_sleep = sleep or asyncio.sleep
    run_end = scope_deadline() if deadline is None else deadline
    started = time.monotonic()
    total_end: float | None = None
    attempt = 0
    model_spec = request.model.spec
    clock = _Clock(request, deadlines, run_end)
    while True:
        yielded = False
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(clock.close)  # no timer outlives the attempt
            slot: LimiterSlot | None = None
            if limiter is not None:
                slot = await clock.wait(
                    stack.enter_async_context(limiter.slot(request.model.provider, model_spec)),
                    run_end,
                    "run",
                )
            if total_end is None:
                total_end = clock.start_total()
            stream = provider.stream(request)
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                stack.push_async_callback(aclose)
            try:
                last = time.monotonic()
                while True:
                    limit, which = clock.next_limit(last, first=not yielded)
                    token = set_current(deadlines)
                    try:
                        item = await clock.wait(anext(stream), limit, which)
                    except StopAsyncIteration:
                        break
                    finally:
                        reset_current(token)
                    last = time.monotonic()
                    yielded = True
                    if slot is not None and isinstance(item, StreamDone):
                        # Reported before handing it over: a caller may stop iterating here.
                        slot.success()
                        slot = None
                    yield item
            except ProviderError as error:
                if slot is not None and isinstance(error, RateLimitedError):
                    slot.rate_limited()
                if yielded or not error.retryable or attempt >= policy.max_retries:
                    raise
                attempt += 1
                delay = policy.delay_for(attempt, error)
                now = time.monotonic()
                if now - started + delay > policy.max_total or clock.past(now + delay):
                    raise
                retry_error = error
            else:
                return
        # The slot is released before sleeping so waiting calls can use it meanwhile.
        logger.info(
            "retrying %s after %s (attempt %d of %d, waiting %.2fs)",
            model_spec,
            retry_error.kind,
            attempt,
            policy.max_retries,
            delay,
        )
        if on_retry is not None:
            on_retry(attempt, retry_error, delay)
        await do_sleep(delay)


class _Clock:
    """The deadlines of one call as ``time.monotonic()`` values, and the one timer that
    enforces them.

    A stream's every item moves its deadline (``idle`` after the last one), so a timer armed
    and cancelled per item (``asyncio.timeout``) cost a passthrough ~8 % of its CPU. The timer
    here is armed lazily: it stays set for the earliest deadline it was given, and when it fires
    while a later deadline now applies (items arrived meanwhile) it re-arms itself for that one;
    only when the step still awaited is past its own deadline does it cancel the awaiting task,
    which :meth:`wait` turns into :class:`CallTimeoutError` (a cancellation from elsewhere stays
    a cancellation).
    """

    __slots__ = (
        "_armed_for",
        "_cancelling",
        "_fired",
        "_handle",
        "_limit",
        "_task",
        "_which",
        "deadlines",
        "request",
        "run_end",
        "total_end",
    )

    def __init__(
        self, request: StreamRequest, deadlines: CallDeadlines, run_end: float | None
    ) -> None:
        self.request = request
        self.deadlines = deadlines
        self.run_end = run_end
        self.total_end: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for = math.inf
        self._task: asyncio.Task[Any] | None = None  # the task awaiting a step now, if any
        self._limit = math.inf
        self._which: DeadlineKind = "total"
        self._cancelling = 0
        self._fired = False

    def start_total(self) -> float:
        total = self.deadlines.total
        self.total_end = time.monotonic() + total if total is not None else math.inf
        return self.total_end

    def past(self, when: float) -> bool:
        ends = [e for e in (self.total_end, self.run_end) if e is not None]
        return bool(ends) and when >= min(ends)

    def next_limit(self, last: float, *, first: bool) -> tuple[float | None, DeadlineKind]:
        """The moment the next item must have arrived by, and which deadline that is."""
        limit: float = math.inf
        which: DeadlineKind = "total"
        step = self.deadlines.first_byte if first else self.deadlines.idle
        if step is not None:
            limit, which = last + step, ("first_byte" if first else "idle")
        total_end = self.total_end
        if total_end is not None and total_end < limit:
            limit, which = total_end, "total"
        run_end = self.run_end
        if run_end is not None and run_end < limit:
            limit, which = run_end, "run"
        return (None, "total") if limit == math.inf else (limit, which)

    async def wait(self, step: Awaitable[_T], limit: float | None, which: DeadlineKind) -> _T:
        """Await ``step`` until ``limit``; past it, cancel it and raise :class:`CallTimeoutError`."""
        if limit is None:
            return await step
        task = asyncio.current_task()
        assert task is not None
        self._task, self._limit, self._which = task, limit, which
        self._cancelling = task.cancelling()
        if limit < self._armed_for:
            self._arm(limit)
        try:
            return await step
        except asyncio.CancelledError:
            if self._fired:
                self._fired = False
                if task.uncancel() <= self._cancelling:  # ours alone: the deadline passed
                    raise self.error(which) from None
            raise
        finally:
            self._task = None

    def _arm(self, limit: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        loop = asyncio.get_running_loop()
        self._handle = loop.call_at(loop.time() + (limit - time.monotonic()), self._fire)
        self._armed_for = limit

    def _fire(self) -> None:
        self._handle, self._armed_for = None, math.inf
        task = self._task
        if task is None:  # no step is awaited now: the next wait arms the timer again
            return
        if time.monotonic() < self._limit - 0.001:  # items came meanwhile: a later deadline now
            self._arm(self._limit)
            return
        self._fired = True
        task.cancel()

    def close(self) -> None:
        """Cancel the timer (the attempt is over)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._armed_for, self._fired = None, math.inf, False

    def error(self, which: DeadlineKind) -> CallTimeoutError:
        model = self.request.model
        d = self.deadlines
        seconds = {
            "connect": d.connect,
            "first_byte": d.first_byte,
            "idle": d.idle,
            "total": d.total,
            "run": None,
        }[which]
        what = {
            "connect": "could not connect",
            "first_byte": "sent nothing",
            "idle": "went silent",
            "total": "did not finish",
            "run": "was still running when the run's deadline passed",
        }[which]
        detail = (
            f" within {seconds:g}s (CallDeadlines.{which})"
            if seconds is not None
            else " (ExecutionLimits.max_duration or Budget.max_wall_s)"
        )
        return CallTimeoutError(
            f"{model.spec} timed out: the call {what}{detail}",
            deadline=which,
            seconds=seconds or 0.0,
            provider=model.provider,
            model=model.id,
        )
