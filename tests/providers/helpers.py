"""Shared helpers for the provider tests."""

from __future__ import annotations

from typing import Any

from phi_core.providers.base import Provider, StreamDone, StreamRequest
from phi_core.types import AssistantMessage, StreamDelta


async def collect(
    provider: Provider, request: StreamRequest
) -> tuple[list[StreamDelta], AssistantMessage]:
    """All deltas of one call, in order, and the final message."""
    deltas: list[StreamDelta] = []
    done: AssistantMessage | None = None
    async for item in provider.stream(request):
        assert done is None, "nothing may follow StreamDone"
        if isinstance(item, StreamDone):
            done = item.message
        else:
            deltas.append(item)
    assert done is not None, "the stream must end with StreamDone"
    return deltas, done


class SleepRecorder:
    """An injected back-off sleep that records the delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> Any:
        self.delays.append(delay)
