"""Input checked at the boundary of a run, before any event: a :class:`UserError` naming the problem.

Prompts must be a string, a message, or a sequence of messages; every message in the prompts and
in ``context.messages`` must be a message object (not a dict, not ``None``) whose content is a
list of content blocks; the system prompt must be a string; and no text may hold a lone
surrogate, which no provider accepts (it would fail on every retry and then break session
saving). Messages that arrive during a run (steering, follow-ups) are checked the same way; a bad
one is dropped with a warning instead, since the run is already under way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import UserError
from ..types import (
    AgentMessage,
    AssistantMessage,
    Content,
    ExtensionMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    lone_surrogate,
    scrub_surrogates,
)

__all__ = ["check_messages", "check_text", "coerce_prompts", "scrub_assistant"]

_MESSAGE_TYPES = (UserMessage, AssistantMessage, ToolResultMessage, ExtensionMessage)
_CONTENT_TYPES = (TextContent, ImageContent, ThinkingContent, ToolCall)
_FIX = "build messages with UserMessage.text(...) or validate dicts with MESSAGES_ADAPTER"


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    text = repr(value)
    return f"a {type(value).__name__} ({text[:60] + '…' if len(text) > 60 else text})"


def check_text(text: Any, where: str) -> None:
    """Raise :class:`UserError` unless ``text`` is a str of valid Unicode."""
    if not isinstance(text, str):
        raise UserError(f"{where} must be a string, got {_describe(text)}.")
    index = lone_surrogate(text)
    if index is not None:
        raise UserError(
            f"{where} contains invalid Unicode: a lone surrogate {text[index]!r} at index "
            f"{index}, which no provider accepts. Decode the text properly (e.g. "
            "bytes.decode('utf-8', errors='replace')) before passing it."
        )


def _check_content(block: Any, where: str) -> None:
    if not isinstance(block, _CONTENT_TYPES):
        raise UserError(
            f"{where} must be a content block (TextContent, …), got {_describe(block)}."
        )
    if isinstance(block, TextContent):
        check_text(block.text, f"{where}.text")
    elif isinstance(block, ThinkingContent):
        check_text(block.thinking, f"{where}.thinking")
    elif isinstance(block, ImageContent):
        check_text(block.data, f"{where}.data")
    elif isinstance(block, ToolCall):
        check_text(block.name, f"{where}.name")
        if not isinstance(block.arguments, dict):
            raise UserError(f"{where}.arguments must be a dict, got {_describe(block.arguments)}.")


def check_messages(messages: Sequence[Any], where: str) -> None:
    """Raise :class:`UserError` at the first item of ``messages`` that is not a sendable message."""
    if not isinstance(messages, list | tuple):
        raise UserError(f"{where} must be a list of messages, got {_describe(messages)}.")
    for i, message in enumerate(messages):
        at = f"{where}[{i}]"
        if not isinstance(message, _MESSAGE_TYPES):
            raise UserError(f"{at} is {_describe(message)}, not a message; {_FIX}.")
        if isinstance(message, ExtensionMessage):
            continue
        content = message.content
        if not isinstance(content, list):
            raise UserError(
                f"{at}.content must be a list of content blocks, got {_describe(content)}."
            )
        for j, block in enumerate(content):
            _check_content(block, f"{at}.content[{j}]")


def coerce_prompts(prompts: Any) -> list[AgentMessage]:
    """``prompts`` as a list of messages, checked; :class:`UserError` for anything else."""
    if isinstance(prompts, str):
        check_text(prompts, "The prompt")
        if not prompts.strip():
            raise UserError("The prompt is empty; pass the text the agent should answer.")
        return [UserMessage.text(prompts)]
    if isinstance(prompts, _MESSAGE_TYPES):
        batch: list[Any] = [prompts]
    elif isinstance(prompts, Sequence) and not isinstance(prompts, bytes | bytearray):
        batch = list(prompts)
    else:
        raise UserError(
            f"The prompt must be a string, a message or a list of messages, got "
            f"{_describe(prompts)}."
        )
    if not batch:
        raise UserError(
            "agent_loop needs at least one prompt; to resume without new input use "
            "agent_loop_continue."
        )
    check_messages(batch, "prompts")
    return batch


def scrub_assistant(message: AssistantMessage) -> AssistantMessage:
    """A model reply with lone surrogates replaced, so the next request can be sent at all."""
    changed = False
    content: list[Content] = []
    for block in message.content:
        if isinstance(block, TextContent) and lone_surrogate(block.text) is not None:
            block = block.model_copy(update={"text": scrub_surrogates(block.text)})
            changed = True
        elif isinstance(block, ThinkingContent) and lone_surrogate(block.thinking) is not None:
            block = block.model_copy(update={"thinking": scrub_surrogates(block.thinking)})
            changed = True
        content.append(block)
    return message.model_copy(update={"content": content}) if changed else message
