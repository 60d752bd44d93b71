"""Automatic tiered compaction, as a *view* over the message log.

The log (``AgentContext.messages``) is never rewritten: the loop compacts only what it sends to the
model on a turn, and the session keeps every original message. **Compaction is on by default**
(``AgentLoopConfig.compaction`` defaults to ``CompactionConfig()``, phi-core's ``BasicAgent``
default): its budget is the model's own context window, so it only acts when a conversation would
otherwise not fit. ``compaction=None`` (or ``BasicAgent.without_context_management()``) turns it
off.

Before each model call the loop measures the request (a :class:`~phi_core.context.ContextTracker`:
the model's last reported usage plus estimates of what was added since) and compacts when::

    headroom = compact_at_pct - request_tokens / max_context_tokens
    headroom < compact_budget_threshold_pct          # defaults: above 85 % of the window

``request_tokens`` counts the system prompt and tool definitions too (``system_prompt_tokens``
when set, else measured). Compaction then applies tiers until the messages fit the target (the
trigger point, so the reply keeps the rest of the window). Turns (a user message and everything
until the next one, see ``_summary``) are the unit, so tool calls never lose their results:

* L1: every tool-result text is cut to its first and last ``tool_output_max_lines`` lines
  (lines matching the focus are kept too), with ``[... N lines truncated ...]`` markers;
* L2: the first ``keep_first_turns`` and the last ``keep_recent_turns`` turns stay; every turn in
  between keeps its user messages, each assistant message becomes a ``[Summary] …`` note and its
  tool results go (within ``max_summary_tokens`` of summaries);
* L3: the first turns, a ``[Context compacted: …]`` marker and the last turns; if that still does
  not fit, the newest whole turns that fit (and, if even one turn is too big, the newest messages
  of it that fit, behind its user message). A tool result is never kept without the assistant
  message that made its call: when the newest messages start on results, the message with
  their calls is kept with them even if that passes the target (the target leaves room below
  the window; if the provider still reports an overflow, the loop compacts harder once, then
  ends the turn with the overflow error rather than send a result without its call).

``focus_message`` reaches every tier (see ``_summary``). A custom :class:`CompactionStrategy`
replaces the tiers (``with_compaction_strategy``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..events import CompactionReason
from ..types import (
    AgentMessage,
    AssistantMessage,
    ExtensionMessage,
    TextContent,
    ToolResultMessage,
    UserMessage,
)
from ._summary import focus_terms, split_turns, summarise_turn, truncate_tool_outputs
from .tokens import HEURISTIC, TokenCounter, message_tokens, messages_tokens, token_counter_for

if TYPE_CHECKING:
    from ..providers.base import ModelConfig

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "CompactionConfig",
    "CompactionReport",
    "CompactionStrategy",
    "ContextCompactor",
    "DefaultCompaction",
    "compact_messages",
    "estimate_message_tokens",
    "estimate_text_tokens",
    "estimate_tokens",
    "should_compact",
    "summarise_turns",
]

DEFAULT_CONTEXT_TOKENS = 100_000
_MESSAGE_TYPES = (UserMessage, AssistantMessage, ToolResultMessage, ExtensionMessage)


@runtime_checkable
class CompactionStrategy(Protocol):
    """Replaces the tiers: ``compact(messages, config)`` returns the messages to send (sync or
    async). ``config`` is resolved: ``max_context_tokens``, ``system_prompt_tokens`` and
    ``token_counter`` are set, and :meth:`CompactionConfig.target` says how small to get."""

    def compact(
        self, messages: list[AgentMessage], config: CompactionConfig
    ) -> list[AgentMessage] | Awaitable[list[AgentMessage]]: ...


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """When and how to compact (phi-core's ``ContextConfig`` and ``CompactionConfig`` in one).

    ``max_context_tokens=None`` means the model's context window; ``system_prompt_tokens=None``
    means the measured size of the system prompt and tool definitions. The ``keep_*_turns`` count
    turns (a user message and everything until the next one), not messages.
    """

    max_context_tokens: int | None = None
    system_prompt_tokens: int | None = None
    compact_at_pct: float = 0.90
    compact_budget_threshold_pct: float = 0.05
    keep_first_turns: int = 2
    keep_recent_turns: int = 10
    tool_output_max_lines: int = 50
    max_summary_tokens: int = 2_000
    focus_message: str | None = None
    token_counter: TokenCounter | None = field(default=None, compare=False)
    strategy: CompactionStrategy | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.max_context_tokens is not None and self.max_context_tokens < 1:
            raise ValueError(
                f"max_context_tokens must be >= 1, got {self.max_context_tokens}; use None for "
                "the model's context window."
            )
        if not 0 < self.compact_at_pct <= 1:
            raise ValueError(f"compact_at_pct must be in (0, 1], got {self.compact_at_pct}.")
        if not 0 <= self.compact_budget_threshold_pct < self.compact_at_pct:
            raise ValueError(
                "compact_budget_threshold_pct must be in [0, compact_at_pct), got "
                f"{self.compact_budget_threshold_pct}."
            )
        if self.keep_first_turns < 0 or self.keep_recent_turns < 0:
            raise ValueError(
                f"keep_first_turns and keep_recent_turns must be >= 0, got "
                f"{self.keep_first_turns} and {self.keep_recent_turns}."
            )
        if self.tool_output_max_lines < 2:
            raise ValueError(
                f"tool_output_max_lines must be >= 2, got {self.tool_output_max_lines}."
            )
        if self.max_summary_tokens < 0:
            raise ValueError(f"max_summary_tokens must be >= 0, got {self.max_summary_tokens}.")

    @property
    def counter(self) -> TokenCounter:
        return self.token_counter or HEURISTIC

    @property
    def window(self) -> int:
        return self.max_context_tokens or DEFAULT_CONTEXT_TOKENS

    @property
    def reserved(self) -> int:
        """Tokens of the system prompt and tool definitions (0 when not yet measured)."""
        return self.system_prompt_tokens or 0

    def for_model(
        self, model: ModelConfig | None, *, overhead: int | None = None
    ) -> CompactionConfig:
        """A copy with the window, the counter and (when unset) the overhead filled in."""
        changes: dict[str, Any] = {}
        if self.max_context_tokens is None and model is not None:
            changes["max_context_tokens"] = model.context_window
        if self.token_counter is None:
            changes["token_counter"] = token_counter_for(model)
        if self.system_prompt_tokens is None and overhead is not None:
            changes["system_prompt_tokens"] = overhead
        return dataclasses.replace(self, **changes) if changes else self

    def target(self) -> int:
        """How many message tokens compaction aims for: the trigger point minus the overhead."""
        share = self.compact_at_pct - self.compact_budget_threshold_pct
        return max(int(self.window * share) - self.reserved, 0)

    def should_compact(self, request_tokens: int) -> bool:
        """The trigger (module docstring) for a request of ``request_tokens`` tokens."""
        headroom = self.compact_at_pct - request_tokens / self.window
        return headroom < self.compact_budget_threshold_pct

    def harder(self, sent_tokens: int) -> CompactionConfig:
        """Settings for a second try after the provider said the context overflowed: half the
        tokens that were sent, half the recent turns and half the tool-output lines."""
        share = self.compact_at_pct - self.compact_budget_threshold_pct
        target = max(min(self.target(), sent_tokens // 2), 1)
        window = max(int((target + self.reserved) / share), 1)
        return dataclasses.replace(
            self,
            max_context_tokens=min(window, self.window),
            keep_recent_turns=max(self.keep_recent_turns // 2, 1),
            keep_first_turns=min(self.keep_first_turns, 1),
            tool_output_max_lines=max(self.tool_output_max_lines // 2, 2),
        )


def estimate_text_tokens(text: str) -> int:
    """⌈UTF-8 bytes / 4⌉ (the heuristic counter)."""
    return HEURISTIC.count_text(text)


def estimate_message_tokens(message: AgentMessage) -> int:
    return message_tokens(message, HEURISTIC)


def estimate_tokens(messages: list[AgentMessage]) -> int:
    return messages_tokens(messages, HEURISTIC)


def should_compact(messages: list[AgentMessage], config: CompactionConfig) -> bool:
    """The trigger with every message estimated (no reported usage)."""
    return config.should_compact(config.reserved + messages_tokens(messages, config.counter))


def _flat(turns: list[list[AgentMessage]]) -> list[AgentMessage]:
    return [m for turn in turns for m in turn]


def _marker(removed: int, focus: str | None, *, fit: bool) -> UserMessage:
    text = (
        f"[Context compacted: {removed} messages removed]"
        if fit
        else f"[Context compacted: {removed} messages removed to fit context window]"
    )
    if focus:
        text += f"\n[Focus: {focus}]"
    return UserMessage(content=[TextContent(text=text)], provenance="compaction")


def summarise_turns(
    turns: list[list[AgentMessage]], config: CompactionConfig
) -> list[AgentMessage]:
    """The middle turns as summaries, within ``max_summary_tokens`` (the rest counted in one note)."""
    terms = focus_terms(config.focus_message)
    out: list[AgentMessage] = []
    used = 0
    for index, turn in enumerate(turns):
        summary = summarise_turn(turn, terms)
        cost = messages_tokens(summary, config.counter)
        if used + cost > config.max_summary_tokens and out:
            rest = sum(len(t) for t in turns[index:])
            out.append(_marker(rest, config.focus_message, fit=True))
            break
        out.extend(summary)
        used += cost
    if out and config.focus_message:
        header = f"[Summary of earlier turns; focus: {config.focus_message}]"
        out.insert(0, UserMessage(content=[TextContent(text=header)], provenance="compaction"))
    return out


def compact_messages(
    messages: list[AgentMessage], config: CompactionConfig, *, target: int | None = None
) -> list[AgentMessage]:
    """Apply L1 → L2 → L3 until the messages fit ``target`` (default ``config.target()``)."""
    counter = config.counter
    budget = config.target() if target is None else target

    def fits(candidate: list[AgentMessage]) -> bool:
        return messages_tokens(candidate, counter) <= budget

    if fits(messages):
        return list(messages)
    terms = focus_terms(config.focus_message)
    current = truncate_tool_outputs(messages, config.tool_output_max_lines, terms)
    if fits(current):
        return current
    turns = split_turns(current)
    first_n = min(config.keep_first_turns, len(turns))
    recent_start = max(len(turns) - config.keep_recent_turns, first_n)
    first, middle, recent = turns[:first_n], turns[first_n:recent_start], turns[recent_start:]
    if middle:
        candidate = [*_flat(first), *summarise_turns(middle, config), *_flat(recent)]
        if fits(candidate):
            return candidate
        removed = sum(len(t) for t in middle)
        candidate = [
            *_flat(first),
            _marker(removed, config.focus_message, fit=False),
            *_flat(recent),
        ]
        if fits(candidate):
            return candidate
    return _newest_that_fit(turns, config, budget)


def _newest_that_fit(
    turns: list[list[AgentMessage]], config: CompactionConfig, budget: int
) -> list[AgentMessage]:
    """Last resort: the newest whole turns that fit behind a marker (or the newest messages of
    the last turn behind its user message, never a tool result without its call)."""
    counter = config.counter
    total = sum(len(t) for t in turns)
    used = message_tokens(_marker(total, config.focus_message, fit=True), counter)
    kept: list[list[AgentMessage]] = []
    for turn in reversed(turns):
        cost = messages_tokens(turn, counter)
        if used + cost > budget:
            break
        kept.insert(0, turn)
        used += cost
    if kept:
        tail = _flat(kept)
    else:
        last = turns[-1] if turns else []
        start = len(last)
        for message in reversed(last):
            cost = message_tokens(message, counter)
            if used + cost > budget and start < len(last):
                break
            start -= 1
            used += cost
        tail = last[_with_calls(last, start) :]
        # A user message first keeps the conversation valid for every vendor.
        anchor = next((m for m in last if isinstance(m, UserMessage)), None)
        if anchor is not None and anchor not in tail:
            tail.insert(0, anchor)
    removed = total - len(tail)
    if removed <= 0:
        return tail
    return [_marker(removed, config.focus_message, fit=True), *tail]


def _with_calls(messages: list[AgentMessage], start: int) -> int:
    """Where a window of ``messages`` starting at ``start`` must start so that no tool result in
    it lacks its call: back to the assistant message that made the calls of the results it
    starts on (results whose call is nowhere before are dropped instead)."""
    end = start
    while end < len(messages) and isinstance(messages[end], ToolResultMessage):
        end += 1
    if end == start:
        return start
    wanted = {m.tool_call_id for m in messages[start:end] if isinstance(m, ToolResultMessage)}
    for index in range(start - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage) and wanted & {c.id for c in message.tool_calls}:
            return index
    return end


class DefaultCompaction:
    """The tiers of this module as a :class:`CompactionStrategy`."""

    def compact(self, messages: list[AgentMessage], config: CompactionConfig) -> list[AgentMessage]:
        return compact_messages(messages, config)


@dataclass(frozen=True, slots=True)
class CompactionReport:
    messages_before: int
    messages_after: int
    estimated_tokens_before: int
    estimated_tokens_after: int
    reason: CompactionReason = "threshold"
    error: str | None = None
    """Why the compaction failed (``"cancelled"``, or the strategy's error); the messages were
    left as they were. None when it succeeded."""


class ContextCompactor:
    """Runs one compaction with its veto hook and observers (the loop's and ``BasicAgent``'s).

    ``before_start(estimated_tokens, message_count)`` may return False to veto;
    ``on_started`` / ``on_compacted(report)`` observe (the loop turns these into its
    ``before_compaction_start`` / ``after_compaction_end`` hooks and the ``CompactionStarted`` /
    ``CompactionEnded`` events). Every ``on_started`` gets exactly one ``on_compacted``: when the
    strategy raises, returns something that is not a list of messages, returns no message a
    model reads, or is cancelled, the report has the messages unchanged and ``error`` set, and
    the failure is then raised (``TypeError`` / ``ValueError`` for an unusable result), so the
    loop sends the conversation uncompacted with a warning.
    """

    def __init__(
        self,
        config: CompactionConfig,
        *,
        before_start: Callable[[int, int], Any] | None = None,
        on_started: Callable[[int, int, CompactionReason], None] | None = None,
        on_compacted: Callable[[CompactionReport], Any] | None = None,
    ) -> None:
        self.config = config
        self.before_start = before_start
        self.on_started = on_started
        self.on_compacted = on_compacted

    async def __call__(
        self,
        messages: list[AgentMessage],
        *,
        request_tokens: int | None = None,
        reason: CompactionReason = "threshold",
    ) -> list[AgentMessage] | None:
        """The compacted messages, or None when compaction did not run (no need, or vetoed).

        ``request_tokens`` is the measured request size (default: estimated from the messages);
        a reason other than ``"threshold"`` compacts without checking the trigger.
        """
        config = self.config
        if request_tokens is None:
            request_tokens = config.reserved + messages_tokens(messages, config.counter)
        if reason == "threshold" and not config.should_compact(request_tokens):
            return None
        if self.before_start is not None:
            allowed = self.before_start(request_tokens, len(messages))
            if inspect.isawaitable(allowed):
                allowed = await allowed
            if allowed is False:
                return None
        if self.on_started is not None:
            self.on_started(request_tokens, len(messages), reason)
        try:
            compacted = await self._compact(messages)
            report = CompactionReport(
                messages_before=len(messages),
                messages_after=len(compacted),
                estimated_tokens_before=request_tokens,
                estimated_tokens_after=config.reserved + messages_tokens(compacted, config.counter),
                reason=reason,
            )
        except BaseException as exc:
            # Started compactions always end (the loop's CompactionStarted gets its
            # CompactionEnded): a strategy that raised, returned no usable messages or was
            # cancelled ends with the messages unchanged, then the failure propagates.
            failed = CompactionReport(
                messages_before=len(messages),
                messages_after=len(messages),
                estimated_tokens_before=request_tokens,
                estimated_tokens_after=request_tokens,
                reason=reason,
                error=(
                    "cancelled"
                    if isinstance(exc, asyncio.CancelledError)
                    else f"{type(exc).__name__}: {exc}"
                ),
            )
            await self._report(failed)
            raise
        await self._report(report)
        return compacted

    async def _compact(self, messages: list[AgentMessage]) -> list[AgentMessage]:
        """The strategy's result, checked: a list of messages with one a model reads (an empty
        result would send the model nothing)."""
        config = self.config
        strategy = config.strategy or DefaultCompaction()
        result = strategy.compact(list(messages), config)
        if inspect.isawaitable(result):
            result = await result
        try:
            compacted = list(result)
        except TypeError:
            raise TypeError(
                f"the compaction strategy returned {type(result).__name__}, not a list of messages"
            ) from None
        wrong = next((m for m in compacted if not isinstance(m, _MESSAGE_TYPES)), None)
        if wrong is not None:
            raise TypeError(
                f"the compaction strategy returned a {type(wrong).__name__} among its messages"
            )
        readable = [m for m in compacted if not isinstance(m, ExtensionMessage)]
        if not readable and any(not isinstance(m, ExtensionMessage) for m in messages):
            raise ValueError("the compaction strategy returned no messages")
        return compacted

    async def _report(self, report: CompactionReport) -> None:
        if self.on_compacted is not None:
            done = self.on_compacted(report)
            if inspect.isawaitable(done):
                await done
