"""OpenAI Responses API stream events, as documented in the streaming reference."""

from __future__ import annotations

from typing import Any

from .server import sse


def ev(type_: str, **fields: Any) -> tuple[str, Any]:
    return (type_, {"type": type_, "sequence_number": 0, **fields})


def response(
    status: str = "completed", usage: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5-mini",
        "status": status, "output": [], "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "usage": usage, **extra,
    }  # fmt: skip


def usage(inp: int, out: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": inp, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out, "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": inp + out,
    }  # fmt: skip


def text_reply(text: str) -> list[bytes]:
    return sse([
        ev("response.created", response=response("in_progress")),
        ev("response.output_item.added", output_index=0,
           item={"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}),
        ev("response.output_text.delta", item_id="msg_1", output_index=0, content_index=0, delta=text, logprobs=[]),
        ev("response.completed", response=response("completed", usage(10, 2))),
    ])  # fmt: skip
