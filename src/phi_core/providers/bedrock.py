"""AWS Bedrock Converse stream through ``boto3`` (``pip install 'phi-core[bedrock]'``).

boto3 is blocking, so each call runs the ``converse_stream`` request and its event-stream
iteration in its own worker thread, which hands events to the event loop through an
``asyncio.Queue``; the loop never blocks. When the caller stops (cancellation, a missed deadline,
an error, or simply not reading further) the worker is told to stop and the socket is shut down
for reading, which ends the thread's blocking read at once; the worker then closes the HTTP stream
and exits (:class:`_StreamLink`).

Credentials come from the standard AWS chain (env, profile, role), or from ``api_key`` written
``ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]``. The region is ``compat["region"]``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, or ``us-east-1``. botocore's retries are off. SigV4 signing
is botocore's own (phi-core sent a bare bearer header). Tool-use input deltas are accumulated
(phi-core lost them). Structured output uses a forced ``respond_json`` tool on every model that
supports tools. Thinking (Anthropic models) goes in ``additionalModelRequestFields``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import threading
from collections.abc import AsyncIterator
from typing import Any

try:
    import boto3
    import botocore.config
    import botocore.exceptions
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    from ..errors import MissingExtraError

    raise MissingExtraError("AWS Bedrock models", "bedrock") from exc

from .._logging import get_logger
from ..errors import AuthError, ProviderError, register_secret
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
    classify_error,
    client_tool_choice,
    network_error,
    stop_sequences,
    thinking_as_text,
    unchained,
)
from .anthropic import JSON_TOOL, thinking_budget, thinking_max_tokens
from .base import ModelConfig, StreamDone, StreamEvent, StreamRequest, cache_targets

__all__ = ["BedrockProvider", "build_converse_params"]

logger = get_logger("phi_core.providers")

_STOP: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_use",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "error",
    "content_filtered": "error",
}
_AUTH_HINT = (
    "check the AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or an "
    "api_key written ACCESS_KEY_ID:SECRET_ACCESS_KEY; and the model access granted to them"
)
_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}


class BedrockProvider:
    """Streams ``converse_stream``; one boto3 client per endpoint, region and credentials."""

    def __init__(self, model: ModelConfig) -> None:
        self.name = model.provider
        region = (
            model.compat.get("region")
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or "us-east-1"
        )
        kwargs: dict[str, Any] = {"region_name": str(region)}
        key = model.api_key_value()
        if key:
            parts = key.split(":")
            if len(parts) not in (2, 3):
                raise AuthError(
                    "Bedrock api_key must be `ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]`; "
                    "leave it unset to use the AWS credential chain.",
                    provider=model.provider,
                    model=model.id,
                )
            for part in parts:
                register_secret(part)
            kwargs["aws_access_key_id"] = parts[0]
            kwargs["aws_secret_access_key"] = parts[1]
            if len(parts) == 3:
                kwargs["aws_session_token"] = parts[2]
        self.region = str(region)
        self.base_url = model.base_url
        self._client = boto3.session.Session().client(
            "bedrock-runtime",
            endpoint_url=model.base_url,
            config=botocore.config.Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                read_timeout=600,
                connect_timeout=15,
                max_pool_connections=64,
            ),
            **kwargs,
        )

    def __repr__(self) -> str:
        return f"BedrockProvider(name={self.name!r}, region={self.region!r})"

    def output_ceiling(self, request: StreamRequest) -> int:
        """The output limit this provider sends for ``request`` (Claude's thinking may raise the
        model's)."""
        return thinking_max_tokens(request, _thinking_budget(request))

    async def stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        model = request.model
        params = build_converse_params(request)
        json_mode = request.response_format is not None
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()
        link = _StreamLink()

        def post(kind: str, payload: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, payload))
            except RuntimeError:  # the loop is gone: nobody is listening any more
                stop.set()

        def worker() -> None:
            events: Any = None
            try:
                response = self._client.converse_stream(**params)
                events = response["stream"]
                if link.opened(events):
                    for event in events:
                        if stop.is_set():
                            break
                        post("event", event)
                    post("end", None)
            except BaseException as exc:  # handed to the event loop, raised there
                post("error", exc)
            finally:
                # The worker closes what it read from, never the event loop: closing waits for
                # the read in progress, which only this thread can end (see _StreamLink).
                link.finished()
                if events is not None:
                    with contextlib.suppress(Exception):
                        events.close()

        thread = threading.Thread(target=worker, name=f"bedrock-{model.id}", daemon=True)
        thread.start()
        builder = MessageBuilder(model.provider, model.id)
        json_blocks: set[int] = set()
        usage = Usage()
        stop_reason: str | None = None
        try:
            while True:
                kind, payload = await queue.get()
                if kind == "end":
                    break
                if kind == "error":
                    mapped = _map_error(payload, model)
                    if mapped is None:
                        raise payload
                    raise unchained(mapped, payload)  # not chained: its request holds the key
                if "contentBlockDelta" in payload:
                    body = payload["contentBlockDelta"]
                    index = body.get("contentBlockIndex", 0)
                    delta = body.get("delta", {})
                    if "text" in delta:
                        yield builder.text(index, delta["text"])
                    elif "toolUse" in delta:
                        partial = delta["toolUse"].get("input", "")
                        if index in json_blocks:
                            yield builder.text(index, partial)
                        else:
                            yield builder.tool_call(index, arguments=partial)
                    elif "reasoningContent" in delta:
                        reasoning = delta["reasoningContent"]
                        redacted = reasoning.get("redactedContent")
                        yield builder.thinking(
                            index,
                            reasoning.get("text", ""),
                            reasoning.get("signature")
                            or (base64.b64encode(redacted).decode() if redacted else None),
                            redacted=bool(redacted),
                        )
                elif "contentBlockStart" in payload:
                    body = payload["contentBlockStart"]
                    tool = body.get("start", {}).get("toolUse")
                    if tool is not None:
                        index = body.get("contentBlockIndex", 0)
                        if json_mode and tool.get("name") == JSON_TOOL:
                            json_blocks.add(index)
                        else:
                            yield builder.tool_call(
                                index, id=tool.get("toolUseId"), name=tool.get("name")
                            )
                elif "messageStop" in payload:
                    stop_reason = payload["messageStop"].get("stopReason", "end_turn")
                elif "metadata" in payload:
                    usage = _usage(payload["metadata"].get("usage", {}))
        finally:
            # Never blocks: wakes the worker's read; the worker closes the stream and exits.
            stop.set()
            link.abandon()
        if stop_reason is None:
            raise network_error(
                model.provider, model.id, EOFError("the stream ended before messageStop")
            )
        reason = _STOP.get(stop_reason, "stop")
        if json_blocks and reason == "tool_use" and not builder.has_tool_calls:
            reason = "stop"
        yield StreamDone(builder.finish(reason, usage))


