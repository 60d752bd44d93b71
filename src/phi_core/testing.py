"""Test doubles for phi-core users and for phi-core's own tests.

:class:`ScriptedProvider` plays a list of scripted turns and records every request it receives, so a
test can assert exactly what a model was sent::

    provider = ScriptedProvider([
        Reply(tool_calls=[call("add", {"a": 1, "b": 2})]),
        Reply("The answer is 3."),
    ])
    config = AgentLoopConfig(provider=provider)
    ...
    assert provider.requests[1].messages[-1].role == "tool_result"

A script item is a :class:`Reply`, a :class:`Fail`, a :class:`Hang`, or a callable taking the
:class:`StreamRequest` and returning one of those (for replies that depend on the request, such as
a judge reading the candidates).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import BadRequestError, ProviderError
from .providers.base import StreamDone, StreamEvent, StreamRequest
from .types import (
    AssistantMessage,
    Content,
    StopReason,
    TextContent,
    TextDelta,
    ThinkingContent,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    message_text,
)

__all__ = ["Fail", "Hang", "Reply", "ScriptItem", "ScriptedProvider", "call"]

_ids = itertools.count(1)


def call(
    name: str, arguments: dict[str, Any] | str | None = None, id: str | None = None
) -> ToolCall:
    """A scripted tool call. A ``str`` argument is sent as raw (possibly malformed) JSON text."""
    call_id = id or f"call_{next(_ids)}"
    if isinstance(arguments, str):
        return ToolCall(id=call_id, name=name, arguments={}, raw_arguments=arguments)
    return ToolCall(id=call_id, name=name, arguments=arguments or {})


@dataclass
class Reply:
    """One assistant turn.

    ``text`` may be a string (streamed in ``chunks`` pieces) or a list of deltas streamed as given.
    ``delay`` waits before the first delta; ``delta_delay`` between deltas. Like a vendor, the
    reply is cut at the request's ``max_tokens`` (4 characters a token; stop reason ``length``).
    """

    text: str | Sequence[str] = ""
    thinking: str | None = None
    thinking_signature: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    stop_reason: StopReason | None = None
    delay: float = 0.0
    delta_delay: float = 0.0
    chunks: int = 1
    model: str | None = None


@dataclass
class Fail:
    """Raise ``error`` (a ProviderError), optionally after streaming ``partial_text`` first."""

    error: ProviderError
    partial_text: str = ""
    delay: float = 0.0


@dataclass
class Hang:
    """Stream ``partial_text`` and then wait forever (until cancelled)."""

    partial_text: str = ""


ScriptItem = Reply | Fail | Hang | Callable[[StreamRequest], "Reply | Fail | Hang"]


class ScriptedProvider:
    """A provider that plays scripted turns in order; see the module docstring.

    When the script runs out it repeats ``default`` if one was given, else fails the call with a
    clear error. ``requests`` holds every request received (including retried ones).
    """

    def __init__(
        self,
        script: Iterable[ScriptItem | str] = (),
        *,
        name: str = "scripted",
        default: ScriptItem | str | None = None,
    ) -> None:
        self.name = name
        self._script: list[ScriptItem] = [_coerce(item) for item in script]
        self._default = _coerce(default) if default is not None else None
        self.requests: list[StreamRequest] = []
        self.calls = 0

    def push(self, *items: ScriptItem | str) -> None:
        self._script.extend(_coerce(i) for i in items)

    @property
    def remaining(self) -> int:
        return len(self._script)

    async def stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        self.calls += 1
        if self._script:
            item = self._script.pop(0)
        elif self._default is not None:
            item = self._default
        else:
            raise BadRequestError(
                f"ScriptedProvider {self.name!r} has no scripted turn left "
                f"(call {self.calls}); add more items or a default.",
                provider=self.name,
            )
        if callable(item) and not isinstance(item, Reply | Fail | Hang):
            item = _coerce(item(request))
        model = request.model.id
        if isinstance(item, Fail):
            if item.delay:
                await asyncio.sleep(item.delay)
            if item.partial_text:
                yield TextDelta(text=item.partial_text)
            raise item.error
        if isinstance(item, Hang):
            if item.partial_text:
                yield TextDelta(text=item.partial_text)
            await asyncio.Event().wait()
            return  # pragma: no cover - unreachable
        assert isinstance(item, Reply)
        async for event in _play(item, model or "scripted", self.name, request):
            yield event


def _coerce(item: Any) -> Any:
    return Reply(item) if isinstance(item, str) else item


async def _play(
    reply: Reply, model: str, provider: str, request: StreamRequest
) -> AsyncIterator[StreamEvent]:
    if reply.delay:
        await asyncio.sleep(reply.delay)
    content: list[Content] = []
    index = 0
    if reply.thinking is not None:
        yield ThinkingDelta(
            index=index, thinking=reply.thinking, signature=reply.thinking_signature
        )
        content.append(ThinkingContent(thinking=reply.thinking, signature=reply.thinking_signature))
        index += 1
    pieces = _pieces(reply.text, reply.chunks)
    limit = request.max_tokens
    truncated = False
    if limit is not None:
        # Like a vendor: at most ``max_tokens`` output tokens (this double counts 4 chars a token).
        room, kept = limit * 4, []
        for piece in pieces:
            if room <= 0:
                truncated = True
                break
            kept.append(piece[:room])
            truncated = truncated or len(piece) > room
            room -= len(piece)
        pieces = kept
    text = ""
    for n, piece in enumerate(pieces):
        if n and reply.delta_delay:
            await asyncio.sleep(reply.delta_delay)
        text += piece
        yield TextDelta(index=index, text=piece)
    if text:
        content.append(TextContent(text=text))
        index += 1
    for tool_call in reply.tool_calls:
        raw = (
            tool_call.raw_arguments
            if tool_call.raw_arguments is not None
            else json.dumps(tool_call.arguments)
        )
        yield ToolCallDelta(index=index, id=tool_call.id, name=tool_call.name, arguments=raw)
        content.append(tool_call)
        index += 1
    usage = reply.usage or Usage(
        input=sum(len(message_text(m)) // 4 for m in request.messages),
        output=max(len(text) // 4, 1 if text else 0),
    )
    if limit is not None and usage.output > limit:
        usage = usage.model_copy(update={"output": limit, "total": usage.input + limit})
    stop: StopReason = reply.stop_reason or (
        "length" if truncated else ("tool_use" if reply.tool_calls else "stop")
    )
    yield StreamDone(
        AssistantMessage(
            content=content,
            stop_reason=stop,
            model=reply.model or model,
            provider=provider,
            usage=usage,
        )
    )


def _pieces(text: str | Sequence[str], chunks: int) -> list[str]:
    if not isinstance(text, str):
        return list(text)
    if not text:
        return []
    if chunks <= 1:
        return [text]
    size = max(1, -(-len(text) // chunks))
    return [text[i : i + size] for i in range(0, len(text), size)]
