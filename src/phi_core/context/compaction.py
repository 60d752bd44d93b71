"""phi-core's legacy tiered compaction, as a *view* over the message log.

The log (``AgentContext.messages``) is never rewritten: :class:`ContextCompactor` is a
``transform_context`` callable, so it shrinks only what is sent to the model on a turn, and the
session keeps every original message. Before each model call it estimates the tokens of the
conversation (§1.5 of the study: ⌈bytes/4⌉ per text, images by size, tool calls by name + JSON)
and compacts when::

    headroom = compact_at_pct - system_prompt_tokens / max - estimate(messages) / max
    headroom < compact_budget_threshold_pct

Compaction applies levels until the messages fit ``max - system_prompt_tokens``:

* L1: every tool-result text is cut to its first ``max_lines/2`` and last lines, with a
  ``[... N lines truncated ...]`` marker;
* L2: everything before the last ``keep_recent`` messages is summarised — each assistant message
  becomes a user ``[Summary] …`` message and the tool results between them are dropped;
* L3: the first ``keep_first`` messages, a ``[Context compacted: N messages removed …]`` marker
  and the last ``keep_recent`` messages; if that still does not fit, the newest messages that fit.

Assistant tool calls are never separated from their results: when a summary replaces an assistant
message, its tool results go with it. ``focus_message`` is carried into the compaction marker so
the model is told what the removed part was about.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..types import (
    AgentMessage,
    AssistantMessage,
    ExtensionMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

__all__ = [
    "CompactionConfig",
    "CompactionReport",
    "ContextCompactor",
    "compact_messages",
    "estimate_message_tokens",
    "estimate_text_tokens",
    "estimate_tokens",
    "should_compact",
]


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """Budget and trigger (phi-core's ``ContextConfig`` + ``CompactionConfig`` defaults)."""

    max_context_tokens: int = 100_000
    system_prompt_tokens: int = 4_000
    compact_at_pct: float = 0.90
    compact_budget_threshold_pct: float = 0.05
    keep_first: int = 2
    keep_recent: int = 10
    tool_output_max_lines: int = 50
    max_summary_tokens: int = 2_000
    focus_message: str | None = None

    def __post_init__(self) -> None:
        if self.max_context_tokens < 1:
            raise ValueError(f"max_context_tokens must be >= 1, got {self.max_context_tokens}.")
        if not 0 < self.compact_at_pct <= 1:
            raise ValueError(f"compact_at_pct must be in (0, 1], got {self.compact_at_pct}.")
        if self.keep_first < 0 or self.keep_recent < 0:
            raise ValueError("keep_first and keep_recent must be >= 0.")
        if self.tool_output_max_lines < 2:
            raise ValueError(
                f"tool_output_max_lines must be >= 2, got {self.tool_output_max_lines}."
            )

    @property
    def budget(self) -> int:
        return max(self.max_context_tokens - self.system_prompt_tokens, 0)


def estimate_text_tokens(text: str) -> int:
    """⌈UTF-8 bytes / 4⌉."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def _content_tokens(block: Any) -> int:
    if isinstance(block, TextContent):
        return estimate_text_tokens(block.text)
    if isinstance(block, ThinkingContent):
        return estimate_text_tokens(block.thinking)
    if isinstance(block, ImageContent):
        raw = len(block.data) * 3 // 4
        return min(max(raw // 750, 85), 16_000)
    if isinstance(block, ToolCall):
        return estimate_text_tokens(block.name + json.dumps(block.arguments)) + 8
    return 0


def estimate_message_tokens(message: AgentMessage) -> int:
    if isinstance(message, ToolResultMessage):
        body = sum(_content_tokens(b) for b in message.content)
        return body + estimate_text_tokens(message.tool_name) + 8
    if isinstance(message, ExtensionMessage):
        return estimate_text_tokens(json.dumps(message.data, default=str)) + 4
    return sum(_content_tokens(b) for b in message.content) + 4


def estimate_tokens(messages: list[AgentMessage]) -> int:
    return sum(estimate_message_tokens(m) for m in messages)


def should_compact(messages: list[AgentMessage], config: CompactionConfig) -> bool:
    total = config.max_context_tokens
    headroom = (
        config.compact_at_pct
        - config.system_prompt_tokens / total
        - estimate_tokens(messages) / total
    )
    return headroom < config.compact_budget_threshold_pct


def _truncate_lines(text: str, max_lines: int) -> str:
    lines = text.split("\n")
    if len(lines) <= max_lines:
        return text
    head = max_lines // 2
    tail = max_lines - head
    removed = len(lines) - head - tail
    return "\n".join([*lines[:head], f"[... {removed} lines truncated ...]", *lines[-tail:]])


def _level1(messages: list[AgentMessage], max_lines: int) -> list[AgentMessage]:
    out: list[AgentMessage] = []
    for m in messages:
        if isinstance(m, ToolResultMessage):
            content = [
                TextContent(text=_truncate_lines(b.text, max_lines))
                if isinstance(b, TextContent)
                else b
                for b in m.content
            ]
            m = m.model_copy(update={"content": content})
        out.append(m)
    return out


def _summary_of(message: AssistantMessage) -> UserMessage:
    text = message.text.strip()
    if text and len(text) <= 200:
        body = text
    elif message.tool_calls:
        body = f"[Assistant used {len(message.tool_calls)} tool(s)]"
    else:
        body = "[Assistant response]"
    return UserMessage(content=[TextContent(text=f"[Summary] {body}")], timestamp=message.timestamp)


def _level2(messages: list[AgentMessage], keep_recent: int) -> list[AgentMessage]:
    cut = max(len(messages) - keep_recent, 0)
    # Never start the kept tail on a tool result whose call would be summarised away.
    while cut < len(messages) and isinstance(messages[cut], ToolResultMessage):
        cut += 1
    out: list[AgentMessage] = []
    for m in messages[:cut]:
        if isinstance(m, AssistantMessage):
            out.append(_summary_of(m))
        elif isinstance(m, ToolResultMessage):
            continue
        else:
            out.append(m)
    return out + messages[cut:]


def _marker(removed: int, focus: str | None, *, fit: bool) -> UserMessage:
    text = (
        f"[Context compacted: {removed} messages removed]"
        if fit
        else f"[Context compacted: {removed} messages removed to fit context window]"
    )
    if focus:
        text += f"\n[Focus: {focus}]"
    return UserMessage.text(text)


def _safe_tail_start(messages: list[AgentMessage], start: int) -> int:
    while start < len(messages) and isinstance(messages[start], ToolResultMessage):
        start += 1
    return start


def compact_messages(messages: list[AgentMessage], config: CompactionConfig) -> list[AgentMessage]:
    """Apply L1 → L2 → L3 until the messages fit ``config.budget`` (see the module docstring)."""
    budget = config.budget
    if estimate_tokens(messages) <= budget:
        return list(messages)
    current = _level1(messages, config.tool_output_max_lines)
    if estimate_tokens(current) <= budget:
        return current
    current = _level2(current, config.keep_recent)
    if estimate_tokens(current) <= budget:
        return current
    keep_first = min(config.keep_first, len(current))
    tail_start = _safe_tail_start(current, max(len(current) - config.keep_recent, keep_first))
    removed = tail_start - keep_first
    if removed > 0:
        current = [
            *current[:keep_first],
            _marker(removed, config.focus_message, fit=False),
            *current[tail_start:],
        ]
        if estimate_tokens(current) <= budget:
            return current
    # Last resort: the newest messages that fit, behind a marker.
    original = len(current)
    marker_cost = estimate_message_tokens(_marker(original, config.focus_message, fit=True))
    kept: list[AgentMessage] = []
    used = marker_cost
    for m in reversed(current):
        cost = estimate_message_tokens(m)
        if used + cost > budget and kept:
            break
        kept.append(m)
        used += cost
    kept.reverse()
    start = _safe_tail_start(kept, 0)
    kept = kept[start:] or kept[-1:]
    return [_marker(original - len(kept), config.focus_message, fit=True), *kept]


@dataclass(frozen=True, slots=True)
class CompactionReport:
    messages_before: int
    messages_after: int
    estimated_tokens_before: int
    estimated_tokens_after: int


class ContextCompactor:
    """A ``transform_context`` that compacts the payload when the trigger fires.

    ``before_start(estimated_tokens, message_count)`` may return False to veto one compaction;
    ``on_compacted(report)`` observes each one (``BasicAgent`` turns these into the loop's
    ``before_compaction_start`` / ``after_compaction_end`` hooks and the ``CompactionStarted`` /
    ``CompactionEnded`` events).
    """

    def __init__(
        self,
        config: CompactionConfig,
        *,
        before_start: Callable[[int, int], Any] | None = None,
        on_started: Callable[[int, int], None] | None = None,
        on_compacted: Callable[[CompactionReport], Any] | None = None,
    ) -> None:
        self.config = config
        self.before_start = before_start
        self.on_started = on_started
        self.on_compacted = on_compacted

    async def __call__(self, messages: list[AgentMessage]) -> list[AgentMessage]:
        from ..loop.config import maybe_await

        if not should_compact(messages, self.config):
            return messages
        before_tokens = estimate_tokens(messages)
        if self.before_start is not None:
            allowed = await maybe_await(self.before_start(before_tokens, len(messages)))
            if allowed is False:
                return messages
        if self.on_started is not None:
            self.on_started(before_tokens, len(messages))
        compacted = compact_messages(messages, self.config)
        report = CompactionReport(
            messages_before=len(messages),
            messages_after=len(compacted),
            estimated_tokens_before=before_tokens,
            estimated_tokens_after=estimate_tokens(compacted),
        )
        if self.on_compacted is not None:
            await maybe_await(self.on_compacted(report))
        return compacted
