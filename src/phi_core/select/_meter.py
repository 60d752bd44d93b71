"""Metered model handles: what an agent under selection calls instead of a vendor SDK.

Every combination's agent receives one :class:`MeteredModel` per step. A call goes through the
shared call path (:class:`~phi_core.providers.call.ModelCall`: cache, budget reservation, the
shared limiter and retry policy, metering), so tokens, dollars and latency are read from the
provider's own usage report — no HTTP patching, whatever SDK version is installed. Each call is
recorded into every active :class:`~phi_core.metering.Meter`: the one of the evaluation that is
running (set per (combination, datapoint)) and the selection run's own, which holds the budget.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ..errors import RunError
from ..metering import Meter, active_meters
from ..providers.base import ModelConfig, Provider, StreamDone, StreamRequest
from ..providers.call import CallCache, ModelCall
from ..providers.registry import get_provider, resolve_model
from ..providers.retry import RetryPolicy
from ..types import AssistantMessage, Message, UserMessage
from ._intercept import check_open, on_close

__all__ = ["MeteredModel", "current_meter"]


def current_meter() -> Meter | None:
    """The innermost meter active in this context (an evaluation's, inside a selection run)."""
    meters = active_meters()
    return meters[-1] if meters else None


def _derived_seed(run_seed: int, request: StreamRequest, sample: int) -> int:
    """A sampling seed fixed by the run's seed, what the request asks (model, system prompt, the
    messages' roles and content, tools, sampling settings, response format) and the sample index.

    Only what a request says counts — not the bookkeeping fields messages carry (timestamps, turn
    ids, provenance...) — so the same seed samples the same answers across phi-core versions that
    add such fields, and a published run reproduces.
    """
    parts: list[str] = [
        str(run_seed),
        request.model.spec,
        request.system_prompt or "",
        repr((request.temperature, request.top_p, request.max_tokens, request.thinking)),
        json.dumps(request.response_format.model_dump(mode="json"), sort_keys=True)
        if request.response_format
        else "",
        json.dumps([t.model_dump(mode="json") for t in request.tools], sort_keys=True),
        str(sample),
    ]
    for message in request.messages:
        parts.append(message.role + ":" + str(getattr(message, "tool_name", "")))
        parts.extend(_block_text(block) for block in message.content)
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def _block_text(block: Any) -> str:
    for attr in ("text", "thinking"):
        value = getattr(block, attr, None)
        if isinstance(value, str):
            return value
    if getattr(block, "type", "") == "tool_call":
        arguments = json.dumps(getattr(block, "arguments", {}), sort_keys=True, default=str)
        return f"{getattr(block, 'name', '')}({arguments})"
    data = getattr(block, "data", None)
    if isinstance(data, str):  # an image: its bytes decide
        return hashlib.sha256(data.encode()).hexdigest()
    return repr(block)


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
        cache: CallCache | None = None,
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
        self._given_provider = provider is not None
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

    def __getstate__(self) -> dict[str, object]:
        """A pickled handle (shipped to a Ray worker) leaves behind what belongs to this process:
        its event loop, its cache connection and a provider built from the registry; the worker
        attaches its own."""
        state = dict(self.__dict__)
        state["loop"] = None
        state["cache"] = None
        if not self._given_provider:
            state["_provider"] = None
        return state

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
        check_open()  # not for a run that has ended (a sync agent's thread past its timeout)
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
        meters = active_meters()
        if meter is not None and meter not in meters:
            meters = (*meters, meter)
        seeded = next((m.seed for m in reversed(meters) if m.seed is not None), None)
        if request.seed is None and seeded is not None:
            request.seed = _derived_seed(seeded, request, sample)
        call = ModelCall(
            self.provider, request, retry=self.retry, cache=self.cache, sample=sample, meters=meters
        )
        message: AssistantMessage | None = None
        async for event in call.stream():
            if isinstance(event, StreamDone):
                message = event.message
        if message is None:
            raise RunError(f"{self.spec} ended its stream without a final message.")
        if message.stop_reason == "error" or message.error_message:
            raise RunError(f"{self.spec} failed: {message.error_message or 'error'}")
        return message

    def complete_sync(self, prompt: str | Sequence[Message], **kwargs: object) -> str:
        """Blocking :meth:`complete` for sync agents (they run in worker threads)."""
        # The coroutine runs with this thread's context (run_coroutine_threadsafe and asyncio.run
        # copy it), so the evaluation's meters record the call.
        coro = self.generate(prompt, **kwargs)  # type: ignore[arg-type]
        loop = self.loop
        if loop is not None and loop.is_running():
            future = asyncio.run_coroutine_threadsafe(coro, loop)
            on_close(future)  # stopped with the run it belongs to (a timeout, its end)
            try:
                return future.result().text
            except concurrent.futures.CancelledError:
                raise RunError(
                    f"{self.spec}: the call was stopped because its run had ended (a sync "
                    "agent past its timeout runs on in its thread)."
                ) from None
        return asyncio.run(coro).text
