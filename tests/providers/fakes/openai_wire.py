"""OpenAI Chat Completions stream chunks, as documented in the API reference."""

from __future__ import annotations

from typing import Any

from .server import sse


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": choices,
        **extra,
    }


def usage_chunk(
    prompt: int, completion: int, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return chunk(
        None,
        usage={
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        },
    )


def chat_stream(*chunks: dict[str, Any], done: bool = True) -> list[bytes]:
    frames = sse((None, c) for c in chunks)
    if done:
        frames += sse([(None, "[DONE]")])
    return frames


def text_reply(text: str, prompt: int = 10, completion: int = 3) -> list[bytes]:
    return chat_stream(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": text}),
        chunk({}, "stop"),
        usage_chunk(prompt, completion),
    )


def error_body(
    message: str, type_: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code, "param": None}}
