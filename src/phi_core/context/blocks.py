"""Block compaction: a :class:`~phi_core.types.CompactionBlock` overlay over a conversation.

Unlike the automatic tiers (recomputed on every turn), a block is made once (by
``BasicAgent.compact_context()`` or ``compact_session_loops``) and kept: on the agent, and in the
session record of the loop that made it. Nothing is deleted: the block says which turns a summary
replaces, and :func:`apply_compaction_block` builds the view the model sees from the original
messages. A block has three sections (phi-core's anatomy), all counted in turns:

* ``keep_first``: the first ``keep_first_turns`` turns, verbatim;
* ``keep_compacted``: the turns in between, summarised (``[Summary] …`` notes, user messages
  kept, focus-relevant lines of tool outputs kept, within ``max_summary_tokens``);
* ``keep_recent``: the last ``keep_recent_turns`` turns with long tool outputs truncated.

A :class:`BlockCompactionStrategy` decides each section (sync or async methods, so a summariser
may call a model); :class:`DefaultBlockCompaction` is the rule above.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, runtime_checkable

from .._logging import get_logger
from ..types import AgentMessage, CompactedSection, CompactionBlock, TurnRange
from ._summary import focus_terms, split_turns, truncate_tool_outputs
from .compaction import CompactionConfig, summarise_turns

__all__ = [
    "BlockCompactionStrategy",
    "DefaultBlockCompaction",
    "apply_compaction_block",
    "compact_block",
    "compacted_turn_range",
]

logger = get_logger("phi_core.context")

Turns = list[list[AgentMessage]]


class DefaultBlockCompaction:
    """Keep the first turns, summarise the middle, truncate tool outputs of the recent turns.

    Subclass and override one method to change one section (for example an LLM summary in
    :meth:`keep_compacted`); each method may be ``async``.
    """

    def keep_first(self, turns: Turns, config: CompactionConfig) -> TurnRange | None:
        count = min(config.keep_first_turns, len(turns))
        return TurnRange(start_turn=0, end_turn=count - 1) if count else None

    def keep_recent(
        self, turns: Turns, config: CompactionConfig, first: TurnRange | None
    ) -> CompactedSection | None:
        start = max(len(turns) - config.keep_recent_turns, first.end_turn + 1 if first else 0)
        if start >= len(turns):
            return None
        terms = focus_terms(config.focus_message)
        messages = [m for turn in turns[start:] for m in turn]
        return CompactedSection(
            range=TurnRange(start_turn=start, end_turn=len(turns) - 1),
            messages=truncate_tool_outputs(messages, config.tool_output_max_lines, terms),
        )

    def keep_compacted(
        self,
        turns: Turns,
        config: CompactionConfig,
        first: TurnRange | None,
        recent: CompactedSection | None,
    ) -> CompactedSection | None:
        start = first.end_turn + 1 if first else 0
        end = recent.range.start_turn - 1 if recent else len(turns) - 1
        if end < start:
            return None
        return CompactedSection(
            range=TurnRange(start_turn=start, end_turn=end),
            messages=summarise_turns(turns[start : end + 1], config),
        )


@runtime_checkable
class BlockCompactionStrategy(Protocol):
    """Decides the three sections of a block; each method may be sync or async."""

    def keep_first(
        self, turns: Turns, config: CompactionConfig
    ) -> TurnRange | Awaitable[TurnRange | None] | None: ...

    def keep_recent(
        self, turns: Turns, config: CompactionConfig, first: TurnRange | None
    ) -> CompactedSection | Awaitable[CompactedSection | None] | None: ...

    def keep_compacted(
        self,
        turns: Turns,
        config: CompactionConfig,
        first: TurnRange | None,
        recent: CompactedSection | None,
    ) -> CompactedSection | Awaitable[CompactedSection | None] | None: ...


async def _call(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def compact_block(
    messages: Sequence[AgentMessage],
    config: CompactionConfig | None = None,
    strategy: BlockCompactionStrategy | None = None,
) -> CompactionBlock | None:
    """A block over ``messages``, or None when there is no middle to summarise."""
    config = config or CompactionConfig()
    strategy = strategy if strategy is not None else DefaultBlockCompaction()
    turns = split_turns(messages)
    first = await _call(strategy.keep_first(turns, config))
    recent = await _call(strategy.keep_recent(turns, config, first))
    compacted = await _call(strategy.keep_compacted(turns, config, first, recent))
    if compacted is None:
        return None
    return CompactionBlock(
        keep_first=first,
        keep_compacted=compacted,
        keep_recent=recent,
        covers_messages=len(messages),
        focus_message=config.focus_message,
    )


def compacted_turn_range(messages: Sequence[AgentMessage], block: CompactionBlock) -> range:
    """The indices (into ``messages``) of the messages the block's summary replaces."""
    if block.keep_compacted is None:
        return range(0)
    turns = split_turns(messages[: block.covers_messages])
    section = block.keep_compacted.range
    start = sum(len(t) for t in turns[: section.start_turn])
    end = sum(len(t) for t in turns[: section.end_turn + 1])
    return range(start, end)


def apply_compaction_block(
    messages: Sequence[AgentMessage], block: CompactionBlock | None
) -> list[AgentMessage]:
    """The view of ``messages`` under ``block`` (the messages themselves when there is none).

    A block that does not match the conversation (it covers more messages than there are, or
    more turns than the covered messages have) is ignored with a warning rather than dropping
    anything.
    """
    if block is None:
        return list(messages)
    if block.covers_messages > len(messages):
        logger.warning(
            "compaction block covers %d messages but the conversation has %d; ignoring it",
            block.covers_messages,
            len(messages),
        )
        return list(messages)
    turns = split_turns(messages[: block.covers_messages])
    sections = [s for s in (block.keep_compacted, block.keep_recent) if s is not None]
    if any(s.range.end_turn >= len(turns) for s in sections) or (
        block.keep_first is not None and block.keep_first.end_turn >= len(turns)
    ):
        logger.warning("compaction block names turns the conversation does not have; ignoring it")
        return list(messages)
    out: list[AgentMessage] = []
    if block.keep_first is not None:
        for turn in turns[block.keep_first.start_turn : block.keep_first.end_turn + 1]:
            out.extend(turn)
    for section in sections:
        out.extend(m.model_copy() for m in section.messages)
    out.extend(messages[block.covers_messages :])
    return out
