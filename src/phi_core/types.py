"""Messages, content blocks, usage and stop reasons: the data every other layer speaks.

All of them are pydantic v2 models with a discriminator (``type`` for content and deltas,
``role`` for messages), so sessions, logs and ``--json`` output are the same objects and
round-trip through JSON unchanged.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

__all__ = [
    "AgentMessage",
    "AssistantMessage",
    "CompactedSection",
    "CompactionBlock",
    "Content",
    "ExtensionMessage",
    "ImageContent",
    "InputSource",
    "Message",
    "Pricing",
    "ResponseFormat",
    "StopReason",
    "StreamDelta",
    "TextContent",
    "TextDelta",
    "ThinkingContent",
    "ThinkingDelta",
    "ThinkingLevel",
    "ToolCall",
    "ToolCallDelta",
    "ToolDefinition",
    "ToolResultMessage",
    "TurnId",
    "TurnRange",
    "Usage",
    "UserMessage",
    "lone_surrogate",
    "message_text",
    "now_ms",
    "scrub_surrogates",
]


def now_ms() -> int:
    """Unix time in milliseconds, the timestamp unit of every message and event."""
    return time.time_ns() // 1_000_000


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in ``text`` (not valid Unicode, unsendable), or None.

    Such code points come from undecodable bytes (``surrogateescape``), JSON ``"\\ud83d"``
    escapes and careless slicing; no vendor accepts them and UTF-8 cannot encode them.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def scrub_surrogates(text: str) -> str:
    """``text`` with surrogate pairs joined and lone surrogates replaced by U+FFFD.

    Cheap when there is nothing to do (one encode attempt).
    """
    if lone_surrogate(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


# --------------------------------------------------------------------------- content


class TextContent(_Model):
    type: Literal["text"] = "text"
    text: str


class ImageContent(_Model):
    type: Literal["image"] = "image"
    data: str = Field(description="base64-encoded image bytes")
    mime_type: str = "image/png"


class ThinkingContent(_Model):
    """Model reasoning. ``signature`` must be echoed back unchanged to the vendor that made it."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None
    redacted: bool = False


class ToolCall(_Model):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # The raw argument text when the provider sent something that was not a JSON object;
    # the tool executor turns it into an error result instead of running the tool.
    raw_arguments: str | None = None
    # An opaque vendor token attached to the call (Gemini's thought signature), echoed back
    # unchanged to the vendor that made it.
    signature: str | None = None


Content = Annotated[
    TextContent | ImageContent | ThinkingContent | ToolCall, Field(discriminator="type")
]

StopReason = Literal["stop", "length", "tool_use", "error", "aborted"]
ThinkingLevel = Literal["off", "minimal", "low", "medium", "high"]


# --------------------------------------------------------------------------- usage


class Pricing(_Model):
    """US dollars per million tokens.

    ``cache_read`` (a cached prompt token read) and ``cache_write`` (a prompt token written to
    the cache) left unset (``None``) cost what an input token costs, as in the built-in price
    table; ``0.0`` makes them free. :attr:`cache_read_price` and :attr:`cache_write_price` are
    the prices in effect.
    """

    input: float = 0.0
    output: float = 0.0
    cache_read: float | None = None
    cache_write: float | None = None

    @property
    def cache_read_price(self) -> float:
        """Dollars per million cached prompt tokens read: ``cache_read``, else ``input``."""
        return self.input if self.cache_read is None else self.cache_read

    @property
    def cache_write_price(self) -> float:
        """Dollars per million prompt tokens written to the cache: ``cache_write``, else
        ``input``."""
        return self.input if self.cache_write is None else self.cache_write


class Usage(_Model):
    """Token accounting for one call or the sum of many.

    ``total`` falls back to ``input + output`` when a provider does not report it.
    ``input`` counts the uncached prompt tokens; cached ones are in ``cache_read``/``cache_write``.
    """

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total: int = 0

    @model_validator(mode="after")
    def _fill_total(self) -> Usage:
        negative = {k: v for k, v in self.__dict__.items() if isinstance(v, int) and v < 0}
        if negative:  # it would refund a budget and win a token-efficient race
            shown = ", ".join(f"{k}={v}" for k, v in negative.items())
            raise ValueError(f"token counts cannot be negative ({shown}): impossible usage")
        if self.total == 0 and (self.input or self.output):
            self.total = self.input + self.output
        return self

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            reasoning=self.reasoning + other.reasoning,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            total=self.total + other.total,
        )

    @classmethod
    def sum(cls, usages: Any) -> Usage:
        out = cls()
        for u in usages:
            out = out + u
        return out

    @property
    def cache_hit_rate(self) -> float:
        denominator = self.input + self.cache_read + self.cache_write
        return self.cache_read / denominator if denominator else 0.0

    def cost(self, pricing: Pricing | None) -> float:
        """Dollars for this usage at ``pricing`` (reasoning tokens are billed inside ``output``)."""
        if pricing is None:
            return 0.0
        return (
            self.input * pricing.input
            + self.output * pricing.output
            + self.cache_read * pricing.cache_read_price
            + self.cache_write * pricing.cache_write_price
        ) / 1_000_000