class _StreamLink:
    """The event stream a worker thread reads, shared with the event loop that may abandon it.

    Closing a botocore event stream (urllib3's ``HTTPResponse.close``) takes the lock of the
    socket's buffered reader, which a worker blocked in ``readinto`` holds until the upstream
    sends data again or botocore's ``read_timeout`` (600 s) ends the read. Done on the event loop
    (a cancel, a missed deadline), that froze every coroutine for as long. So the loop only shuts
    the socket down for reading — one system call that returns at once and makes the blocked read
    return — and the worker, its read ended, closes the stream itself and exits: the loop never
    waits, and no thread is left behind. The lock orders the two sides: the loop never touches a
    stream the worker has begun closing, and a stream that opens after the caller left is closed
    unread. A worker still waiting for the response headers when the caller leaves (nothing to
    shut down yet) closes its stream as soon as they arrive, at the latest after botocore's
    ``connect_timeout``/``read_timeout``.
    """

    __slots__ = ("_abandoned", "_events", "_finished", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: Any = None
        self._abandoned = False
        self._finished = False

    def opened(self, events: Any) -> bool:
        """The worker is about to read ``events``; ``False``: the caller has already left (the
        worker closes them unread)."""
        with self._lock:
            if self._abandoned:
                return False
            self._events = events
            return True

    def finished(self) -> None:
        """The worker reads no more (it closes the stream next)."""
        with self._lock:
            self._finished = True

    def abandon(self) -> None:
        """The caller stops (on the event loop): wake the worker's read in progress; never
        blocks."""
        with self._lock:
            self._abandoned = True
            if self._events is not None and not self._finished:
                _wake_reader(self._events)


def _wake_reader(events: Any) -> None:
    """Make a read blocked on ``events``' socket (in another thread) return now, by shutting the
    socket down for reading; closing it is left to the reading thread."""
    raw = getattr(events, "_raw_stream", None)  # botocore's urllib3 HTTPResponse
    shutdown = getattr(raw, "shutdown", None)  # urllib3 >= 2.3, made for this very use
    if callable(shutdown):
        try:
            shutdown()
            return
        except Exception as exc:  # no socket left: try it ourselves below
            logger.debug("bedrock: HTTPResponse.shutdown() failed (%s)", type(exc).__name__)
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RD)


