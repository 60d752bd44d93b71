"""Google Gemini (``google:``) and Vertex AI (``vertex:``) through ``google-genai``
(``pip install 'phi-core[google]'``).

* The SDK's retries stay off (``retry_options=None``); errors map to classified provider errors
  with the HTTP status and ``Retry-After``.
* Thinking levels become ``thinking_config.thinking_budget`` with ``include_thoughts``; thought
  parts stream as thinking. Thinking from earlier turns is dropped from the request (Gemini takes
  no thinking input); the stored conversation is unchanged.
* Function calls arrive whole; each becomes one tool-call delta. Calls without an id get one
  (``gemini-call-<n>``), and tool results are sent as ``function_response`` parts by name (+ id).
* Structured output: ``response_mime_type="application/json"`` + ``response_json_schema``.
* A stream that ends without a finish reason is a network error, never a silent partial success.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
from collections.abc import AsyncIterator
from typing import Any

try:
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    from ..errors import MissingExtraError

    raise MissingExtraError("Google Gemini/Vertex models", "google") from exc

from ..errors import ConfigError, ProviderError
from ..types import (
    AssistantMessage,
    ImageContent,
    StopReason,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from ._common import (
    TRANSPORT_ERRORS,
    MessageBuilder,
    PerLoop,
    api_key_for,
    classify_error,
    client_tool_choice,
    malformed_stream,
    network_error,
    stop_sequences,
    unchained,
)
from .base import ModelConfig, StreamDone, StreamEvent, StreamRequest

__all__ = ["THINKING_BUDGETS", "GoogleProvider", "build_google_request"]

THINKING_BUDGETS = {"minimal": 512, "low": 1024, "medium": 8192, "high": 24576}
_STOP: dict[str, StopReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "RECITATION": "length",
    "SAFETY": "error",
    "PROHIBITED_CONTENT": "error",
    "BLOCKLIST": "error",
    "SPII": "error",
    "MALFORMED_FUNCTION_CALL": "error",
}
_call_ids = itertools.count(1)


class GoogleProvider:
    """Streams ``generate_content_stream``; ``vertex`` models go to Vertex AI."""

    def __init__(self, model: ModelConfig) -> None:
        self.name = model.provider
        self.vertex = model.api == "google_vertex"
        http_options: dict[str, Any] = {"retry_options": None, "timeout": 600_000}
        if model.base_url:
            http_options["base_url"] = model.base_url
        if model.headers:
            http_options["headers"] = dict(model.headers)
        kwargs: dict[str, Any] = {"http_options": http_options}
        if self.vertex:
            key = api_key_for(model, "GOOGLE_API_KEY", required=False)
            project = model.compat.get("project") or os.environ.get("GOOGLE_CLOUD_PROJECT")
            location = model.compat.get("location") or os.environ.get("GOOGLE_CLOUD_LOCATION")
            kwargs["vertexai"] = True
            if key:
                kwargs["api_key"] = key  # Vertex AI express mode
            elif project:
                kwargs["project"] = project
                kwargs["location"] = location or "us-central1"
            else:
                raise ConfigError(
                    f"Vertex model {model.spec!r} needs a project: set GOOGLE_CLOUD_PROJECT "
                    f"(and GOOGLE_CLOUD_LOCATION) with application-default credentials, or set "
                    f"GOOGLE_API_KEY for Vertex AI express mode."
                )
        else:
            kwargs["api_key"] = api_key_for(model, "GEMINI_API_KEY")
        self.base_url = model.base_url
        self._clients = PerLoop(lambda: genai.Client(**kwargs))

    def __repr__(self) -> str:
        return f"GoogleProvider(name={self.name!r}, vertex={self.vertex!r})"

    async def stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        model = request.model
        contents, config = build_google_request(request)
        builder = MessageBuilder(model.provider, model.id)
        usage = Usage()
        finish: str | None = None
        n_parts = 0
        failure: ProviderError | None = None
        try:
            # Typed objects, so the SDK writes every nested field in the wire's own casing.
            response = await self._clients.get().aio.models.generate_content_stream(
                model=model.id,
                contents=[genai_types.Content.model_validate(c) for c in contents],
                config=genai_types.GenerateContentConfig.model_validate(config),
            )
            async for chunk in response:
                if chunk.usage_metadata is not None:
                    usage = _usage(chunk.usage_metadata)
                for candidate in chunk.candidates or ():
                    content = candidate.content
                    for part in (content.parts if content else None) or ():
                        n_parts += 1
                        signature = (
                            base64.b64encode(part.thought_signature).decode()
                            if part.thought_signature
                            else None
                        )
                        if part.function_call is not None:
                            call = part.function_call
                            yield builder.tool_call(
                                ("call", n_parts),
                                id=call.id or f"gemini-call-{next(_call_ids)}",
                                name=call.name,
                                arguments=json.dumps(call.args or {}),
                                signature=signature,
                            )
                        elif part.thought and (part.text or signature):
                            yield builder.thinking("thought", part.text or "", signature)
                        elif part.text:
                            yield builder.text("text", part.text)
                    if candidate.finish_reason is not None:
                        reason = candidate.finish_reason
                        finish = str(getattr(reason, "value", reason))
        except Exception as exc:
            mapped = _map_error(exc, model)
            if mapped is None:
                raise
            failure = unchained(mapped, exc)
        if failure is not None:  # raised here, outside the handler: nothing chains the SDK error
            raise failure
        if finish is None:
            raise network_error(
                model.provider, model.id, EOFError("the stream ended before a finish reason")
            )
        yield StreamDone(builder.finish(_STOP.get(finish, "stop"), usage))


def _usage(raw: Any) -> Usage:
    prompt = raw.prompt_token_count or 0
    cached = raw.cached_content_token_count or 0
    thoughts = raw.thoughts_token_count or 0
    output = (raw.candidates_token_count or 0) + thoughts  # thoughts are billed as output
    return Usage(
        input=max(prompt - cached, 0),
        output=output,
        reasoning=thoughts,
        cache_read=cached,
        total=raw.total_token_count or 0,
    )


def _map_error(exc: BaseException, model: ModelConfig) -> ProviderError | None:
    """The one place google-genai (and transport) exceptions become classified errors."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, genai_errors.APIError):
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        message = str(exc.message or exc)
        error_type = exc.status if isinstance(exc.status, str) else None
        if _bad_key(message, exc.details):
            # Gemini answers a wrong key with 400 INVALID_ARGUMENT (reason API_KEY_INVALID).
            error_type = "UNAUTHENTICATED"
        try:
            header_map = dict(headers) if headers is not None else None
        except Exception:  # no Retry-After hint, never an unclassified error
            header_map = None
        return classify_error(
            status=exc.code if isinstance(exc.code, int) else None,
            message=message,
            provider=model.provider,
            model=model.id,
            body=exc.details,
            headers=header_map,
            error_type=error_type,
        )
    if isinstance(exc, TRANSPORT_ERRORS):
        return network_error(model.provider, model.id, exc)
    if isinstance(exc, ValueError):
        return malformed_stream(model.provider, model.id, exc)
    return None


