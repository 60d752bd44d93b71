"""Metered model handles: what an agent under selection calls instead of a vendor SDK.

Every combination's agent receives one :class:`MeteredModel` per step. A call goes through our
providers (``get_provider`` + ``stream_with_retry``, hence the shared limiter and retry policy), so
tokens, dollars and latency are read from the provider's own usage report — no HTTP patching,
whatever SDK version is installed. Each call is recorded into the :class:`Meter` of the
evaluation that is running (a context variable set per (combination, datapoint)), and answered
from the :class:`~phi_core.select.ResponseCache` when the same request was made before.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import time
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from ..errors import ProviderError, RunError
from ..providers.base import ModelConfig, Provider, StreamDone, StreamRequest
from ..providers.registry import get_provider, resolve_model
from ..providers.retry import RetryPolicy, stream_with_retry
from ..types import AssistantMessage, Message, Usage, UserMessage
from ._cache import ResponseCache, cache_key

__all__ = ["CallRecord", "Meter", "MeteredModel", "current_meter", "metered"]


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call made during an evaluation."""

    model: str
    usage: Usage
    cost: float
    latency: float
    cached: bool = False
    error: str | None = None


@dataclass
class Meter:
    """The calls of one evaluation (one combination on one datapoint)."""

    calls: list[CallRecord] = field(default_factory=list)
    seed: int | None = None
    """The selection run's seed: calls without their own seed get one derived from it and the
    request, so a seeded run samples the same replies again (and a cache keeps them apart)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, call: CallRecord) -> None:
        with self._lock:
            self.calls.append(call)

    @property
    def cost(self) -> float:
        """Dollars of every call, cached ones included (what this run costs in production)."""
        return sum(c.cost for c in self.calls)

    @property
    def spent(self) -> float:
        """Dollars actually paid now (cache hits are free)."""
        return sum(c.cost for c in self.calls if not c.cached)

    @property
    def input_tokens(self) -> int:
        return sum(c.usage.input + c.usage.cache_read + c.usage.cache_write for c in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(c.usage.output for c in self.calls)

    @property
    def model_latency(self) -> float:
        return sum(c.latency for c in self.calls)


_current: ContextVar[Meter | None] = ContextVar("phi_select_meter", default=None)


def current_meter() -> Meter | None:
    """The meter of the evaluation running in this context, if any."""
    return _current.get()


def _derived_seed(run_seed: int, request: StreamRequest, sample: int) -> int:
    """A sampling seed fixed by the run's seed, the request's content and the sample index."""
    digest = hashlib.sha256(f"{run_seed}|{cache_key(request, sample)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@contextlib.contextmanager
def metered(meter: Meter | None = None) -> Iterator[Meter]:
    """Record every :class:`MeteredModel` call made inside the block into ``meter``."""
    meter = meter if meter is not None else Meter()
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)


class MeteredModel:
    """A model an agent step calls: ``await model.complete("prompt")`` returns the reply text.

    Args:
        model: a ``provider:model`` string or a :class:`ModelConfig`.
        provider: use this provider instead of the registry's (tests pass a ScriptedProvider).
        cache: the response cache (``None``: no caching).
        retry: the retry policy for each call.
        temperature, top_p, seed, max_tokens: sampling defaults of this handle.
        name: the label in results, e.g. ``"smollm2@t=0.8"`` to race one model at two settings.
    """

    def __init__(
        self,
        model: str | ModelConfig,
        *,
        provider: Provider | None = None,
        cache: ResponseCache | None = None,
        retry: RetryPolicy | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        name: str | None = None,
    ) -> None:
        self.config = resolve_model(model)
        self.name = name or self.config.spec
        """The candidate's label in results (defaults to ``provider:model``); must be unique per step."""
        self._provider = provider
        self.cache = cache
        self.retry = retry or RetryPolicy()
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.max_tokens = max_tokens
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop sync agents' calls are sent to (set by the selector)."""

    @property
    def spec(self) -> str:
        return self.config.spec

    def __repr__(self) -> str:
        return f"MeteredModel({self.name!r})"

    @property
    def provider(self) -> Provider:
        if self._provider is None:
            self._provider = get_provider(self.config)
        return self._provider

    async def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        system: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        sample: int = 0,
    ) -> str:
        """Send ``prompt`` (text or messages) and return the reply's text."""
        message = await self.generate(
            prompt,
            system=system,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            max_tokens=max_tokens,
            sample=sample,
        )
        return message.text

    async def generate(
        self,
        prompt: str | Sequence[Message],
        *,
        system: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        sample: int = 0,
        meter: Meter | None = None,
    ) -> AssistantMessage:
        """Like :meth:`complete` but returns the whole assistant message.

        ``sample`` numbers repeated samples of the same request so the cache keeps them apart.
        """
        messages: list[Message] = (
            [UserMessage.text(prompt)] if isinstance(prompt, str) else list(prompt)
        )
        request = StreamRequest(
            model=self.config,
            messages=messages,
            system_prompt=system,
            max_tokens=max_tokens if max_tokens is not None else self.max_tokens,
            temperature=temperature if temperature is not None else self.temperature,
            top_p=top_p if top_p is not None else self.top_p,
            seed=seed if seed is not None else self.seed,
        )
        meter = meter if meter is not None else _current.get()
        if request.seed is None and meter is not None and meter.seed is not None:
            request.seed = _derived_seed(meter.seed, request, sample)
        key = cache_key(request, sample) if self.cache is not None else None
        if self.cache is not None and key is not None:
            hit = await self.cache.get(key)
            if hit is not None:
                if meter is not None:
                    meter.record(
                        CallRecord(
                            self.spec,
                            hit.message.usage,
                            self._cost(hit.message),
                            hit.latency,
                            cached=True,
                        )
                    )
                return hit.message
        started = time.perf_counter()
        message: AssistantMessage | None = None
        try:
            async for event in stream_with_retry(self.provider, request, self.retry):
                if isinstance(event, StreamDone):
                    message = event.message
        except ProviderError as error:
            if meter is not None:
                meter.record(
                    CallRecord(
                        self.spec, Usage(), 0.0, time.perf_counter() - started, error=str(error)
                    )
                )
            raise
        latency = time.perf_counter() - started
        if message is None:
            raise RunError(f"{self.spec} ended its stream without a final message.")
        if meter is not None:
            meter.record(
                CallRecord(
                    self.spec,
                    message.usage,
                    self._cost(message),
                    latency,
                    error=message.error_message,
                )
            )
        if message.stop_reason == "error" or message.error_message:
            raise RunError(f"{self.spec} failed: {message.error_message or 'error'}")
        if self.cache is not None and key is not None:
            await self.cache.put(key, message, latency)
        return message

    def complete_sync(self, prompt: str | Sequence[Message], **kwargs: object) -> str:
        """Blocking :meth:`complete` for sync agents (they run in worker threads)."""
        meter = _current.get()
        coro = self.generate(prompt, meter=meter, **kwargs)  # type: ignore[arg-type]
        loop = self.loop
        if loop is not None and loop.is_running():
            return asyncio.run_coroutine_threadsafe(coro, loop).result().text
        return asyncio.run(coro).text

    def _cost(self, message: AssistantMessage) -> float:
        return message.usage.cost(self.config.pricing)
