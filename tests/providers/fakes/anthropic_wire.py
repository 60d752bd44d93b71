"""Anthropic Messages SSE events, as documented in the streaming reference."""

from __future__ import annotations

from typing import Any

from .server import sse


def message_start(
    input_tokens: int = 10, cache_read: int = 0, cache_write: int = 0
) -> tuple[str, Any]:
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1", "type": "message", "role": "assistant", "content": [],
                "model": "claude-haiku-4-5", "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                          "cache_read_input_tokens": cache_read,
                          "cache_creation_input_tokens": cache_write},
            },
        },
    )  # fmt: skip


def block_start(index: int, block: dict[str, Any]) -> tuple[str, Any]:
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def block_delta(index: int, delta: dict[str, Any]) -> tuple[str, Any]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def block_stop(index: int) -> tuple[str, Any]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_delta(stop_reason: str, output_tokens: int) -> tuple[str, Any]:
    return (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
         "usage": {"output_tokens": output_tokens}},
    )  # fmt: skip


MESSAGE_STOP = ("message_stop", {"type": "message_stop"})
PING = ("ping", {"type": "ping"})


def text_reply(text: str) -> list[bytes]:
    return sse([
        message_start(), block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": text}), block_stop(0),
        message_delta("end_turn", 5), MESSAGE_STOP,
    ])  # fmt: skip


def error(type_: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}