def _usage(raw: dict[str, Any]) -> Usage:
    inp = int(raw.get("inputTokens", 0))
    out = int(raw.get("outputTokens", 0))
    read = int(raw.get("cacheReadInputTokens", 0))
    write = int(raw.get("cacheWriteInputTokens", 0))
    return Usage(
        input=inp,
        output=out,
        cache_read=read,
        cache_write=write,
        total=int(raw.get("totalTokens", 0)) or inp + out + read + write,
    )


def _map_error(exc: BaseException, model: ModelConfig) -> ProviderError | None:
    """The one place botocore exceptions become classified errors."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return AuthError(
            f"{model.spec}: no AWS credentials found. Set AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or pass api_key='ACCESS:SECRET'.",
            provider=model.provider,
            model=model.id,
        )
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        status = meta.get("HTTPStatusCode")
        code = str(error.get("Code", ""))
        if isinstance(exc, botocore.exceptions.EventStreamError):
            status = None  # an exception event inside a 200 stream
        return classify_error(
            status=status if isinstance(status, int) else None,
            message=str(error.get("Message") or exc),
            provider=model.provider,
            model=model.id,
            headers=meta.get("HTTPHeaders"),
            error_type=code,
            auth_hint=_AUTH_HINT,
        )
    if isinstance(exc, (botocore.exceptions.BotoCoreError, *TRANSPORT_ERRORS)):
        return network_error(model.provider, model.id, exc)
    return None


def _tool_choice(value: Any) -> dict[str, Any] | None:
    """A caller's OpenAI-style ``tool_choice`` as Converse's ``toolChoice``. Converse cannot say
    "none" (nor switch parallel calls off): :func:`build_converse_params` then leaves the tools
    out, unless the conversation already holds tool calls (Converse requires them declared)."""
    chosen = client_tool_choice(value)
    if chosen is None or chosen[0] in ("auto", "none"):
        return None
    mode, name = chosen
    return {"tool": {"name": name}} if mode == "tool" else {"any": {}}


def _has_tool_blocks(messages: list[dict[str, Any]]) -> bool:
    return any(
        "toolUse" in block or "toolResult" in block
        for message in messages
        for block in message.get("content", ())
    )


def _thinking_budget(request: StreamRequest) -> int | None:
    """Claude's thinking budget on Bedrock (other models on Converse take no thinking here)."""
    return thinking_budget(request) if "anthropic." in request.model.id else None