# --------------------------------------------------------------------------- messages


class TurnId(_Model):
    loop_id: str
    turn_index: int


class _MessageBase(_Model):
    timestamp: int = Field(default_factory=now_ms)
    turn_id: TurnId | None = None


InputSource = Literal["user", "steering", "follow_up", "sub_agent", "limit", "compaction", "memo"]
"""Where a user-role message came from: the caller's prompt, a steering or follow-up message, a
sub-agent's task, the loop's own "[Agent stopped: …]" notice, a compaction summary or marker, or a
``prun_with_memo`` memo."""


class UserMessage(_MessageBase):
    role: Literal["user"] = "user"
    content: list[Content]
    provenance: InputSource | None = None
    """Set by the loop when it adds the message; ``None`` for messages it never saw (history
    passed in by the caller), which count as ``"user"``."""

    @classmethod
    def text(cls, text: str) -> UserMessage:
        return cls(content=[TextContent(text=text)])


class AssistantMessage(_MessageBase):
    role: Literal["assistant"] = "assistant"
    content: list[Content] = Field(default_factory=list)
    stop_reason: StopReason = "stop"
    model: str = ""
    provider: str = ""
    usage: Usage = Field(default_factory=Usage)
    error_message: str | None = None
    error_kind: str | None = None
    """The classified kind of a failed call (a ``ProviderError``'s ``kind``: ``auth``,
    ``rate_limited``, ``timeout``, ``budget``...); ``None`` when the call did not fail."""
    retry_after: float | None = None
    """Seconds the vendor asked to wait before retrying (rate limits that said so)."""

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.content if isinstance(c, TextContent))

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [c for c in self.content if isinstance(c, ToolCall)]


class ToolResultMessage(_MessageBase):
    role: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    content: list[Content]
    is_error: bool = False


class ExtensionMessage(_MessageBase):
    """An application message kept in the conversation log that never reaches a model."""

    role: Literal["extension"] = "extension"
    kind: str
    data: Any = None


Message = Annotated[UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="role")]
AgentMessage = Annotated[
    UserMessage | AssistantMessage | ToolResultMessage | ExtensionMessage,
    Field(discriminator="role"),
]

MESSAGES_ADAPTER: TypeAdapter[list[AgentMessage]] = TypeAdapter(list[AgentMessage])


def message_text(message: Any) -> str:
    """All text blocks of a message joined (empty for extension messages)."""
    content = getattr(message, "content", None)
    if not content:
        return ""
    return "".join(c.text for c in content if isinstance(c, TextContent))


# --------------------------------------------------------------------------- streaming deltas


class TextDelta(_Model):
    type: Literal["text_delta"] = "text_delta"
    index: int = 0
    text: str


class ThinkingDelta(_Model):
    type: Literal["thinking_delta"] = "thinking_delta"
    index: int = 0
    thinking: str = ""
    signature: str | None = None


class ToolCallDelta(_Model):
    """Part of a tool call: the first delta of a call carries ``id`` and ``name``."""

    type: Literal["tool_call_delta"] = "tool_call_delta"
    index: int = 0
    id: str | None = None
    name: str | None = None
    arguments: str = ""


StreamDelta = Annotated[TextDelta | ThinkingDelta | ToolCallDelta, Field(discriminator="type")]


# --------------------------------------------------------------------------- request parts


class ToolDefinition(_Model):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ResponseFormat(_Model):
    """Ask for structured output: a JSON object matching ``schema`` (or any JSON object)."""

    type: Literal["json_schema", "json_object"] = "json_schema"
    name: str = "response"
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool = True


# --------------------------------------------------------------------------- compaction overlays


class TurnRange(_Model):
    """Turns ``start_turn`` to ``end_turn`` (inclusive) of a conversation, counted from 0.

    A turn is a user message and everything until the next one (``phi_core.context``)."""

    start_turn: int = Field(ge=0)
    end_turn: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> TurnRange:
        if self.end_turn < self.start_turn:
            raise ValueError(
                f"end_turn must be >= start_turn, got {self.start_turn}..{self.end_turn}"
            )
        return self


class CompactedSection(_Model):
    """The messages that replace the turns of ``range`` in the view sent to the model."""

    range: TurnRange
    messages: list[AgentMessage] = Field(default_factory=list)


class CompactionBlock(_Model):
    """A non-destructive overlay over the first ``covers_messages`` messages of a conversation.

    The original messages stay where they are; the view keeps the ``keep_first`` turns verbatim,
    replaces the middle turns by ``keep_compacted.messages`` and the recent turns by
    ``keep_recent.messages`` (tool outputs truncated), and appends everything after the covered
    messages unchanged. Removing the block restores the original conversation.
    """

    keep_first: TurnRange | None = None
    keep_compacted: CompactedSection | None = None
    keep_recent: CompactedSection | None = None
    covers_messages: int = Field(default=0, ge=0)
    focus_message: str | None = None
    created_at: int = Field(default_factory=now_ms)
