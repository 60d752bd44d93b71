"""OpenAI Chat Completions, and every API that speaks it (xAI, Groq, Cerebras, OpenRouter,
Mistral, DeepSeek, Ollama, vLLM, llama.cpp server, any ``openai-compat`` endpoint).

One :class:`openai.AsyncOpenAI` client per endpoint (the registry shares the provider), with the
SDK's own retries off. Vendor differences come from :class:`~.compat.OpenAICompat`. Thinking
blocks of earlier turns are sent as ``[Reasoning] …`` text (the API has no thinking input); the
stored conversation is never changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai

from ..errors import ProviderError
from ..types import (
    AssistantMessage,
    ImageContent,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from ._common import MessageBuilder, api_key_for, network_error, thinking_as_text, unchained
from ._openai import (
    arguments_text,
    data_url,
    json_schema_format,
    map_openai_error,
    openai_clients,
    request_timeout,
)
from .base import ModelConfig, StreamDone, StreamEvent, StreamRequest
from .compat import OpenAICompat

__all__ = ["OpenAIChatProvider", "build_chat_params"]

_FINISH: dict[str, StopReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "error",
}
_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high"}
_RAW_CHUNKS: Any = openai.AsyncStream[object]
"""The SDK's stream of server-sent events, each as the JSON it carries."""


class OpenAIChatProvider:
    """Streams Chat Completions through the official ``openai`` SDK."""

    def __init__(self, model: ModelConfig) -> None:
        self.name = model.provider
        key = api_key_for(model, "OPENAI_API_KEY")
        self.base_url = model.base_url
        self._clients = openai_clients(model, key)

    def __repr__(self) -> str:
        return f"OpenAIChatProvider(name={self.name!r}, base_url={self.base_url!r})"

    async def stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        model = request.model
        compat = OpenAICompat.for_model(model.provider, model.compat)
        params = build_chat_params(request, compat)
        builder = MessageBuilder(model.provider, model.id)
        finish: str | None = None
        usage = Usage()
        failure: ProviderError | None = None
        try:
            # The SDK sends the request, decodes the server-sent events and raises its errors;
            # the chunks stay plain dicts (`AsyncStream[object]`): building its pydantic chunk
            # objects was most of a gateway passthrough's CPU (benchmarks/gateway_load.py).
            # `post` is the SDK's documented call for a body it need not transform: ours is
            # plain JSON already, and the typed `create` re-walked every message of it.
            chunks = await self._clients.get().post(
                "/chat/completions",
                cast_to=object,
                body=params,
                options={"timeout": request_timeout()},
                stream=True,
                stream_cls=_RAW_CHUNKS,
            )
            async with chunks:
                async for chunk in chunks:
                    if not isinstance(chunk, dict):
                        raise ValueError(f"a stream event that is not a JSON object: {chunk!r:.80}")
                    if chunk.get("usage"):
                        usage = _usage(chunk["usage"])
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                        if isinstance(reasoning, str) and reasoning:
                            yield builder.thinking("thinking", reasoning)
                        if delta.get("content"):
                            yield builder.text("text", delta["content"])
                        for call in delta.get("tool_calls") or ():
                            function = call.get("function") or {}
                            index = call.get("index")
                            # A chunk with a new id starts a new call even at the same index
                            # (Ollama sends index 0 for every parallel call; some servers none).
                            yield builder.tool_call(
                                ("tool", index if isinstance(index, int) else 0),
                                id=call.get("id"),
                                name=function.get("name"),
                                arguments=function.get("arguments") or "",
                            )
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
        except Exception as exc:
            mapped = map_openai_error(exc, model.provider, model.id)
            if mapped is None:
                raise
            failure = unchained(mapped, exc)
        if failure is not None:  # raised here, outside the handler: nothing chains the SDK error
            raise failure
        if finish is None:
            raise network_error(
                model.provider, model.id, EOFError("the stream ended before a finish_reason")
            )
        yield StreamDone(builder.finish(_FINISH.get(finish, "stop"), usage))


