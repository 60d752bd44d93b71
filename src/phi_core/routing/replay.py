"""A provider that answers with recorded real model outputs (for benchmarks and demos).

:class:`ReplayProvider` looks up ``(model id, prompt)`` in a table of :class:`Recorded` answers
and streams the recorded text back, optionally after the recorded (or simulated) latency. The
prompt is the text of the last user message. Missing entries fail with a clear
:class:`~phi_core.errors.BadRequestError`, never with an invented answer.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from ..errors import BadRequestError
from ..providers.base import StreamDone, StreamEvent, StreamRequest
from ..types import AssistantMessage, TextContent, TextDelta, Usage, message_text

__all__ = ["Recorded", "ReplayProvider", "prompt_key"]


def prompt_key(prompt: str) -> str:
    """The lookup key of a prompt (SHA-256 of its UTF-8 text)."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Recorded:
    """One recorded answer: text, dollars, latency (seconds, possibly simulated) and quality."""

    text: str
    cost_usd: float = 0.0
    latency_s: float = 0.0
    quality: float | None = None


class ReplayProvider:
    """Streams recorded answers. ``table[(model_id, prompt_key(prompt))] -> Recorded``.

    Args:
        table: the recorded answers.
        sleep: wait ``latency_s`` before answering (off by default: benchmarks account latency
            without spending wall-clock time).
    """

    def __init__(
        self,
        table: Mapping[tuple[str, str], Recorded],
        *,
        name: str = "replay",
        sleep: bool = False,
    ) -> None:
        self.name = name
        self._table = table
        self._sleep = sleep
        self.calls = 0

    def lookup(self, model: str, prompt: str) -> Recorded:
        found = self._table.get((model, prompt_key(prompt)))
        if found is None:
            raise BadRequestError(
                f"No recorded answer of model {model!r} for this prompt "
                f"({prompt[:60]!r}…); replay only covers prompts in its table.",
                provider=self.name,
            )
        return found

    async def stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        users = [m for m in request.messages if m.role == "user"]
        prompt = message_text(users[-1]) if users else ""
        recorded = self.lookup(request.model.id, prompt)
        if self._sleep and recorded.latency_s > 0:
            await asyncio.sleep(recorded.latency_s)
        text = recorded.text
        if request.max_tokens is not None:
            # Honour the token limit roughly (4 characters per token) like a real model would.
            text = text[: max(1, request.max_tokens) * 4]
        yield TextDelta(text=text)
        yield StreamDone(
            AssistantMessage(
                content=[TextContent(text=text)],
                stop_reason="stop",
                model=request.model.id,
                provider=self.name,
                usage=Usage(input=len(prompt) // 4, output=max(1, len(text) // 4)),
            )
        )
