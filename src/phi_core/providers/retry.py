"""One retry policy for every provider: exponential back-off with jitter, honouring Retry-After.

Only retryable :class:`~phi_core.errors.ProviderError` kinds (rate-limited, overloaded, server,
network) are retried, and never once a delta of the reply has reached the caller: a half-streamed
answer cannot be taken back. Back-off sleeps are ordinary ``asyncio.sleep`` calls, so cancelling
the run interrupts them at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from ..errors import ProviderError
from .base import Provider, StreamEvent, StreamRequest

__all__ = ["RetryPolicy", "stream_with_retry"]

logger = logging.getLogger("phi_core.providers.retry")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_retries`` extra attempts after the first; delays grow ``base_delay * 2**n``."""

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
            return min(max(error.retry_after, 0.0), self.max_retry_after)
        delay = min(self.base_delay * (2 ** (attempt - 1)), self.max_delay)
        if self.jitter:
            delay *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(delay, 0.0)


async def stream_with_retry(
    provider: Provider,
    request: StreamRequest,
    policy: RetryPolicy | None = None,
    *,
    on_retry: Callable[[int, ProviderError, float], None] | None = None,
) -> AsyncIterator[StreamEvent]:
    """Iterate ``provider.stream(request)``, retrying failures that happen before the first delta."""
    policy = policy or RetryPolicy()
    started = time.monotonic()
    attempt = 0
    while True:
        yielded = False
        stream = provider.stream(request)
        try:
            async for item in stream:
                yielded = True
                yield item
            return
        except ProviderError as error:
            if yielded or not error.retryable or attempt >= policy.max_retries:
                raise
            attempt += 1
            delay = policy.delay_for(attempt, error)
            if time.monotonic() - started + delay > policy.max_total:
                raise
            logger.info(
                "retrying %s after %s (attempt %d of %d, waiting %.2fs)",
                provider.name,
                error.kind,
                attempt,
                policy.max_retries,
                delay,
            )
            if on_retry is not None:
                on_retry(attempt, error, delay)
            await asyncio.sleep(delay)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
