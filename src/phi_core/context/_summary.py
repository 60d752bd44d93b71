"""The pieces every compaction shares: turns, focus terms, tool-output truncation, summaries.

A **turn** is a user message and everything after it until the next user message (consecutive
user messages, such as a batch of prompts, open one turn together). Messages before the first
user message form a turn of their own. Grouping by turns keeps an assistant's tool calls and
their results together, so compaction never orphans a tool result.

The **focus** (``focus_message``) reaches every tier: its significant words decide which lines
of a long tool output survive truncation, which sentences of an assistant reply and which lines
of a dropped tool result make it into a summary, and the compaction notes tell the model what
the focus was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..types import (
    AgentMessage,
    AssistantMessage,
    ExtensionMessage,
    TextContent,
    ToolResultMessage,
    UserMessage,
)

__all__ = [
    "focus_terms",
    "is_relevant",
    "split_turns",
    "summarise_turn",
    "truncate_lines",
    "truncate_tool_outputs",
]

_STOPWORDS = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "also",
        "because",
        "been",
        "before",
        "being",
        "between",
        "both",
        "could",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "from",
        "further",
        "have",
        "having",
        "here",
        "into",
        "just",
        "more",
        "most",
        "only",
        "other",
        "over",
        "same",
        "should",
        "some",
        "such",
        "than",
        "that",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "under",
        "until",
        "very",
        "what",
        "when",
        "where",
        "which",
        "while",
        "will",
        "with",
        "would",
        "your",
        "focus",
        "keep",
        "retain",
        "details",
        "preserve",
    ]
)
_WORD = re.compile(r"[\w./:-]{4,}", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def focus_terms(focus: str | None) -> frozenset[str]:
    """The significant words of a focus message (lower-cased, at least four characters)."""
    if not focus:
        return frozenset()
    return (
        frozenset(w for w in (m.group(0).lower().strip(".:-") for m in _WORD.finditer(focus)) if w)
        - _STOPWORDS
    )


def is_relevant(text: str, terms: frozenset[str]) -> bool:
    if not terms:
        return False
    lowered = text.lower()
    return any(term in lowered for term in terms)


def split_turns(messages: Sequence[AgentMessage]) -> list[list[AgentMessage]]:
    """Group ``messages`` into turns (see the module docstring)."""
    turns: list[list[AgentMessage]] = []
    previous_user = False
    for message in messages:
        is_user = isinstance(message, UserMessage)
        if not turns or (is_user and not previous_user):
            turns.append([])
        turns[-1].append(message)
        if not isinstance(message, ExtensionMessage):
            previous_user = is_user
    return turns


def truncate_lines(text: str, max_lines: int, terms: frozenset[str] = frozenset()) -> str:
    """Head and tail of ``text`` (``max_lines`` lines), plus middle lines matching the focus."""
    lines = text.split("\n")
    if len(lines) <= max_lines:
        return text
    head = max_lines // 2
    tail = max_lines - head
    middle = range(head, len(lines) - tail)
    kept = [i for i in middle if is_relevant(lines[i], terms)][: max(max_lines // 2, 1)]
    out: list[str] = list(lines[:head])
    cursor = head
    for index in kept:
        if index > cursor:
            out.append(f"[... {index - cursor} lines truncated ...]")
        out.append(lines[index])
        cursor = index + 1
    end = len(lines) - tail
    if end > cursor:
        out.append(f"[... {end - cursor} lines truncated ...]")
    out.extend(lines[end:])
    return "\n".join(out)


def truncate_tool_outputs(
    messages: Sequence[AgentMessage], max_lines: int, terms: frozenset[str] = frozenset()
) -> list[AgentMessage]:
    """Every tool-result text cut to ``max_lines`` lines (focus lines kept); the rest unchanged."""
    out: list[AgentMessage] = []
    for m in messages:
        if isinstance(m, ToolResultMessage):
            content = [
                TextContent(text=truncate_lines(b.text, max_lines, terms))
                if isinstance(b, TextContent)
                else b
                for b in m.content
            ]
            if content != m.content:
                m = m.model_copy(update={"content": content})
        out.append(m)
    return out


def _excerpt(text: str, terms: frozenset[str], limit: int) -> str:
    """The sentences of ``text`` that match the focus (else its opening), within ``limit``."""
    text = text.strip()
    if len(text) <= limit:
        return text
    sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
    chosen = [s for s in sentences if is_relevant(s, terms)] or sentences[:1]
    joined = " … ".join(chosen)
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


def summarise_turn(turn: Sequence[AgentMessage], terms: frozenset[str]) -> list[AgentMessage]:
    """A turn with its user messages kept (user intent is never summarised away), each assistant
    message replaced by a ``[Summary] …`` user note and its tool results dropped, except the
    lines that match the focus."""
    out: list[AgentMessage] = []
    for message in turn:
        if isinstance(message, UserMessage):
            out.append(message)
        elif isinstance(message, AssistantMessage):
            body = _excerpt(message.text, terms, 300 if terms else 200)
            calls = message.tool_calls
            if calls:
                names = ", ".join(sorted({c.name for c in calls}))
                note = f"[Assistant used {len(calls)} tool(s): {names}]"
                body = f"{body} {note}" if body else note
            if not body:
                body = "[Assistant response]"
            out.append(
                UserMessage(
                    content=[TextContent(text=f"[Summary] {body}")],
                    timestamp=message.timestamp,
                    provenance="compaction",
                )
            )
        elif isinstance(message, ToolResultMessage) and terms:
            text = "\n".join(b.text for b in message.content if isinstance(b, TextContent))
            lines = [line.strip() for line in text.split("\n") if is_relevant(line, terms)]
            if not lines:
                continue
            note = f"{message.tool_name}: {_excerpt(' / '.join(lines), terms, 300)}"
            last = out[-1] if out else None
            if isinstance(last, UserMessage) and last.provenance == "compaction":
                # Kept with the summary of the call that produced it.
                merged = f"{last.content[0].text}\n{note}"  # type: ignore[union-attr]
                out[-1] = last.model_copy(update={"content": [TextContent(text=merged)]})
            else:
                out.append(
                    UserMessage(
                        content=[TextContent(text=f"[Summary] {note}")],
                        timestamp=message.timestamp,
                        provenance="compaction",
                    )
                )
    return out
