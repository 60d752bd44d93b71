"""Anthropic Messages through the official ``anthropic`` SDK (``pip install 'phi-core[anthropic]'``).

* Thinking levels become ``thinking.budget_tokens`` of at least 1024 (the API minimum). Without
  a request ``max_tokens`` the model's limit is raised above the budget; a request's
  ``max_tokens`` (the caller's, or what an ``ExecutionLimits`` leaves) caps the whole output,
  thinking included: the budget shrinks to leave 1024 tokens for the answer, and under 1025
  there is no room to think, so none is asked for (:func:`thinking_budget`). ``temperature`` is
  not sent with thinking.
* Thinking blocks come back with their ``signature`` and are echoed back unchanged to Anthropic;
  thinking made by another vendor (no Anthropic signature) is sent as ``[Reasoning] …`` text.
* Prompt caching (``request.cache``, a :class:`~phi_core.providers.base.CacheConfig` or a bool):
  ``auto`` puts an ``ephemeral`` cache marker on the system prompt, the last tool and the last
  content block of the conversation (3 of the 4 allowed breakpoints); ``ManualCache`` marks only
  the parts it names; ``disabled`` marks nothing.
* Structured output: a ``respond_json`` tool whose input schema is the requested schema, forced
  with ``tool_choice`` (or requested in the system prompt when thinking is on, which forbids a
  forced tool); its input streams back as the reply's text.
* ``base_url`` and ``headers`` of the ModelConfig are honoured (phi-core ignored them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

try:
    import anthropic
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    from ..errors import MissingExtraError

    raise MissingExtraError("Anthropic models", "anthropic") from exc

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
    thinking_as_text,
    unchained,
)
from .base import ModelConfig, StreamDone, StreamEvent, StreamRequest, cache_targets

__all__ = [
    "THINKING_BUDGETS",
    "AnthropicProvider",
    "build_anthropic_params",
    "thinking_budget",
    "thinking_max_tokens",
]

THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
JSON_TOOL = "respond_json"
_STOP: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_use",
    "refusal": "error",
}
_CACHE = {"type": "ephemeral"}


class AnthropicProvider:
    """Streams the Messages API; one ``AsyncAnthropic`` client per endpoint and key."""

    def __init__(self, model: ModelConfig) -> None:
        self.name = model.provider
        key = api_key_for(model, "ANTHROPIC_API_KEY")
        self.base_url = model.base_url
        self._clients = PerLoop(
            lambda: anthropic.AsyncAnthropic(
                api_key=key or "no-key",
                base_url=model.base_url,
                max_retries=0,
                timeout=600.0,
                default_headers=model.headers or None,
                http_client=anthropic.DefaultAsyncHttpxClient(timeout=600.0),
            )
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, base_url={self.base_url!r})"

    def output_ceiling(self, request: StreamRequest) -> int:
        """The output limit this provider sends for ``request`` (thinking may raise the model's)."""
        return thinking_max_tokens(request, thinking_budget(request))

    async def stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        model = request.model
        params = build_anthropic_params(request)
        builder = MessageBuilder(model.provider, model.id)
        json_blocks: set[int] = set()
        stop: str | None = None
        usage = Usage()
        finished = False
        failure: ProviderError | None = None
        try:
            response = await self._clients.get().messages.create(**params)
            try:
                async for event in response:
                    kind = event.type
                    if kind == "content_block_delta":
                        delta = event.delta
                        index = event.index
                        if delta.type == "text_delta":
                            yield builder.text(index, delta.text)
                        elif delta.type == "thinking_delta":
                            yield builder.thinking(index, delta.thinking)
                        elif delta.type == "signature_delta":
                            yield builder.thinking(index, signature=delta.signature)
                        elif delta.type == "input_json_delta":
                            if index in json_blocks:
                                yield builder.text(index, delta.partial_json)
                            else:
                                yield builder.tool_call(index, arguments=delta.partial_json)
                    elif kind == "content_block_start":
                        block = event.content_block
                        if block.type == "tool_use":
                            if block.name == JSON_TOOL and request.response_format is not None:
                                json_blocks.add(event.index)
                            else:
                                yield builder.tool_call(event.index, id=block.id, name=block.name)
                        elif block.type == "redacted_thinking":
                            yield builder.thinking(event.index, signature=block.data, redacted=True)
                        elif block.type == "thinking" and (block.thinking or block.signature):
                            yield builder.thinking(event.index, block.thinking, block.signature)
                        elif block.type == "text" and block.text:
                            yield builder.text(event.index, block.text)
                    elif kind == "message_start":
                        usage = _usage(event.message.usage, usage)
                    elif kind == "message_delta":
                        stop = event.delta.stop_reason or stop
                        usage = _usage(event.usage, usage)
                    elif kind == "message_stop":
                        finished = True
            finally:
                await response.close()
        except Exception as exc:
            mapped = _map_error(exc, model)
            if mapped is None:
                raise
            failure = unchained(mapped, exc)
        if failure is not None:  # raised here, outside the handler: nothing chains the SDK error
            raise failure
        if not finished:
            raise network_error(
                model.provider, model.id, EOFError("the stream ended before message_stop")
            )
        reason = _STOP.get(stop or "end_turn", "stop")
        if json_blocks and reason == "tool_use" and not builder.has_tool_calls:
            reason = "stop"
        yield StreamDone(builder.finish(reason, usage))


def _usage(raw: Any, previous: Usage) -> Usage:
    def pick(name: str, old: int) -> int:
        value = getattr(raw, name, None)
        return int(value) if value is not None else old

    inp = pick("input_tokens", previous.input)
    out = pick("output_tokens", previous.output)
    read = pick("cache_read_input_tokens", previous.cache_read)
    write = pick("cache_creation_input_tokens", previous.cache_write)
    return Usage(
        input=inp, output=out, cache_read=read, cache_write=write, total=inp + out + read + write
    )


def _map_error(exc: BaseException, model: ModelConfig) -> ProviderError | None:
    """The one place Anthropic SDK (and transport) exceptions become classified errors."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, (anthropic.APIConnectionError, *TRANSPORT_ERRORS)):
        return network_error(model.provider, model.id, exc)
    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body
        error = body.get("error") if isinstance(body, dict) else None
        error_type = error.get("type") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        status = exc.status_code if exc.status_code != 200 else None  # error event in a stream
        return classify_error(
            status=status,
            message=str(message or exc.message),
            provider=model.provider,
            model=model.id,
            body=body,
            headers=exc.response.headers,
            error_type=error_type,
        )
    if isinstance(exc, anthropic.APIError):
        return classify_error(
            status=None,
            message=exc.message,
            provider=model.provider,
            model=model.id,
            body=exc.body,
        )
    if isinstance(exc, ValueError):
        return malformed_stream(model.provider, model.id, exc)
    return None


_CHOICES = {"auto": "auto", "none": "none", "required": "any", "tool": "tool"}


def _tool_choice(extra: dict[str, Any]) -> dict[str, Any] | None:
    """A caller's OpenAI-style ``tool_choice`` / ``parallel_tool_calls`` in Anthropic's shape."""
    chosen = client_tool_choice(extra.get("tool_choice"))
    serial = extra.get("parallel_tool_calls") is False
    if chosen is None and not serial:
        return None
    mode, name = chosen or ("auto", None)
    choice: dict[str, Any] = {"type": _CHOICES[mode]}
    if name is not None:
        choice["name"] = name
    if serial and mode != "none":
        choice["disable_parallel_tool_use"] = True
    return choice


def thinking_budget(request: StreamRequest) -> int | None:
    """The ``budget_tokens`` of ``request``'s thinking level, or ``None`` for no thinking.

    A ``max_tokens`` set on the request is a cap on the whole output, thinking included (the
    caller's, or what the run's ``ExecutionLimits`` leave): the budget shrinks to leave 1024
    tokens for the answer, never below the API's minimum of 1024, and a cap of 1024 or less
    leaves no room to think. Without one the model's limit is raised above the budget instead.
    """
    if request.thinking == "off":
        return None
    budget = THINKING_BUDGETS[request.thinking]
    cap = request.max_tokens
    if cap is None:
        return budget
    if cap <= THINKING_BUDGETS["minimal"]:
        return None
    return max(THINKING_BUDGETS["minimal"], min(budget, cap - 1024))


def thinking_max_tokens(request: StreamRequest, budget: int | None) -> int:
    """The output limit sent with thinking budget ``budget``: the request's ``max_tokens`` (a
    cap), else the model's, raised above the budget so the answer has 1024 tokens of room."""
    if request.max_tokens is not None:
        return request.max_tokens
    if budget is None:
        return request.model.max_tokens
    return max(request.model.max_tokens, budget + 1024)


