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
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ProviderError, RateLimitedError
from .base import Provider, StreamDone, StreamEvent, StreamRequest
from .limiter import Limiter, LimiterSlot, default_limiter

__all__ = ["DEFAULT_LIMITER", "RetryPolicy", "stream_with_retry"]

logger = logging.getLogger("phi_core.providers.retry")


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
    """
    policy = policy or RetryPolicy()
    if limiter is DEFAULT_LIMITER:
        limiter = default_limiter()
    do_sleep = sleep or asyncio.sleep
    started = time.monotonic()
    attempt = 0
    model_spec = request.model.spec
    while True:
        yielded = False
        async with contextlib.AsyncExitStack() as stack:
            slot: LimiterSlot | None = None
            if limiter is not None:
                slot = await stack.enter_async_context(
                    limiter.slot(request.model.provider, model_spec)
                )
            stream = provider.stream(request)
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                stack.push_async_callback(aclose)
            try:
                async for item in stream:
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
                if time.monotonic() - started + delay > policy.max_total:
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
