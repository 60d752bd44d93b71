"""Model-directed context pruning: the ``prun`` and ``prun_with_memo`` tools.

The model calls ``prun(tokens)`` to take its own oldest work (assistant messages and their tool
results) out of what it is sent, until about ``tokens`` tokens are reclaimed; ``prun_with_memo``
does the same and leaves a short memo in their place. What the book promises, and how:

* **User messages are never pruned** (prompts, steering, follow-ups, memos).
* **Whole turns go together**: the unit is one model call's assistant message with all of its
  tool results (identified by their :class:`~phi_core.types.TurnId`), so a tool call never loses
  its result. The turn that called the tool is never pruned.
* **The log is never rewritten**: the loop appends a ``prun`` :class:`ExtensionMessage` (never
  sent to a model) recording what was pruned and emits ``PrunApplied``; :func:`apply_prunes`
  builds the view. Because the record lives in the log, a saved and restored conversation, a
  continued session and every race branch see the same pruning.
* **One memo per prune**, placed where the first pruned message was (phi-core repeated it per
  pruned message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from ..tools.base import ToolContext, ToolResult
from ..types import (
    AgentMessage,
    AssistantMessage,
    ExtensionMessage,
    TextContent,
    ToolResultMessage,
    TurnId,
    UserMessage,
)
from .tokens import HEURISTIC, message_tokens

__all__ = [
    "PRUN_KIND",
    "PrunRecord",
    "PrunTool",
    "apply_prunes",
    "prun_tools",
    "pruned_turns",
    "select_prunable",
]

PRUN_KIND = "prun"


class PrunRecord(BaseModel):
    """What one prune took out (also the payload of the ``PrunApplied`` event)."""

    turns: list[TurnId] = Field(default_factory=list)
    memo: str | None = None
    tokens_removed: int = 0
    messages_removed: int = 0
    pruned_timestamps: list[int] = Field(default_factory=list)


def _key(turn: TurnId | None) -> tuple[str, int] | None:
    return (turn.loop_id, turn.turn_index) if turn is not None else None


def _records(messages: Sequence[AgentMessage]) -> list[PrunRecord]:
    return [
        PrunRecord.model_validate(m.data)
        for m in messages
        if isinstance(m, ExtensionMessage) and m.kind == PRUN_KIND and isinstance(m.data, dict)
    ]


def pruned_turns(messages: Sequence[AgentMessage]) -> set[tuple[str, int]]:
    """Every (loop id, turn index) some prune record in ``messages`` took out."""
    return {(t.loop_id, t.turn_index) for r in _records(messages) for t in r.turns}


def _prunable(message: AgentMessage) -> bool:
    return isinstance(message, AssistantMessage | ToolResultMessage) and message.turn_id is not None


def select_prunable(
    messages: Sequence[AgentMessage], tokens: int, *, memo: str | None = None
) -> PrunRecord:
    """The oldest whole turns of model work worth about ``tokens`` tokens (the newest turn, the
    one asking, excluded; already pruned turns skipped)."""
    done = pruned_turns(messages)
    order: list[tuple[str, int]] = []
    groups: dict[tuple[str, int], list[AgentMessage]] = {}
    for message in messages:
        key = _key(message.turn_id) if _prunable(message) else None
        if key is None or key in done:
            continue
        if key not in groups:
            order.append(key)
            groups[key] = []
        groups[key].append(message)
    if order:
        order.pop()  # the turn running the tool
    record = PrunRecord(memo=memo)
    for key in order:
        if record.tokens_removed >= tokens:
            break
        group = groups[key]
        record.turns.append(TurnId(loop_id=key[0], turn_index=key[1]))
        record.tokens_removed += sum(message_tokens(m, HEURISTIC) for m in group)
        record.messages_removed += len(group)
        record.pruned_timestamps.extend(m.timestamp for m in group)
    return record


def apply_prunes(messages: Sequence[AgentMessage]) -> list[AgentMessage]:
    """The messages without the pruned turns, each memo where its first pruned message was."""
    records = _records(messages)
    if not records:
        return list(messages)
    owner: dict[tuple[str, int], int] = {}
    for index, record in enumerate(records):
        for turn in record.turns:
            owner.setdefault((turn.loop_id, turn.turn_index), index)
    placed: set[int] = set()
    out: list[AgentMessage] = []
    for message in messages:
        key = _key(message.turn_id) if _prunable(message) else None
        found = owner.get(key) if key is not None else None
        if found is None:
            out.append(message)
            continue
        memo = records[found].memo
        if memo and found not in placed:
            placed.add(found)
            out.append(
                UserMessage(
                    content=[TextContent(text=f"[Pruned context summary: {memo}]")],
                    timestamp=message.timestamp,
                    provenance="memo",
                )
            )
    return out


class PrunTool:
    """``prun(tokens)`` or, with ``memo=True``, ``prun_with_memo(tokens, memo)``."""

    def __init__(self, *, memo: bool = False) -> None:
        self.with_memo = memo
        self.name = "prun_with_memo" if memo else "prun"
        properties: dict[str, Any] = {
            "tokens": {
                "type": "integer",
                "minimum": 1,
                "description": "About how many tokens of your oldest work to take out of context.",
            }
        }
        required = ["tokens"]
        if memo:
            properties["memo"] = {
                "type": "string",
                "description": "A few sentences to keep in place of what is pruned.",
            }
            required.append("memo")
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        self.description = (
            "Remove your oldest tool calls, tool results and replies from your working context "
            "to free space (user messages always stay; nothing is lost from the session log)."
            + (" Leave `memo` in their place." if memo else "")
        )

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        tokens = args.get("tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            return ToolResult.error(
                f"`tokens` must be a positive integer, got {tokens!r}; pass about how many "
                "tokens to reclaim, e.g. 2000."
            )
        memo = args.get("memo")
        if self.with_memo and (not isinstance(memo, str) or not memo.strip()):
            return ToolResult.error(
                "`memo` (a non-empty string) is required: say in a few sentences what to keep "
                "from the pruned work, or call `prun` to prune without a memo."
            )
        record = select_prunable(ctx.messages, tokens, memo=memo.strip() if memo else None)
        if not record.turns:
            return ToolResult.text(
                "Nothing to prune: only the current turn and user messages are in context."
            )
        return ToolResult.text(
            f"Pruned {record.messages_removed} message(s) from {len(record.turns)} turn(s), about "
            f"{record.tokens_removed} tokens; they stay in the session log.",
            details=record,
        )


def prun_tools() -> list[PrunTool]:
    """Both pruning tools (``[tools] enabled = ["prun"]`` adds the two)."""
    return [PrunTool(), PrunTool(memo=True)]
