"""Prompt and completion content in the GenAI conventions' message shapes (opt-in only).

Messages become ``{"role", "parts": [...]}`` objects (``text``, ``reasoning``, ``tool_call``,
``tool_call_response`` and ``blob`` parts; tool results travel in ``tool`` messages), serialised to
JSON strings because span attributes cannot hold structured values yet. Every string passes
through :func:`~phi_core.errors.redact` and is cut to ``limit`` characters; image bytes are never
copied (only their MIME type).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import redact

__all__ = [
    "finish_reason",
    "input_messages",
    "output_messages",
    "scrub",
    "system_instructions",
    "to_json",
]

_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_use": "tool_call",
    "error": "error",
    "aborted": "cancelled",
}


def finish_reason(stop_reason: str) -> str:
    """The conventions' finish reason for a phi-core stop reason (``tool_use`` → ``tool_call``)."""
    return _FINISH_REASONS.get(stop_reason, stop_reason)


def scrub(text: str, limit: int | None) -> str:
    """``text`` without anything that looks like a secret, cut to ``limit`` characters."""
    text = redact(text)
    if limit is not None and len(text) > limit:
        return text[:limit] + f"…[{len(text) - limit} more characters]"
    return text


def to_json(value: Any, limit: int | None) -> str:
    """``value`` as compact JSON with every string scrubbed (see :func:`scrub`)."""
    return json.dumps(_scrub_tree(value, limit), ensure_ascii=False, separators=(",", ":"))


def _scrub_tree(value: Any, limit: int | None) -> Any:
    if isinstance(value, str):
        return scrub(value, limit)
    if isinstance(value, dict):
        return {str(k): _scrub_tree(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub_tree(v, limit) for v in value]
    return value


def _part(content: dict[str, Any]) -> dict[str, Any]:
    kind = content.get("type")
    if kind == "text":
        return {"type": "text", "content": content.get("text", "")}
    if kind == "thinking":
        return {"type": "reasoning", "content": content.get("thinking", "")}
    if kind == "tool_call":
        return {
            "type": "tool_call",
            "id": content.get("id"),
            "name": content.get("name"),
            "arguments": content.get("arguments", {}),
        }
    if kind == "image":
        return {"type": "blob", "modality": "image", "mime_type": content.get("mime_type")}
    return {"type": str(kind)}


def _text_of(contents: list[dict[str, Any]]) -> str:
    return "".join(str(c.get("text", "")) for c in contents if c.get("type") == "text")


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """One phi-core message (as dumped to JSON) in the conventions' shape."""
    role = message.get("role")
    contents = message.get("content") or []
    if role == "tool_result":
        return {
            "role": "tool",
            "parts": [
                {
                    "type": "tool_call_response",
                    "id": message.get("tool_call_id"),
                    "result": _text_of(contents),
                }
            ],
        }
    return {"role": role, "parts": [_part(c) for c in contents]}


def input_messages(payload: dict[str, Any], limit: int | None) -> str:
    """``gen_ai.input.messages`` for a ``TurnRequest`` payload."""
    return to_json([_message(m) for m in payload.get("messages") or []], limit)


def system_instructions(payload: dict[str, Any], limit: int | None) -> str | None:
    """``gen_ai.system_instructions`` (``None`` when the request had no system prompt)."""
    system = payload.get("system_prompt")
    if not system:
        return None
    return to_json([{"type": "text", "content": system}], limit)


def output_messages(message: dict[str, Any], limit: int | None) -> str:
    """``gen_ai.output.messages`` for one assistant reply (as dumped to JSON)."""
    shaped = _message(message)
    shaped["finish_reason"] = finish_reason(str(message.get("stop_reason", "stop")))
    return to_json([shaped], limit)
