"""Block compaction over session records: ``compact_session_loops`` and
``build_context_from_session``.

The conversation that led to a loop is its **chain**: the loop, its parent (``parent_loop_id``),
and so on; a loop without a parent in the session (every ``BasicAgent.prompt`` starts one)
continues the latest earlier loop of the same agent that is on the main line, i.e. not a judge
loop, not a race branch that lost, and not a sub-agent's. The chain's messages, in order, are
the conversation.

A :class:`~phi_core.types.CompactionBlock` on a loop record overlays the conversation up to that
loop; :func:`build_context_from_session` applies the newest block on the chain and appends what
came after it verbatim. ``LoopRecord.messages`` are never changed, so removing the block restores
the original conversation.
"""

from __future__ import annotations

from ..context.blocks import (
    BlockCompactionStrategy,
    apply_compaction_block,
    compact_block,
    compacted_turn_range,
)
from ..context.compaction import CompactionConfig
from ..types import AgentMessage
from ._model import LoopRecord, Session

__all__ = ["build_context_from_session", "compact_session_loops", "conversation_chain"]


def _on_main_line(record: LoopRecord) -> bool:
    group = record.parallel_group
    if group is not None and (group.role == "evaluation" or not group.is_selected):
        return False
    return record.status != "pending"


def conversation_chain(session: Session, loop_id: str | None = None) -> list[LoopRecord]:
    """The loops whose messages form the conversation ending with ``loop_id`` (default: the
    newest loop on the main line), oldest first; empty when the loop is not in the session."""
    if not session.loops:
        return []
    if loop_id is None:
        candidates = [r for r in session.loops if _on_main_line(r)]
        if not candidates:
            return []
        loop_id = candidates[-1].loop_id
    position = {r.loop_id: i for i, r in enumerate(session.loops)}
    current = session.get_loop(loop_id)
    chain: list[LoopRecord] = []
    seen: set[str] = set()
    while current is not None and current.loop_id not in seen:
        seen.add(current.loop_id)
        chain.append(current)
        parent = current.parent_loop_id
        if parent is not None and parent in position:
            current = session.get_loop(parent)
            continue
        if parent is not None:  # the parent lives in another session (a sub-agent's loop)
            break
        index = position[current.loop_id]
        current = next(
            (
                r
                for r in reversed(session.loops[:index])
                if _on_main_line(r) and (not current.agent_id or r.agent_id == current.agent_id)
            ),
            None,
        )
    chain.reverse()
    return chain


def _messages(chain: list[LoopRecord]) -> list[AgentMessage]:
    return [m for record in chain for m in record.messages]


def build_context_from_session(session: Session, loop_id: str | None = None) -> list[AgentMessage]:
    """The context a model sees for the conversation ending with ``loop_id``: the chain's
    messages under the newest compaction block on the chain."""
    chain = conversation_chain(session, loop_id)
    messages = _messages(chain)
    for record in reversed(chain):
        if record.compaction_block is not None:
            return apply_compaction_block(messages, record.compaction_block)
    return messages


async def compact_session_loops(
    session: Session,
    loop_id: str | None = None,
    config: CompactionConfig | None = None,
    *,
    strategy: BlockCompactionStrategy | None = None,
) -> int:
    """Put a new block over the conversation ending with ``loop_id`` on that loop's record
    (the session is changed in place; save it to keep it). Returns how many loops had messages
    summarised (0: nothing to compact, no block added)."""
    chain = conversation_chain(session, loop_id)
    if not chain:
        return 0
    messages = _messages(chain)
    block = await compact_block(messages, config, strategy)
    if block is None:
        return 0
    owners = [record.loop_id for record in chain for _ in record.messages]
    summarised = {owners[i] for i in compacted_turn_range(messages, block)}
    chain[-1].compaction_block = block
    return len(summarised)
