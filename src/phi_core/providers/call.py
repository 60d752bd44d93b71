"""The one call path every model call takes: identity → cache → budget → limiter and retry →
meter.

:class:`ModelCall` is used by the agent loop (so by races, bandit races and judges, which run
loops) and by selection's metered model handles, so they share one behaviour around a call:

1. **Request identity.** :func:`request_key` hashes the request actually sent — model and
   endpoint, system prompt, messages (without timestamps), tools, thinking level, output limit,
   every sampling parameter, response format, extra settings — and a sample index. Every cache
   key is this key, so two configurations that differ in anything sent never share an entry.
2. **Cache** (optional, per call): a hit is answered without a call, recorded on the active
   meters as ``cached`` (free), and never consumes budget. A reply is stored under the key of
   the request sent and, when the budget lowered its output limit (step 3) but the reply was not
   cut by it (stop reason other than ``length``), under the key of the request as asked too, so a
   repeated budgeted run finds it; a cut reply is never served for a higher limit. A cache that
   fails to read is a miss; one that fails to write is logged — it never fails a call already
   paid for.
3. **Budget**: the worst case is reserved on every active meter
   (:mod:`phi_core.metering`); the call's output limit is lowered to what remains, or the call is
   refused with :class:`~phi_core.errors.BudgetExceededError` before anything is sent.
4. **Limiter, retry and deadlines**: :func:`~phi_core.providers.retry.stream_with_retry`, with
   the call's :class:`~phi_core.providers.deadlines.CallDeadlines` and the run's deadline (the
   enclosing ``deadline_scope`` and the meters' wall-clock budgets).
5. **Meter**: the real usage settles the reservation. When the stream ends early (cancelled,
   timed out, failed after deltas), the usage that streamed is estimated and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from .._logging import get_logger
from .._tasks import is_real_cancellation
from ..errors import BudgetExceededError, ProviderError
from ..metering import (
    CallRecord,
    Meter,
    Reservation,
    active_meters,
    estimate_request_tokens,
    estimate_tokens,
    metered_here,
    record_everywhere,
    reserve,
    settle,
)
from ..types import (
    AssistantMessage,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    Usage,
    message_text,
)
from .base import Provider, StreamDone, StreamEvent, StreamRequest
from .deadlines import CallDeadlines, scope_deadline
from .limiter import Limiter
from .retry import DEFAULT_LIMITER, RetryPolicy, stream_with_retry

__all__ = ["CachedResponse", "CallCache", "ModelCall", "request_key"]

logger = get_logger("phi_core.providers.call")


def request_key(request: StreamRequest, sample: int = 0) -> str:
    """The identity of ``request`` as sample number ``sample`` (a SHA-256 hex digest)."""
    model = request.model
    payload: dict[str, Any] = {
        "model": model.spec,
        "api": model.api,
        "base_url": model.base_url,
        "system_prompt": request.system_prompt,
        "messages": [
            m.model_dump(mode="json", exclude={"timestamp", "turn_id"}) for m in request.messages
        ],
        "tools": [t.model_dump(mode="json") for t in request.tools],
        "thinking": request.thinking,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature
        if request.temperature is not None
        else model.temperature,
        "top_p": request.top_p if request.top_p is not None else model.top_p,
        "seed": request.seed if request.seed is not None else model.seed,
        "response_format": (
            request.response_format.model_dump(mode="json", by_alias=True)
            if request.response_format
            else None
        ),
        "extra": request.extra,
        "sample": sample,
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class CachedResponse:
    """A cached reply and the latency of the call that produced it."""

    message: AssistantMessage
    latency: float


@runtime_checkable
class CallCache(Protocol):
    """Where replies are kept by :func:`request_key` (selection's SQLite cache, the bandit
    race's preview cache in SQLite or Redis, or your own)."""

    async def get(self, key: str) -> CachedResponse | None: ...

    async def put(self, key: str, message: AssistantMessage, latency: float) -> None: ...


class ModelCall:
    """One call through the shared path; iterate :meth:`stream` once.

    Args:
        provider: the provider to call.
        request: what to send (not mutated; the budget may send a copy with a lower
            ``max_tokens`` — :attr:`sent` is what went out).
        retry: the retry policy.
        limiter: the limiter (default: the process-wide one; ``None``: no limiting).
        cache: answer from / store into this cache (``None``: no caching).
        sample: the sample index that keeps repeated samples of one request apart in the cache.
        meters: the meters to record into (default: those active where the call is made).
        deadlines: connect, first-byte, idle and total deadlines (default: the documented
            defaults of :class:`~phi_core.providers.deadlines.CallDeadlines`).
    """

    __slots__ = (
        "_reservation",
        "_streamed",
        "cache",
        "cached",
        "deadlines",
        "key",
        "latency_s",
        "limiter",
        "message",
        "meters",
        "provider",
        "request",
        "retry",
        "sample",
        "sent",
        "usage_estimated",
    )

    def __init__(
        self,
        provider: Provider,
        request: StreamRequest,
        *,
        retry: RetryPolicy | None = None,
        limiter: Limiter | None = DEFAULT_LIMITER,
        cache: CallCache | None = None,
        sample: int = 0,
        meters: tuple[Meter, ...] | None = None,
        deadlines: CallDeadlines | None = None,
    ) -> None:
        self.provider = provider
        self.deadlines = deadlines
        self.request = request
        self.retry = retry
        self.limiter = limiter
        self.cache = cache
        self.sample = sample
        self.meters = active_meters() if meters is None else meters
        self.sent: StreamRequest | None = None
        self.key: str | None = None
        self.message: AssistantMessage | None = None
        self.cached = False
        self.latency_s = 0.0
        self._streamed: list[str] = []
        self._reservation: Reservation | None = None
        self.usage_estimated = False
        """The reply came without usage (a server that does not report it): its tokens were
        estimated (:func:`~phi_core.metering.estimate_tokens`) and are counted as such."""

    @property
    def input_estimate(self) -> int:
        request = self.sent or self.request
        return estimate_request_tokens(request.system_prompt, request.messages, request.tools)

    def partial_usage(self) -> Usage:
        """The usage of what streamed so far, estimated (zero when nothing arrived: a call cut
        before its first delta is not assumed to have been billed)."""
        if not self._streamed:
            return Usage()
        return Usage(input=self.input_estimate, output=estimate_tokens("".join(self._streamed)))

    async def stream(self) -> AsyncIterator[StreamEvent]:
        request = self.request
        model = request.model
        asked_key: str | None = None  # the key of the request as asked (the one looked up)
        if self.cache is not None:
            self.key = asked_key = request_key(request, self.sample)
            hit = await self._cache_get(self.key)
            if hit is not None:
                self.cached, self.message, self.latency_s = True, hit.message, hit.latency
                self.sent = request
                record_everywhere(
                    CallRecord(
                        model.spec,
                        hit.message.usage,
                        hit.message.usage.cost(model.pricing),
                        hit.latency,
                        cached=True,
                    ),
                    self.meters,
                )
                yield StreamDone(hit.message)
                return
        try:
            reservation = reserve(
                input_tokens=estimate_request_tokens(
                    request.system_prompt, request.messages, request.tools
                ),
                max_output=request.max_tokens,
                model_max_output=model.max_tokens,
                pricing=model.pricing,
                meters=self.meters,
            )
        except BudgetExceededError as refused:
            # Recorded (nothing spent) so whoever runs the meter sees the refusal even when the
            # caller swallows the exception.
            record_everywhere(
                CallRecord(model.spec, Usage(), 0.0, 0.0, error_kind="budget", error=str(refused)),
                self.meters,
            )
            raise
        self._reservation = reservation
        if reservation.max_output != request.max_tokens:
            request = dataclasses.replace(request, max_tokens=reservation.max_output)
            if self.cache is not None:
                self.key = request_key(request, self.sample)
        self.sent = request
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            # aclosing: a caller that stops early (aclose) closes the inner generators here and
            # now, not later in tasks of the event loop's async-generator finaliser.
            async with contextlib.aclosing(
                metered_here(
                    stream_with_retry(
                        self.provider,
                        request,
                        self.retry,
                        limiter=self.limiter,
                        deadlines=self.deadlines,
                        deadline=scope_deadline(self.meters),
                    )
                )
            ) as items:
                async for item in items:
                    if isinstance(item, StreamDone):
                        self.message = item.message
                        self._estimate_missing_usage(item.message)
                    elif isinstance(item, TextDelta):
                        self._streamed.append(item.text)
                    elif isinstance(item, ThinkingDelta):
                        self._streamed.append(item.thinking)
                    elif isinstance(item, ToolCallDelta):
                        self._streamed.append(item.arguments)
                    yield item
        except asyncio.CancelledError as exc:
            if is_real_cancellation(exc):
                error = exc
                raise
            # Nothing cancelled this task: the provider (or its SDK) raised CancelledError of
            # its own. Passed on, it would read as the run's cancellation; it is a failed call.
            error = RuntimeError(
                f"{model.spec}: the provider raised CancelledError although nothing cancelled "
                "the call (a fault in the provider or its SDK)"
            )
            raise error from exc
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.latency_s = time.perf_counter() - started
            self._settle(error)
        message = self.message
        if (
            message is not None
            and self.cache is not None
            and self.key is not None
            and message.stop_reason not in ("error", "aborted")
        ):
            await self._cache_put(self.key, message, self.latency_s)
            if asked_key is not None and asked_key != self.key and message.stop_reason != "length":
                # The budget lowered the output limit but the reply ended on its own: it is the
                # answer to the request as asked too, which is the key the next run looks up
                # (the lowered limit depends on what remains of the budget). A reply cut by
                # the lowered limit is never served for the request with the higher limit.
                await self._cache_put(asked_key, message, self.latency_s)

    def _estimate_missing_usage(self, message: AssistantMessage) -> None:
        """A complete reply reporting no tokens at all (many self-hosted OpenAI-compatible
        servers send no usage without ``stream_options``) was still paid for in compute and is
        counted against budgets: its usage is estimated from the request and the reply."""
        usage = message.usage
        if usage.input or usage.output or usage.cache_read or usage.cache_write:
            return
        if message.stop_reason in ("error", "aborted"):
            return
        text = "".join(self._streamed) or "".join(
            [message_text(message)] + [json.dumps(c.arguments) for c in message.tool_calls]
        )
        output = estimate_tokens(text)
        message.usage = Usage(input=self.input_estimate, output=output)
        self.usage_estimated = True

    def _settle(self, error: BaseException | None) -> None:
        reservation = self._reservation
        if reservation is None or reservation.settled:
            return
        request = self.sent or self.request
        pricing = request.model.pricing
        message = self.message
        if message is not None:  # the reply arrived whole (the caller may stop right after)
            usage, estimated = message.usage, self.usage_estimated
            kind = "internal" if message.stop_reason == "error" else None
            text = message.error_message
        else:
            usage, estimated = self.partial_usage(), True
            if isinstance(error, ProviderError):
                kind, text = error.kind, str(error)
            elif isinstance(error, asyncio.CancelledError | GeneratorExit):
                kind, text = "cancelled", "cancelled"
            elif error is None:
                kind, text = "internal", "the stream ended without a final message"
            else:
                kind, text = "internal", f"{type(error).__name__}: {error}"
        settle(
            reservation,
            CallRecord(
                request.model.spec,
                usage,
                usage.cost(pricing),
                self.latency_s,
                estimated=estimated and usage.total > 0,
                error_kind=kind,
                error=text,
            ),
        )

    async def _cache_get(self, key: str) -> CachedResponse | None:
        assert self.cache is not None
        try:
            return await self.cache.get(key)
        except Exception as exc:  # a broken cache is a miss, never a failed call
            logger.warning(
                "response cache read failed (%s: %s); calling the model", type(exc).__name__, exc
            )
            return None

    async def _cache_put(self, key: str, message: AssistantMessage, latency: float) -> None:
        assert self.cache is not None
        try:
            await self.cache.put(key, message, latency)
        except Exception as exc:  # the call is paid for: keep its answer, warn about the cache
            logger.warning(
                "response cache write failed (%s: %s); the answer is kept, not cached",
                type(exc).__name__,
                exc,
            )
