"""A deterministic fake model server for selection tests, speaking the vendors' wire formats.

Answers OpenAI Chat Completions (whole or streamed, with usage when asked for), OpenAI Responses,
Anthropic Messages (streamed or whole) and Google ``generateContent`` / ``streamGenerateContent``.
Whether a model answers a question right is fixed by a hash of (model, question) against the
model's skill; the usage it reports is a function of the model and the prompt, and every report is
kept in :attr:`LlmServer.reported` so a test can compare what was metered with what was billed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from tests.providers.fakes import FakeServer, Recorded, Respond, Stream, sse

SKILL = {"model-a": 0.9, "model-b": 0.6, "model-c": 0.3, "gpt-4o-mini": 0.8, "gpt-4o": 0.95}


def _unit(*parts: str) -> float:
    digest = hashlib.sha256("|".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def answer(model: str, question: str) -> str:
    """``right`` with probability SKILL[model], fixed per (model, question)."""
    return "right" if _unit(model, question) < SKILL.get(model, 0.5) else "wrong"


def usage_of(model: str, prompt: str) -> tuple[int, int]:
    """``(prompt tokens, completion tokens)`` the server bills for ``prompt`` to ``model``."""
    offset = sum(map(ord, model)) % 17
    return 5 + len(prompt) + offset, 2 + offset % 5


@dataclass
class Billed:
    model: str
    prompt: str
    input: int
    output: int
    path: str


@dataclass
class LlmServer:
    delay: float = 0.0
    """Seconds each answer takes (plus a per-request jitter of up to the same, fixed by its
    content, so concurrent requests interleave)."""
    reported: list[Billed] = field(default_factory=list)
    server: FakeServer | None = None
    clients: list[Any] = field(default_factory=list)
    """SDK clients made by :meth:`openai` / :meth:`openai_sync`, closed with the server."""

    def openai(self, **kwargs: Any) -> Any:
        """An ``openai.AsyncOpenAI`` client of this server (closed when the server stops)."""
        import openai

        client = openai.AsyncOpenAI(base_url=self.url + "/v1", **{"api_key": "k", **kwargs})
        self.clients.append(client)
        return client

    def openai_sync(self, **kwargs: Any) -> Any:
        """An ``openai.OpenAI`` client of this server (closed when the server stops)."""
        import openai

        client = openai.OpenAI(base_url=self.url + "/v1", **{"api_key": "k", **kwargs})
        self.clients.append(client)
        return client

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    async def __aenter__(self) -> LlmServer:
        self.server = await FakeServer(default=self._reply).__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        for client in self.clients:
            closed = client.close()
            if hasattr(closed, "__await__"):
                await closed
        await self.server.__aexit__(*exc)

    @property
    def requests(self) -> list[Recorded]:
        assert self.server is not None
        return self.server.requests

    async def _reply(self, record: Recorded) -> Respond | Stream:
        body = record.json or {}
        if "generateContent" in record.path or "streamGenerateContent" in record.path:
            model = record.path.rsplit("/models/", 1)[-1].split(":", 1)[0]
            prompt = " ".join(p.get("text", "") for c in body["contents"] for p in c["parts"])
        elif record.path.endswith("/responses"):
            model = body["model"]
            prompt = body["input"] if isinstance(body["input"], str) else json.dumps(body["input"])
        else:
            model = body["model"]
            prompt = " ".join(
                m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
                for m in body.get("messages", [])
            )
        if self.delay:
            await asyncio.sleep(self.delay * (1 + _unit(prompt, model)))
        text = answer(model, prompt.split()[-1] if prompt.split() else prompt)
        prompt_tokens, completion_tokens = usage_of(model, prompt)
        self.reported.append(Billed(model, prompt, prompt_tokens, completion_tokens, record.path))
        if record.path.endswith("/chat/completions"):
            return _chat(model, text, prompt_tokens, completion_tokens, body)
        if record.path.endswith("/responses"):
            return _responses(model, text, prompt_tokens, completion_tokens)
        if record.path.endswith("/messages"):
            return _anthropic(model, text, prompt_tokens, completion_tokens, body)
        return _google(
            text, prompt_tokens, completion_tokens, "streamGenerateContent" in record.path
        )


def _chat(model: str, text: str, inp: int, out: int, body: dict[str, Any]) -> Respond | Stream:
    usage = {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
    if not body.get("stream"):
        return Respond(200, {
            "id": "c1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": usage,
        })  # fmt: skip

    def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> Any:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
                "choices": choices, **extra}  # fmt: skip

    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": text}),
        chunk({}, "stop"),
    ]
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(chunk(None, usage=usage))
    return Stream(sse([(None, e) for e in events] + [(None, "[DONE]")]))


def _responses(model: str, text: str, inp: int, out: int) -> Respond:
    return Respond(200, {
        "id": "resp_1", "object": "response", "created_at": 1, "model": model, "status": "completed",
        "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": inp, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": inp + out},
    })  # fmt: skip


def _anthropic(model: str, text: str, inp: int, out: int, body: dict[str, Any]) -> Respond | Stream:
    if not body.get("stream"):
        return Respond(200, {
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": inp, "output_tokens": out},
        })  # fmt: skip
    return Stream(sse([
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": model,
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": inp, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": out}}),
        ("message_stop", {"type": "message_stop"}),
    ]))  # fmt: skip


def _google(text: str, inp: int, out: int, stream: bool) -> Respond | Stream:
    payload = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": inp, "candidatesTokenCount": out,
                          "totalTokenCount": inp + out},
        "modelVersion": "gemini-2.0-flash",
    }  # fmt: skip
    if stream:
        return Stream(sse([(None, payload)]))
    return Respond(200, payload)
