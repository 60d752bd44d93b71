"""OpenAI's Chat Completions wire format: a request body in, completions, chunks and errors out.

Only shapes live here (no I/O): :func:`parse_chat_request` validates a ``POST
/v1/chat/completions`` body into a :class:`ChatRequest` of phi-core types, and the builders return
the dicts OpenAI's API returns, so the official ``openai`` client's types parse them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import GatewayError
from ..providers._common import client_tool_choice
from ..types import (
    AssistantMessage,
    ImageContent,
    Message,
    ResponseFormat,
    TextContent,
    ThinkingLevel,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    Usage,
    UserMessage,
)

__all__ = [
    "ChatRequest",
    "StopCutter",
    "chunk",
    "completion",
    "error_body",
    "new_completion_id",
    "parse_chat_request",
    "usage_dict",
]


def error_body(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param)


@dataclass
class ChatRequest:
    """A validated chat-completions request in phi-core's types."""

    model: str
    messages: list[Message]
    system_prompt: str | None = None
    stream: bool = False
    include_usage: bool = False
    tools: list[ToolDefinition] = field(default_factory=list)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    user: str | None = None
    response_format: ResponseFormat | None = None
    thinking: ThinkingLevel | None = None
    """``reasoning_effort`` in phi-core's terms ("none" is "off")."""
    penalties: dict[str, float] = field(default_factory=dict)
    """``frequency_penalty`` / ``presence_penalty`` where non-zero (OpenAI-compatible upstreams)."""

    @property
    def prompt_text(self) -> str:
        """The last user message's text (a route's router features; the run log's prompt)."""
        for message in reversed(self.messages):
            if isinstance(message, UserMessage):
                return "".join(c.text for c in message.content if isinstance(c, TextContent))
        return ""

    @property
    def extra(self) -> dict[str, Any]:
        """Settings sent to OpenAI-compatible upstreams as they are (part of the request key)."""
        extra: dict[str, Any] = {}
        if self.stop:
            extra["stop"] = list(self.stop)
        if self.user is not None:
            extra["user"] = self.user
        return {**extra, **self.penalties, **self.tool_settings}

    @property
    def tool_settings(self) -> dict[str, Any]:
        """``tool_choice`` and ``parallel_tool_calls`` where the client set them (sent as they
        are to OpenAI-compatible upstreams, by a passthrough call and by every race branch)."""
        settings: dict[str, Any] = {}
        if self.tool_choice is not None:
            settings["tool_choice"] = self.tool_choice
        if self.parallel_tool_calls is not None:
            settings["parallel_tool_calls"] = self.parallel_tool_calls
        return settings