def build_anthropic_params(request: StreamRequest) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` for ``request``."""
    model = request.model
    cache_system, cache_tools, cache_messages = cache_targets(request.cache)
    params: dict[str, Any] = {
        "model": model.id,
        "messages": _messages(request),
        "max_tokens": request.max_tokens or model.max_tokens,
        "stream": True,
    }
    system = request.system_prompt or ""
    fmt = request.response_format
    budget = thinking_budget(request)
    thinking = budget is not None
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in request.tools
    ]
    if fmt is not None:
        tools.append(
            {
                "name": JSON_TOOL,
                "description": f"Respond with the {fmt.name} as a JSON object.",
                "input_schema": fmt.schema_ or {"type": "object"},
            }
        )
        if thinking:
            system = (system + "\n\n" if system else "") + (
                f"Give your final answer by calling the `{JSON_TOOL}` tool."
            )
        else:
            params["tool_choice"] = {"type": "tool", "name": JSON_TOOL}
    if system:
        block: dict[str, Any] = {"type": "text", "text": system}
        if cache_system:
            block["cache_control"] = _CACHE
        params["system"] = [block]
    if tools:
        if cache_tools:
            tools[-1] = {**tools[-1], "cache_control": _CACHE}
        params["tools"] = tools
        if "tool_choice" not in params:  # the caller's choice, unless the JSON tool is forced
            choice = _tool_choice(request.extra)
            if choice is not None:
                params["tool_choice"] = choice
    stop = stop_sequences(request.extra)
    if stop:
        params["stop_sequences"] = stop
    params["max_tokens"] = thinking_max_tokens(request, budget)
    if budget is not None:
        params["thinking"] = {"type": "enabled", "budget_tokens": budget}
    else:
        temperature = request.temperature if request.temperature is not None else model.temperature
        if temperature is not None:
            params["temperature"] = temperature
        top_p = request.top_p if request.top_p is not None else model.top_p
        if top_p is not None:
            params["top_p"] = top_p
    if cache_messages and params["messages"]:
        last = params["messages"][-1]["content"]
        if last:
            last[-1] = {**last[-1], "cache_control": _CACHE}
    return params


def _image(block: ImageContent) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block.mime_type, "data": block.data},
    }


def _messages(request: StreamRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    own = request.model.provider

    def add(role: str, content: list[dict[str, Any]]) -> None:
        if not content:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})

    for message in request.messages:
        if isinstance(message, UserMessage):
            parts: list[dict[str, Any]] = []
            for block in message.content:
                if isinstance(block, TextContent) and block.text:
                    parts.append({"type": "text", "text": block.text})
                elif isinstance(block, ImageContent):
                    parts.append(_image(block))
            add("user", parts)
        elif isinstance(message, AssistantMessage):
            add("assistant", _assistant(message, own))
        elif isinstance(message, ToolResultMessage):
            inner: list[dict[str, Any]] = []
            for block in message.content:
                if isinstance(block, TextContent):
                    inner.append({"type": "text", "text": block.text or "(empty)"})
                elif isinstance(block, ImageContent):
                    inner.append(_image(block))
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": inner or [{"type": "text", "text": "(no output)"}],
            }
            if message.is_error:
                result["is_error"] = True
            add("user", [result])
    return out


def _assistant(message: AssistantMessage, own_provider: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    same_vendor = message.provider == own_provider
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if same_vendor and block.redacted and block.signature:
                parts.append({"type": "redacted_thinking", "data": block.signature})
            elif same_vendor and block.signature:
                parts.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
                )
            elif block.thinking and not block.redacted:
                parts.append({"type": "text", "text": thinking_as_text(block)})
        elif isinstance(block, TextContent):
            if block.text:
                parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolCall):
            parts.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}
            )
    return parts