def build_converse_params(request: StreamRequest) -> dict[str, Any]:
    """The keyword arguments of ``converse_stream`` for ``request``."""
    model = request.model
    messages = _messages(request)
    params: dict[str, Any] = {"modelId": model.id, "messages": messages}
    system: list[dict[str, Any]] = []
    if request.system_prompt:
        system.append({"text": request.system_prompt})
    budget = _thinking_budget(request)
    inference: dict[str, Any] = {"maxTokens": thinking_max_tokens(request, budget)}
    thinking = budget is not None
    tools: list[dict[str, Any]] = [
        {
            "toolSpec": {
                "name": t.name,
                "description": t.description or t.name,
                "inputSchema": {"json": t.parameters},
            }
        }
        for t in request.tools
    ]
    chosen = client_tool_choice(request.extra.get("tool_choice"))
    if chosen is not None and chosen[0] == "none" and not _has_tool_blocks(messages):
        tools = []  # "none" in the only way Converse can say it
    tool_choice = _tool_choice(request.extra.get("tool_choice"))
    fmt = request.response_format
    if fmt is not None:
        tools.append(
            {
                "toolSpec": {
                    "name": JSON_TOOL,
                    "description": f"Respond with the {fmt.name} as a JSON object.",
                    "inputSchema": {"json": fmt.schema_ or {"type": "object"}},
                }
            }
        )
        if thinking:
            system.append({"text": f"Give your final answer by calling the `{JSON_TOOL}` tool."})
        else:
            tool_choice = {"tool": {"name": JSON_TOOL}}
    if cache_targets(request.cache)[0] and "anthropic." in model.id and system:
        system.append({"cachePoint": {"type": "default"}})
    if system:
        params["system"] = system
    if tools:
        params["toolConfig"] = {"tools": tools}
        if tool_choice:
            params["toolConfig"]["toolChoice"] = tool_choice
    if budget is not None:
        params["additionalModelRequestFields"] = {
            "thinking": {"type": "enabled", "budget_tokens": budget}
        }
    else:
        temperature = request.temperature if request.temperature is not None else model.temperature
        top_p = request.top_p if request.top_p is not None else model.top_p
        if temperature is not None:
            inference["temperature"] = temperature
        if top_p is not None:
            inference["topP"] = top_p
    stop = stop_sequences(request.extra)
    if stop:
        inference["stopSequences"] = stop
    params["inferenceConfig"] = inference
    return params


def _image(block: ImageContent) -> dict[str, Any]:
    return {
        "image": {
            "format": _FORMATS.get(block.mime_type, "png"),
            "source": {"bytes": base64.b64decode(block.data)},
        }
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
                    parts.append({"text": block.text})
                elif isinstance(block, ImageContent):
                    parts.append(_image(block))
            add("user", parts)
        elif isinstance(message, AssistantMessage):
            reply: list[dict[str, Any]] = []
            for content in message.content:
                if isinstance(content, TextContent) and content.text:
                    reply.append({"text": content.text})
                elif isinstance(content, ThinkingContent):
                    if message.provider == own and content.signature and not content.redacted:
                        reply.append(
                            {
                                "reasoningContent": {
                                    "reasoningText": {
                                        "text": content.thinking,
                                        "signature": content.signature,
                                    }
                                }
                            }
                        )
                    elif content.thinking and not content.redacted:
                        reply.append({"text": thinking_as_text(content)})
                elif isinstance(content, ToolCall):
                    reply.append(
                        {
                            "toolUse": {
                                "toolUseId": content.id,
                                "name": content.name,
                                "input": content.arguments,
                            }
                        }
                    )
            add("assistant", reply)
        elif isinstance(message, ToolResultMessage):
            inner: list[dict[str, Any]] = []
            for block in message.content:
                if isinstance(block, TextContent):
                    inner.append({"text": block.text or "(empty)"})
                elif isinstance(block, ImageContent):
                    inner.append(_image(block))
            result: dict[str, Any] = {
                "toolUseId": message.tool_call_id,
                "content": inner or [{"text": "(no output)"}],
            }
            if message.is_error:
                result["status"] = "error"
            add("user", [{"toolResult": result}])
    return out