_BAD_KEY_PHRASES = ("api key not valid", "api_key_invalid", "api key expired", "api_key_expired")


def _bad_key(message: str, details: Any) -> bool:
    """Whether a Gemini error says the API key is wrong or expired (it comes as a 400)."""
    try:
        text = f"{message} {json.dumps(details, default=str)}".lower()
    except (TypeError, ValueError, RecursionError):
        text = message.lower()
    return any(phrase in text for phrase in _BAD_KEY_PHRASES)


_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY", "tool": "ANY"}
"""A caller's ``tool_choice`` mode as Gemini's function-calling mode (one tool: ANY + its name)."""


def build_google_request(request: StreamRequest) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``contents`` and ``config`` of ``generate_content_stream`` for ``request``."""
    model = request.model
    config: dict[str, Any] = {"max_output_tokens": request.max_tokens or model.max_tokens}
    if request.system_prompt:
        config["system_instruction"] = request.system_prompt
    temperature = request.temperature if request.temperature is not None else model.temperature
    top_p = request.top_p if request.top_p is not None else model.top_p
    seed = request.seed if request.seed is not None else model.seed
    if temperature is not None:
        config["temperature"] = temperature
    if top_p is not None:
        config["top_p"] = top_p
    if seed is not None:
        config["seed"] = seed
    if request.tools:
        config["tools"] = [
            {
                "function_declarations": [
                    {
                        "name": t.name,
                        "description": t.description,
                        "parameters_json_schema": t.parameters,
                    }
                    for t in request.tools
                ]
            }
        ]
        chosen = client_tool_choice(request.extra.get("tool_choice"))
        if chosen is not None:  # Gemini has no switch for parallel calls
            mode, name = chosen
            calling: dict[str, Any] = {"mode": _MODES[mode]}
            if name is not None:
                calling["allowed_function_names"] = [name]
            config["tool_config"] = {"function_calling_config": calling}
    stop = stop_sequences(request.extra)
    if stop:
        config["stop_sequences"] = stop
    for key in ("frequency_penalty", "presence_penalty"):  # the gateway's client settings
        if request.extra.get(key) is not None:
            config[key] = request.extra[key]
    if request.thinking != "off":
        config["thinking_config"] = {
            "thinking_budget": THINKING_BUDGETS[request.thinking],
            "include_thoughts": True,
        }
    fmt = request.response_format
    if fmt is not None:
        config["response_mime_type"] = "application/json"
        if fmt.type == "json_schema" and fmt.schema_ is not None:
            config["response_json_schema"] = fmt.schema_
    return _contents(request), config


def _blob(image: ImageContent) -> dict[str, Any]:
    return {"inline_data": {"mime_type": image.mime_type, "data": base64.b64decode(image.data)}}


def _contents(request: StreamRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})

    for message in request.messages:
        if isinstance(message, UserMessage):
            parts: list[dict[str, Any]] = []
            for block in message.content:
                if isinstance(block, TextContent):
                    parts.append({"text": block.text})
                elif isinstance(block, ImageContent):
                    parts.append(_blob(block))
            add("user", parts)
        elif isinstance(message, AssistantMessage):
            model_parts: list[dict[str, Any]] = []
            for content in message.content:
                if isinstance(content, TextContent) and content.text:
                    model_parts.append({"text": content.text})
                elif isinstance(content, ToolCall):
                    call: dict[str, Any] = {"name": content.name, "args": content.arguments}
                    if not content.id.startswith("gemini-call-"):
                        call["id"] = content.id
                    part: dict[str, Any] = {"function_call": call}
                    if content.signature:
                        # Gemini requires the call's thought signature back, byte for byte.
                        part["thought_signature"] = base64.b64decode(content.signature)
                    model_parts.append(part)
                # ThinkingContent is dropped: Gemini takes no thinking input.
            add("model", model_parts)
        elif isinstance(message, ToolResultMessage):
            text = "".join(c.text for c in message.content if isinstance(c, TextContent))
            key = "error" if message.is_error else "output"
            result: dict[str, Any] = {"name": message.tool_name, "response": {key: text}}
            if not message.tool_call_id.startswith("gemini-call-"):
                result["id"] = message.tool_call_id
            tool_parts: list[dict[str, Any]] = [{"function_response": result}]
            tool_parts.extend(_blob(c) for c in message.content if isinstance(c, ImageContent))
            add("user", tool_parts)
    return out
