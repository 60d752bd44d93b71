"""Gemini ``streamGenerateContent?alt=sse`` chunks, as documented in the API reference."""

from __future__ import annotations

from typing import Any

from .server import sse


def gchunk(
    parts: list[dict[str, Any]], finish: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash"}
    if usage:
        out["usageMetadata"] = usage
    return out


def gusage(prompt: int, candidates: int, cached: int = 0, thoughts: int = 0) -> dict[str, Any]:
    return {
        "promptTokenCount": prompt, "candidatesTokenCount": candidates,
        "cachedContentTokenCount": cached, "thoughtsTokenCount": thoughts,
        "totalTokenCount": prompt + candidates + thoughts,
    }  # fmt: skip


def gemini_stream(*chunks: dict[str, Any]) -> list[bytes]:
    return sse((None, c) for c in chunks)


def text_reply(text: str) -> list[bytes]:
    return gemini_stream(gchunk([{"text": text}], "STOP", gusage(5, 2)))


def gerror(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "status": status, "message": message}}
