"""OpenAI Responses API (``/responses``) and Azure OpenAI, through the official ``openai`` SDK.

Stream events are keyed by ``output_index``, so tool-call arguments always land in the call they
belong to and blocks keep the order the model produced them in (phi-core used a hash map here).
Reasoning summaries stream as thinking; with thinking on, the encrypted reasoning item is kept as
the thinking block's ``signature`` and echoed back to the same provider (``store`` is off).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import openai

from ..errors import ConfigError, ProviderError
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
from ._common import (
    MessageBuilder,
    PerLoop,
    api_key_for,
    classify_error,
    client_tool_choice,
    network_error,
    thinking_as_text,
    unchained,
)
from ._openai import (
    TIMEOUT,
    arguments_text,
    data_url,
    http_client,
    map_openai_error,
    openai_clients,
    request_timeout,
)
from .base import ModelConfig, StreamDone, StreamEvent, StreamRequest

__all__ = ["AzureOpenAIProvider", "OpenAIResponsesProvider", "build_responses_params"]

_EFFORT = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high"}
AZURE_API_VERSION = "2025-04-01-preview"


class OpenAIResponsesProvider:
    """Streams the Responses API; one ``AsyncOpenAI`` client per endpoint and key."""

    def __init__(self, model: ModelConfig) -> None:
        self.name = model.provider
        key = api_key_for(model, "OPENAI_API_KEY")
        self.base_url = model.base_url
        self._clients: PerLoop[openai.AsyncOpenAI] = openai_clients(model, key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self.base_url!r})"

    async def stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        model = request.model
        params = build_responses_params(request)
        builder = MessageBuilder(model.provider, model.id)
        usage = Usage()
        stop: StopReason | None = None
        failure: ProviderError | None = None
        try:
            response = await self._clients.get().responses.create(
                **params, timeout=request_timeout()
            )
            try:
                async for event in response:
                    kind = event.type
                    if kind == "response.output_text.delta":
                        yield builder.text(("text", event.output_index), event.delta)
                    elif kind in (
                        "response.reasoning_summary_text.delta",
                        "response.reasoning_text.delta",
                    ):
                        yield builder.thinking(("reasoning", event.output_index), event.delta)
                    elif kind == "response.function_call_arguments.delta":
                        yield builder.tool_call(("call", event.output_index), arguments=event.delta)
                    elif kind == "response.output_item.added":
                        item = event.item
                        if item.type == "function_call":
                            yield builder.tool_call(
                                ("call", event.output_index),
                                id=item.call_id,
                                name=item.name,
                                arguments=item.arguments or "",
                            )
                    elif kind == "response.output_item.done":
                        item = event.item
                        encrypted = getattr(item, "encrypted_content", None)
                        if item.type == "reasoning" and encrypted:
                            yield builder.thinking(
                                ("reasoning", event.output_index), signature=encrypted
                            )
                    elif kind in ("response.completed", "response.incomplete"):
                        final = event.response
                        usage = _usage(final.usage)
                        stop = _incomplete_stop(final) if kind == "response.incomplete" else "stop"
                    elif kind == "response.failed":
                        error = event.response.error
                        raise classify_error(
                            status=None,
                            message=error.message if error else "the response failed",
                            provider=model.provider,
                            model=model.id,
                            error_type=error.code if error else "server_error",
                        )
                    elif kind == "error":
                        raise classify_error(
                            status=None,
                            message=event.message,
                            provider=model.provider,
                            model=model.id,
                            error_type=event.code or "server_error",
                        )
            finally:
                await response.close()
        except Exception as exc:
            mapped = map_openai_error(exc, model.provider, model.id)
            if mapped is None:
                raise
            failure = unchained(mapped, exc)
        if failure is not None:  # raised here, outside the handler: nothing chains the SDK error
            raise failure
        if stop is None:
            raise network_error(
                model.provider, model.id, EOFError("the stream ended before response.completed")
            )
        yield StreamDone(builder.finish(stop, usage))


class AzureOpenAIProvider(OpenAIResponsesProvider):
    """Azure OpenAI: ``azure:<deployment>``; endpoint from ``base_url``/``AZURE_OPENAI_ENDPOINT``.

    The API version comes from ``compat["api_version"]``, ``AZURE_OPENAI_API_VERSION``, or
    :data:`AZURE_API_VERSION`.
    """

    def __init__(self, model: ModelConfig) -> None:
        self.name = model.provider
        endpoint = model.base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")
        if not endpoint:
            raise ConfigError(
                f"Azure model {model.spec!r} has no endpoint: set AZURE_OPENAI_ENDPOINT "
                f"(https://<resource>.openai.azure.com) or pass base_url=...",
                key="base_url",
            )
        key = api_key_for(model, "AZURE_OPENAI_API_KEY")
        version = (
            model.compat.get("api_version")
            or os.environ.get("AZURE_OPENAI_API_VERSION")
            or AZURE_API_VERSION
        )
        self.base_url = endpoint
        self._clients = PerLoop(
            lambda: openai.AsyncAzureOpenAI(
                api_key=key,
                azure_endpoint=endpoint,
                api_version=str(version),
                max_retries=0,
                timeout=TIMEOUT,
                default_headers=model.headers or None,
                http_client=http_client(),
            ),
            close=lambda client: client.close(),
        )


_INCOMPLETE: dict[str, StopReason] = {
    "max_output_tokens": "length",
    "content_filter": "error",  # as Chat Completions' finish_reason "content_filter"
}


def _incomplete_stop(final: Any) -> StopReason:
    """The stop reason of a ``response.incomplete``, by ``incomplete_details.reason`` (a reason
    not known here, or none, is a cut-off: ``length``)."""
    reason = getattr(getattr(final, "incomplete_details", None), "reason", None)
    return _INCOMPLETE.get(reason, "length") if isinstance(reason, str) else "length"


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    cached = getattr(getattr(raw, "input_tokens_details", None), "cached_tokens", 0) or 0
    reasoning = getattr(getattr(raw, "output_tokens_details", None), "reasoning_tokens", 0) or 0
    return Usage(
        input=max((raw.input_tokens or 0) - cached, 0),
        output=raw.output_tokens or 0,
        reasoning=reasoning,
        cache_read=cached,
        total=raw.total_tokens or 0,
    )


def build_responses_params(request: StreamRequest) -> dict[str, Any]:
    """The keyword arguments of ``responses.create`` for ``request``."""
    model = request.model
    params: dict[str, Any] = {
        "model": model.id,
        "input": _input(request),
        "stream": True,
        "store": False,
    }
    if request.system_prompt:
        params["instructions"] = request.system_prompt
    max_tokens = request.max_tokens or model.max_tokens
    if max_tokens:
        params["max_output_tokens"] = max_tokens
    temperature = request.temperature if request.temperature is not None else model.temperature
    top_p = request.top_p if request.top_p is not None else model.top_p
    if temperature is not None:
        params["temperature"] = temperature
    if top_p is not None:
        params["top_p"] = top_p
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "strict": False,
            }
            for t in request.tools
        ]
        chosen = client_tool_choice(request.extra.get("tool_choice"))
        if chosen is not None:  # Responses names a function at the top level of the choice
            mode, name = chosen
            params["tool_choice"] = mode if name is None else {"type": "function", "name": name}
        if request.extra.get("parallel_tool_calls") is not None:
            params["parallel_tool_calls"] = bool(request.extra["parallel_tool_calls"])
    if request.thinking != "off":
        params["reasoning"] = {"effort": _EFFORT[request.thinking], "summary": "auto"}
        params["include"] = ["reasoning.encrypted_content"]
    fmt = request.response_format
    if fmt is not None:
        if fmt.type == "json_object" or fmt.schema_ is None:
            params["text"] = {"format": {"type": "json_object"}}
        else:
            params["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": fmt.name,
                    "schema": fmt.schema_,
                    "strict": fmt.strict,
                }
            }
    return params


def _input(request: StreamRequest) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    own = request.model.provider
    for message in request.messages:
        if isinstance(message, UserMessage):
            parts: list[dict[str, Any]] = []
            for block in message.content:
                if isinstance(block, TextContent):
                    parts.append({"type": "input_text", "text": block.text})
                elif isinstance(block, ImageContent):
                    parts.append({"type": "input_image", "image_url": data_url(block)})
            items.append({"role": "user", "content": parts})
        elif isinstance(message, AssistantMessage):
            for content in message.content:
                if isinstance(content, TextContent) and content.text:
                    items.append({"role": "assistant", "content": content.text})
                elif isinstance(content, ThinkingContent):
                    if message.provider == own and content.signature:
                        items.append(
                            {
                                "type": "reasoning",
                                "summary": [{"type": "summary_text", "text": content.thinking}],
                                "encrypted_content": content.signature,
                            }
                        )
                    elif content.thinking and not content.redacted:
                        items.append({"role": "assistant", "content": thinking_as_text(content)})
                elif isinstance(content, ToolCall):
                    items.append(
                        {
                            "type": "function_call",
                            "call_id": content.id,
                            "name": content.name,
                            "arguments": arguments_text(content),
                        }
                    )
        elif isinstance(message, ToolResultMessage):
            text = "".join(c.text for c in message.content if isinstance(c, TextContent))
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": text or "(no output)",
                }
            )
            images = [c for c in message.content if isinstance(c, ImageContent)]
            if images:
                items.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_image", "image_url": data_url(i)} for i in images
                        ],
                    }
                )
    return items
