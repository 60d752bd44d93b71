"""What a judge reads: query and prior-context extraction, the transcript, phi-core's three text
tiers, the two-iteration compaction to the judge's budget, and parsing of the judge's reply.

These are pure functions over messages and strings, so they are tested without any model.
Token estimates are phi-core's local heuristic: ``ceil(utf8_bytes / 4)`` per string.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._types import turn_text

__all__ = [
    "JudgeCompaction",
    "compact_for_judge",
    "compact_responses",
    "content_budget",
    "estimate_tokens",
    "extract_query",
    "parse_judge_choice",
    "tier1",
    "tier2",
    "tier3",
    "transcript",
]

TIER1_LINES = 80
MIN_CHARS = 200


def block_text(message: Any) -> str:
    """A message's text blocks joined by ``"\\n"`` (images, thinking and tool calls dropped)."""
    content = getattr(message, "content", None)
    if not isinstance(content, list):
        return ""
    return "\n".join(b.text for b in content if getattr(b, "type", None) == "text")


def estimate_tokens(text: str) -> int:
    """``ceil(len(utf8 bytes) / 4)``: phi-core's judge-budget estimate."""
    return -(-len(text.encode("utf-8")) // 4)


def _total(texts: Sequence[str]) -> int:
    return sum(estimate_tokens(t) for t in texts)


def content_budget(max_context_tokens: int) -> int:
    """80 % of the judge's window for prior context plus responses (20 % for framing)."""
    return max_context_tokens * 4 // 5


def extract_query(prompts: Sequence[Any], base: Sequence[Any]) -> tuple[str, list[Any]]:
    """The judge's ``(query, prior messages)``.

    With prompts (``agent_loop`` mode) the query is the text of every user prompt joined by
    ``"\\n"`` and the whole base is prior context. In continue mode (no prompts) the query is the
    last user message of the base and the prior context is everything before it; with no user
    message at all the query is empty and the whole base is prior context.

    Prompts without a user message (tool results a client sends back) continue the base: the
    query is then the last user message followed by the :func:`transcript` of the turns after
    it (the tool calls and their results), so the judge reads what the answer builds on.
    """
    if any(getattr(p, "role", None) == "user" for p in prompts):
        query = "\n".join(block_text(p) for p in prompts if getattr(p, "role", None) == "user")
        return query, list(base)
    messages = [*base, *prompts]
    for position in range(len(messages) - 1, -1, -1):
        if getattr(messages[position], "role", None) == "user":
            after = transcript(messages[position + 1 :], tool_calls=True)
            query = block_text(messages[position])
            return (f"{query}\n{after}" if after else query), messages[:position]
    return "", messages


_SPEAKERS = {"user": "User", "assistant": "Assistant"}


def transcript(messages: Sequence[Any], *, tool_calls: bool = False) -> str:
    """``User: …`` / ``Assistant: …`` / ``Tool [name]: …`` lines; messages without text skipped
    (with ``tool_calls``, an assistant's calls are lines of their own: :func:`turn_text`)."""
    lines: list[str] = []
    for message in messages:
        role = getattr(message, "role", None)
        text = turn_text(message) if tool_calls and role == "assistant" else block_text(message)
        if not text:
            continue
        if role in _SPEAKERS:
            lines.append(f"{_SPEAKERS[role]}: {text}")
        elif role == "tool_result":
            lines.append(f"Tool [{message.tool_name}]: {text}")
    return "\n".join(lines)


def tier1(text: str, max_lines: int = TIER1_LINES) -> str:
    """Keep the last ``max_lines`` lines."""
    lines = text.split("\n")
    if len(lines) <= max_lines:
        return text
    return "\n".join(lines[-max_lines:])


def tier2(text: str) -> str:
    """Keep the first and the last paragraph, joined by ``"\\n\\n...\\n\\n"``."""
    parts = [p.strip() for p in text.split("\n\n")]
    parts = [p for p in parts if p]
    if not parts:
        return text
    if len(parts) == 1:
        return parts[0]
    return f"{parts[0]}\n\n...\n\n{parts[-1]}"


def tier3(text: str, max_chars: int) -> str:
    """Hard cut to ``max_chars`` characters (``"..."`` included); cuts on character boundaries."""
    if len(text) <= max_chars:
        return text
    return text[: max(max_chars - 3, 0)] + "..."


@dataclass
class JudgeCompaction:
    """The result of fitting prior context and responses to a judge budget."""

    context: str
    outputs: list[str]
    satisfied: bool
    steps: list[str] = field(default_factory=list)
    """Which tiers ran, e.g. ``["context:tier1", "outputs:tier3"]`` (empty: untouched)."""


def compact_responses(
    outputs: Sequence[str], budget: int, steps: list[str] | None = None
) -> tuple[list[str], bool]:
    """Apply each tier to every output until their estimate fits ``budget`` (iteration 2)."""
    steps = steps if steps is not None else []
    current = list(outputs)
    if _total(current) <= budget:
        return current, True
    current = [tier1(o) for o in current]
    steps.append("outputs:tier1")
    if _total(current) <= budget:
        return current, True
    current = [tier2(o) for o in current]
    steps.append("outputs:tier2")
    if _total(current) <= budget:
        return current, True
    n = max(1, len(current))
    max_chars = max(MIN_CHARS, budget * 4 // n)
    current = [tier3(o, max_chars) for o in current]
    steps.append("outputs:tier3")
    return current, _total(current) <= budget


def compact_for_judge(
    prior: str, outputs: Sequence[str], budget: int, *, strict: bool = True
) -> JudgeCompaction:
    """phi-core's two-iteration, three-tier compaction of ``prior`` and ``outputs`` to ``budget``.

    Iteration 1 shrinks only the prior context (tier 1, 2, then 3 with
    ``max(200, (budget - output_tokens) * 4)`` characters). Iteration 2 freezes the context at
    its tier-3 form and compacts the outputs to ``max(budget - context_tokens, 200 * n)`` tokens.

    phi-core then reports success against that output budget alone, which has a ``200 * n``
    floor and ignores the context, so an over-budget prompt can pass unwarned. With
    ``strict=True`` (the default) ``satisfied`` is the honest check
    ``context + outputs <= budget``; ``strict=False`` reproduces phi-core.
    """
    outs = list(outputs)
    out_tokens = _total(outs)
    if estimate_tokens(prior) + out_tokens <= budget:
        return JudgeCompaction(prior, outs, True)
    steps: list[str] = []
    c1 = tier1(prior)
    steps.append("context:tier1")
    if estimate_tokens(c1) + out_tokens <= budget:
        return JudgeCompaction(c1, outs, True, steps)
    c2 = tier2(c1)
    steps.append("context:tier2")
    if estimate_tokens(c2) + out_tokens <= budget:
        return JudgeCompaction(c2, outs, True, steps)
    ctx_chars = max(MIN_CHARS, max(budget - out_tokens, 0) * 4)
    c3 = tier3(c2, ctx_chars)
    steps.append("context:tier3")
    if estimate_tokens(c3) + out_tokens <= budget:
        return JudgeCompaction(c3, outs, True, steps)
    n = max(1, len(outs))
    out_budget = max(max(budget - estimate_tokens(c3), 0), MIN_CHARS * n)
    compacted, fits_out_budget = compact_responses(outs, out_budget, steps)
    satisfied = estimate_tokens(c3) + _total(compacted) <= budget if strict else fits_out_budget
    return JudgeCompaction(c3, compacted, satisfied, steps)


_NON_DIGITS = re.compile(r"[^0-9]")


def parse_judge_choice(reply: str, count: int) -> int | None:
    """The 0-based choice in a judge reply naming a response ``1..count``, or ``None``.

    phi-core's rule: split on whitespace, keep each token's ASCII digits (``"2."`` is 2,
    ``"#3"`` is 3, ``"v2.0"`` is 20), and take the first value in range; out-of-range values are
    skipped. ``None`` (no usable number) lets the caller fall back *and say so*, where phi-core
    silently picked response 1.
    """
    for token in reply.split():
        digits = _NON_DIGITS.sub("", token)
        if not digits:
            continue
        value = int(digits)
        if 1 <= value <= count:
            return value - 1
    return None