def _usage(raw: dict[str, Any]) -> Usage:
    prompt = raw.get("prompt_tokens") or 0
    cached = (raw.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return Usage(
        input=max(prompt - cached, 0),
        output=raw.get("completion_tokens") or 0,
        reasoning=reasoning,
        cache_read=cached,
        total=raw.get("total_tokens") or 0,
    )


_PASSED_THROUGH = (
    "stop",
    "user",
    "tool_choice",
    "parallel_tool_calls",
    "frequency_penalty",
    "presence_penalty",
)
"""``StreamRequest.extra`` keys sent to Chat Completions as they are (the gateway sets them)."""


def build_chat_params(request: StreamRequest, compat: OpenAICompat) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` for ``request`` (vendor fields such as
    OpenRouter's ``reasoning`` at its top level, where the API reads them)."""
    model = request.model
    params: dict[str, Any] = {
        "model": model.id,
        "messages": _messages(request, compat),
        "stream": True,
    }
    if compat.supports_usage_in_streaming:
        params["stream_options"] = {"include_usage": True}
    max_tokens = request.max_tokens or model.max_tokens
    if max_tokens:
        params[compat.max_tokens_field] = max_tokens
    temperature = request.temperature if request.temperature is not None else model.temperature
    top_p = request.top_p if request.top_p is not None else model.top_p
    seed = request.seed if request.seed is not None else model.seed
    if temperature is not None:
        params["temperature"] = temperature
    if top_p is not None:
        params["top_p"] = top_p
    if seed is not None:
        params["seed"] = seed
    if compat.supports_store:
        params["store"] = False
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    for key in _PASSED_THROUGH:  # the gateway's client settings, sent as they are
        if request.extra.get(key) is not None:
            params[key] = request.extra[key]
    if request.response_format is not None:
        params["response_format"] = json_schema_format(
            request.response_format, strict_ok=compat.supports_strict_schema
        )
    if request.thinking != "off":
        effort = _EFFORT[request.thinking]
        if compat.thinking_format == "openrouter":
            params["reasoning"] = {"effort": effort}
        elif compat.thinking_format == "qwen":
            params["enable_thinking"] = True
        elif compat.supports_reasoning_effort and compat.thinking_format in ("openai", "xai"):
            if compat.thinking_format == "xai":
                effort = "high" if effort == "high" else "low"
            params["reasoning_effort"] = effort
    return params


def _messages(request: StreamRequest, compat: OpenAICompat) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system_prompt:
        role = (
            "developer" if compat.supports_developer_role and request.model.reasoning else "system"
        )
        out.append({"role": role, "content": request.system_prompt})
    pending_images: list[dict[str, Any]] = []
    for message in request.messages:
        if not isinstance(message, ToolResultMessage) and pending_images:
            out.append({"role": "user", "content": pending_images})
            pending_images = []
        if isinstance(message, UserMessage):
            if compat.requires_assistant_after_tool_result and out and out[-1]["role"] == "tool":
                out.append({"role": "assistant", "content": "Tool results received."})
            out.append({"role": "user", "content": _user_content(message)})
        elif isinstance(message, AssistantMessage):
            entry = _assistant(message)
            if entry is not None:
                out.append(entry)
        elif isinstance(message, ToolResultMessage):
            text = "".join(c.text for c in message.content if isinstance(c, TextContent))
            images = [c for c in message.content if isinstance(c, ImageContent)]
            tool: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": text or ("(see the attached image)" if images else "(no output)"),
            }
            if compat.requires_tool_result_name:
                tool["name"] = message.tool_name
            out.append(tool)
            # Tool messages cannot carry images: they follow in one user message.
            pending_images.extend(
                {"type": "image_url", "image_url": {"url": data_url(i)}} for i in images
            )
    if pending_images:
        out.append({"role": "user", "content": pending_images})
    return out


def _user_content(message: UserMessage) -> str | list[dict[str, Any]]:
    if len(message.content) == 1 and isinstance(message.content[0], TextContent):
        return message.content[0].text
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            parts.append({"type": "image_url", "image_url": {"url": data_url(block)}})
    return parts


def _assistant(message: AssistantMessage) -> dict[str, Any] | None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, ThinkingContent):
            if block.thinking and not block.redacted:
                texts.append(thinking_as_text(block))
        elif isinstance(block, ToolCall):
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": arguments_text(block)},
                }
            )
    if not texts and not calls:
        return None
    entry: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
    if calls:
        entry["tool_calls"] = calls
    return entry