def _number(body: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise bad_request(f"`{key}` must be a number from {low} to {high}, got {value!r}.", key)
    return float(value)


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(f"`{key}` must be an integer >= 1, got {value!r}.", key)
    return value


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate a request body; every mistake is a 400 naming the field and the fix."""
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request(
            "`model` is required: `race:<profile>`, `route:<profile>` or `provider:model` "
            "(GET /v1/models lists them).",
            "model",
        )
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise bad_request("`messages` must be a non-empty list of messages.", "messages")
    system, messages = _messages(raw_messages)
    if not messages:
        raise bad_request("`messages` holds only system messages; add a user message.", "messages")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request(f"`stream` must be true or false, got {stream!r}.", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_request("`stream_options` must be an object.", "stream_options")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise bad_request(
            f"`stream_options.include_usage` must be true or false, got {include_usage!r}.",
            "stream_options",
        )
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise bad_request(f"Only `n` = 1 is supported, got {n!r}.", "n")
    max_tokens = _positive_int(body, "max_completion_tokens") or _positive_int(body, "max_tokens")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad_request(f"`seed` must be an integer, got {seed!r}.", "seed")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request(
            f"`parallel_tool_calls` must be true or false, got {parallel!r}.", "parallel_tool_calls"
        )
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise bad_request(f"`user` must be a string, got {user!r}.", "user")
    _refuse_unsupported(body)
    penalties = {
        key: value
        for key in ("frequency_penalty", "presence_penalty")
        if (value := _number(body, key, -2.0, 2.0))
    }
    return ChatRequest(
        model=model.strip(),
        messages=messages,
        system_prompt=system,
        stream=stream,
        include_usage=include_usage,
        tools=_tools(body.get("tools")),
        tool_choice=_tool_choice(body.get("tool_choice")),
        parallel_tool_calls=parallel,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        seed=seed,
        stop=_stop(body.get("stop")),
        user=user,
        response_format=_response_format(body.get("response_format")),
        thinking=_reasoning_effort(body.get("reasoning_effort")),
        penalties=penalties,
    )


_EFFORTS: dict[str, ThinkingLevel] = {
    "none": "off",
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
}

# Fields the gateway cannot honour: set to anything but their default, they are a 400 rather
# than an answer that silently lacks what was asked for.
_UNSUPPORTED: dict[str, str] = {
    "logprobs": "token log-probabilities are not returned",
    "top_logprobs": "token log-probabilities are not returned",
    "logit_bias": "token biases cannot be applied across vendors",
    "audio": "audio output is not supported",
    "prediction": "predicted outputs are not supported",
}


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for key, why in _UNSUPPORTED.items():
        value = body.get(key)
        if value not in (None, False, 0, {}):
            raise bad_request(f"`{key}` is not supported here: {why}. Remove it.", key)
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise bad_request(
            f'Only text output is supported: `modalities` must be ["text"], got {modalities!r}.',
            "modalities",
        )


def _reasoning_effort(value: Any) -> ThinkingLevel | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in _EFFORTS:
        raise bad_request(
            f"`reasoning_effort` must be one of {', '.join(_EFFORTS)}, got {value!r}.",
            "reasoning_effort",
        )
    return _EFFORTS[value]


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value) and len(value) <= 4:
        return list(value)
    raise bad_request(f"`stop` must be a string or a list of up to 4 strings, got {value!r}.")


def _tool_choice(value: Any) -> Any:
    """``tool_choice`` as the client sent it, once it is a shape every provider can read."""
    try:
        client_tool_choice(value)
    except ValueError as exc:
        raise bad_request(str(exc), "tool_choice") from None
    return value


def _tools(value: Any) -> list[ToolDefinition]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request("`tools` must be a list of function tools.", "tools")
    tools = []
    for i, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(function, dict)
        ):
            raise bad_request(
                f'`tools[{i}]` must be {{"type": "function", "function": {{"name": …}}}}.', "tools"
            )
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request(f"`tools[{i}].function.name` is required.", "tools")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise bad_request(
                f"`tools[{i}].function.parameters` must be a JSON Schema object, got "
                f"{_shown(parameters)}.",
                "tools",
            )
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise bad_request(f"`tools[{i}].function.description` must be a string.", "tools")
        tools.append(
            ToolDefinition(
                name=name,
                description=description or "",
                parameters=parameters or {"type": "object", "properties": {}},
            )
        )
    return tools


def _response_format(value: Any) -> ResponseFormat | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat(type="json_object", strict=False)
    if kind == "json_schema" and isinstance(value.get("json_schema"), dict):
        spec = value["json_schema"]
        if not isinstance(spec.get("schema"), dict | None):
            raise bad_request(
                "`response_format.json_schema.schema` must be a JSON Schema object, got "
                f"{_shown(spec.get('schema'))}.",
                "response_format",
            )
        return ResponseFormat(
            type="json_schema",
            name=str(spec.get("name") or "response"),
            schema=spec.get("schema"),
            strict=bool(spec.get("strict", False)),
        )
    raise bad_request(
        '`response_format` must be {"type": "text"}, {"type": "json_object"} or '
        '{"type": "json_schema", "json_schema": {"name": …, "schema": {…}}}.',
        "response_format",
    )


def _shown(value: Any) -> str:
    """A client's value in an error message, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _arguments_text(value: Any, where: str) -> str:
    """A tool call's ``arguments`` as JSON text: OpenAI sends a string; an object (some clients
    send one) is serialised as JSON, never as a Python repr."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value or "{}"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    raise bad_request(
        f"{where}.function.arguments must be a JSON string (or an object), got {_shown(value)}.",
        "messages",
    )


def _text_of(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            else:
                raise bad_request(f"{where}: only text parts are accepted here.", "messages")
        return "".join(parts)
    raise bad_request(f"{where}: `content` must be a string or a list of parts.", "messages")


def _user_content(content: Any, where: str) -> list[TextContent | ImageContent]:
    if isinstance(content, str):
        return [TextContent(text=content)]
    if not isinstance(content, list):
        raise bad_request(f"{where}: `content` must be a string or a list of parts.", "messages")
    out: list[TextContent | ImageContent] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            out.append(TextContent(text=str(part.get("text", ""))))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            if not isinstance(url, str):
                raise bad_request(
                    f'{where}: an image part is {{"type": "image_url", "image_url": {{"url": '
                    '"data:<mime>;base64,…"}}.',
                    "messages",
                )
            head, _, data = url.partition(",")
            if not url.startswith("data:") or ";base64" not in head:
                raise bad_request(
                    f"{where}: images must be `data:<mime>;base64,…` URLs.", "messages"
                )
            out.append(ImageContent(data=data, mime_type=head[5:].split(";")[0]))
        else:
            raise bad_request(f"{where}: unknown content part {kind!r}.", "messages")
    return out


def _messages(raw: list[Any]) -> tuple[str | None, list[Message]]:
    system: list[str] = []
    messages: list[Message] = []
    names: dict[str, str] = {}  # tool call id → tool name
    for i, item in enumerate(raw):
        where = f"messages[{i}]"
        role = item.get("role") if isinstance(item, dict) else None
        if role in ("system", "developer"):
            system.append(_text_of(item.get("content"), where))
        elif role == "user":
            messages.append(UserMessage(content=list(_user_content(item.get("content"), where))))
        elif role == "assistant":
            content: list[Any] = []
            text = _text_of(item.get("content"), where)
            if text:
                content.append(TextContent(text=text))
            calls = item.get("tool_calls") or []
            if not isinstance(calls, list):
                raise bad_request(f"{where}.tool_calls must be a list of tool calls.", "messages")
            for j, call in enumerate(calls):
                function = call.get("function") if isinstance(call, dict) else None
                call_id = call.get("id") if isinstance(call, dict) else None
                if (
                    not isinstance(function, dict)
                    or not isinstance(function.get("name"), str)
                    or not function["name"]
                    or not isinstance(call_id, str)
                    or not call_id
                ):
                    raise bad_request(
                        f'{where}.tool_calls[{j}] must be {{"id": "…", "type": "function", '
                        '"function": {"name": "…", "arguments": "…"}}.',
                        "messages",
                    )
                raw_args = _arguments_text(function.get("arguments"), f"{where}.tool_calls[{j}]")
                try:
                    arguments = json.loads(raw_args)
                except json.JSONDecodeError:
                    arguments = {}  # the model wrote them so; they are passed on as written
                name = function["name"]
                names[call_id] = name
                content.append(
                    ToolCall(
                        id=call_id,
                        name=name,
                        arguments=arguments if isinstance(arguments, dict) else {},
                        raw_arguments=raw_args,
                    )
                )
            messages.append(AssistantMessage(content=content))
        elif role == "tool":
            call_id = item.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in names:
                raise bad_request(
                    f"{where}: `tool_call_id` {call_id!r} answers no earlier assistant tool call.",
                    "messages",
                )
            text = _text_of(item.get("content"), where)
            messages.append(
                ToolResultMessage(
                    tool_call_id=call_id, tool_name=names[call_id], content=[TextContent(text=text)]
                )
            )
        else:
            raise bad_request(
                f"{where}: unknown role {role!r}; use system, developer, user, assistant or tool.",
                "messages",
            )
    return ("\n\n".join(system) if system else None), messages


# --------------------------------------------------------------------------- responses


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage_dict(usage: Usage) -> dict[str, Any]:
    prompt = usage.input + usage.cache_read + usage.cache_write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output,
        "total_tokens": prompt + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
    }


def finish_reason(message: AssistantMessage | None, truncated: bool = False) -> str:
    if truncated:
        return "stop"
    if message is None:
        return "stop"
    if message.tool_calls:
        return "tool_calls"
    return {"length": "length", "tool_use": "tool_calls"}.get(message.stop_reason, "stop")


def tool_calls_dicts(message: AssistantMessage | None) -> list[dict[str, Any]]:
    if message is None:
        return []
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": call.raw_arguments
                if call.raw_arguments is not None
                else json.dumps(call.arguments),
            },
        }
        for call in message.tool_calls
    ]


def completion(
    completion_id: str,
    model: str,
    text: str,
    usage: Usage,
    *,
    finish: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
    phi: dict[str, Any] | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    elif message["content"] is None:
        message["content"] = ""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage_dict(usage),
    }
    if phi is not None:
        body["phi"] = phi
    return body


def chunk(
    completion_id: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None,
    *,
    finish: str | None = None,
    usage: Usage | None = None,
    phi: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": (
            []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
        ),
    }
    if usage is not None:
        body["usage"] = usage_dict(usage)
    if phi is not None:
        body["phi"] = phi
    return body


def delta_frames(completion_id: str, model: str, created: int) -> Callable[[dict[str, Any]], str]:
    """``delta → "data: {chunk}\\n\\n"``: the SSE frame of a :func:`chunk` with that delta and no
    finish reason, the fields every chunk of a stream repeats serialised once (a passthrough
    sends one frame per upstream chunk)."""
    head = (
        f'data: {{"id": {json.dumps(completion_id)}, "object": "chat.completion.chunk", '
        f'"created": {int(created)}, "model": {json.dumps(model)}, '
        '"choices": [{"index": 0, "delta": '
    )
    tail = ', "finish_reason": null, "logprobs": null}]}\n\n'
    return lambda delta: head + json.dumps(delta) + tail


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """``text`` up to the first stop sequence (and whether one was found)."""
    cut = min((i for s in stop if s and (i := text.find(s)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class StopCutter:
    """Applies ``stop`` sequences to streamed text: :meth:`feed` returns what may be sent now
    (holding back a tail that could begin a stop sequence) and whether a stop was reached;
    :meth:`flush` returns the held-back tail at the end of the stream."""

    def __init__(self, stop: list[str]) -> None:
        self.stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self.stop), default=1) - 1
        self._pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if not self.stop:
            return text
        if self.stopped:
            return ""
        pending = self._pending + text
        cut, found = cut_at_stop(pending, self.stop)
        if found:
            self.stopped, self._pending = True, ""
            return cut
        keep = min(self._hold, len(pending))
        self._pending = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep]

    def flush(self) -> str:
        rest, self._pending = self._pending, ""
        return "" if self.stopped else rest
