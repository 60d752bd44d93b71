from __future__ import annotations

import base64

import pytest

from phi_core.errors import AuthError, ContextOverflowError, NetworkError, RateLimitedError
from phi_core.providers.base import ModelConfig, StreamDone, StreamRequest
from phi_core.providers.google import GoogleProvider
from phi_core.providers.registry import resolve_model
from phi_core.providers.retry import stream_with_retry
from phi_core.types import (
    AssistantMessage,
    ImageContent,
    ResponseFormat,
    TextContent,
    TextDelta,
    ThinkingContent,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)

from .fakes import FakeServer, Respond, Stream
from .fakes.google_wire import gchunk, gemini_stream, gerror, gusage, text_reply
from .helpers import SleepRecorder, collect

KEY = "AIzaSyFAKE-SECRET-KEY-0123456789abcdef"


def model_for(server: FakeServer, provider: str = "google") -> ModelConfig:
    return resolve_model(f"{provider}:gemini-2.5-flash", base_url=server.url, api_key=KEY)


async def test_streams_thoughts_text_and_whole_function_calls_with_usage() -> None:
    sig = base64.b64encode(b"thought-sig").decode()
    frames = gemini_stream(
        gchunk([{"text": "Considering", "thought": True}]),
        gchunk([{"text": "It is ", }]),
        gchunk([{"text": "five."}, {"functionCall": {"name": "add", "args": {"a": 2, "b": 3}}, "thoughtSignature": sig}]),
        gchunk([], "STOP", gusage(prompt=100, candidates=20, cached=60, thoughts=7)),
    )  # fmt: skip
    async with FakeServer([Stream(frames)]) as server:
        model = model_for(server)
        deltas, message = await collect(
            GoogleProvider(model), StreamRequest(model, [UserMessage.text("x")])
        )
        sent = server.requests[0]
    assert sent.path.endswith("/models/gemini-2.5-flash:streamGenerateContent")
    assert sent.query["alt"] == ["sse"] and sent.headers["x-goog-api-key"] == KEY
    assert [type(d) for d in deltas] == [ThinkingDelta, TextDelta, TextDelta, ToolCallDelta]
    assert [d.index for d in deltas] == [0, 1, 1, 2]
    assert message.content[:2] == [
        ThinkingContent(thinking="Considering"),
        TextContent(text="It is five."),
    ]
    call = message.content[2]
    assert isinstance(call, ToolCall) and call.name == "add" and call.arguments == {"a": 2, "b": 3}
    assert call.signature == sig  # Gemini's thought signature of the call is kept
    assert message.stop_reason == "tool_use"
    u = message.usage
    assert (u.input, u.cache_read, u.output, u.reasoning, u.total) == (40, 60, 27, 7, 127)


async def test_request_drops_thinking_sends_function_responses_schema_and_thinking_budget() -> None:
    history = [
        UserMessage(content=[TextContent(text="see"), ImageContent(data=base64.b64encode(b"img").decode())]),
        AssistantMessage(content=[ThinkingContent(thinking="secret plan", signature="S"),
                                  ToolCall(id="fc_1", name="add", arguments={"a": 1})]),
        ToolResultMessage(tool_call_id="fc_1", tool_name="add", content=[TextContent(text="1")]),
        UserMessage.text("json"),
    ]  # fmt: skip
    async with FakeServer([Stream(text_reply('{"n": 1}'))]) as server:
        model = model_for(server)
        request = StreamRequest(model, history, system_prompt="Sys", thinking="low", temperature=0.1,
                                tools=[ToolDefinition(name="add", description="Add")],
                                response_format=ResponseFormat(schema={"type": "object"}))  # fmt: skip
        _, message = await collect(GoogleProvider(model), request)
        body = server.requests[0].json
    assert message.text == '{"n": 1}'
    assert body["systemInstruction"]["parts"][0]["text"] == "Sys"
    gen = body["generationConfig"]
    # google-genai writes this nested object with proto field names; the API accepts both forms.
    assert gen["thinkingConfig"] == {"thinking_budget": 1024, "include_thoughts": True}
    assert gen["responseMimeType"] == "application/json" and gen["responseJsonSchema"] == {
        "type": "object"
    }
    assert gen["temperature"] == 0.1
    assert body["tools"][0]["functionDeclarations"] == [
        {
            "name": "add",
            "description": "Add",
            "parameters_json_schema": {"type": "object", "properties": {}},
        }
    ]
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "see"}, {"inlineData": {"mime_type": "image/png", "data": "aW1n"}}]},
        {"role": "model", "parts": [{"functionCall": {"id": "fc_1", "name": "add", "args": {"a": 1}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "fc_1", "name": "add", "response": {"output": "1"}}}, {"text": "json"}]},
    ]  # fmt: skip
    assert "secret plan" not in str(body)
    assert isinstance(history[1].content[0], ThinkingContent)  # the stored conversation keeps it


async def test_vertex_express_mode_uses_the_vertex_path() -> None:
    async with FakeServer([Stream(text_reply("from vertex"))]) as server:
        model = model_for(server, provider="vertex")
        _, message = await collect(
            GoogleProvider(model), StreamRequest(model, [UserMessage.text("x")])
        )
        sent = server.requests[0]
    assert message.text == "from vertex"
    assert "publishers/google/models/gemini-2.5-flash:streamGenerateContent" in sent.path


async def test_429_with_retry_after_is_retried_and_401_is_auth() -> None:
    sleep = SleepRecorder()
    script = [
        Respond(
            429, gerror(429, "RESOURCE_EXHAUSTED", "Quota exceeded"), headers={"retry-after": "2"}
        ),
        Stream(text_reply("ok")),
        Respond(401, gerror(401, "UNAUTHENTICATED", "API key not valid")),
    ]
    async with FakeServer(script) as server:
        model = model_for(server)
        provider = GoogleProvider(model)
        errors: list[type] = []
        items = [i async for i in stream_with_retry(provider, StreamRequest(model, [UserMessage.text("x")]), sleep=sleep,
                                                    on_retry=lambda n, e, d: errors.append(type(e)))]  # fmt: skip
        assert errors == [RateLimitedError] and sleep.delays == [2.0]
        assert isinstance(items[-1], StreamDone)
        with pytest.raises(AuthError):
            async for _ in stream_with_retry(
                provider, StreamRequest(model, [UserMessage.text("x")]), sleep=sleep
            ):
                pass
    assert len(server.requests) == 3


async def test_context_overflow_is_classified() -> None:
    body = gerror(
        400,
        "INVALID_ARGUMENT",
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
    )
    async with FakeServer([Respond(400, body)]) as server:
        model = model_for(server)
        with pytest.raises(ContextOverflowError):
            await collect(GoogleProvider(model), StreamRequest(model, [UserMessage.text("x")]))


async def test_a_dropped_stream_is_an_error_never_a_partial_success() -> None:
    frames = gemini_stream(
        gchunk([{"text": "par"}]), gchunk([{"text": "tial"}]), gchunk([], "STOP")
    )
    async with FakeServer([Stream(frames, drop_after=2)]) as server:
        model = model_for(server)
        with pytest.raises(NetworkError):
            await collect(GoogleProvider(model), StreamRequest(model, [UserMessage.text("x")]))


async def test_a_function_call_signature_is_echoed_back_byte_for_byte() -> None:
    sig = base64.b64encode(b"\x00opaque-signature\xff").decode()
    history = [
        UserMessage.text("add"),
        AssistantMessage(
            content=[ToolCall(id="fc_9", name="add", arguments={"a": 1}, signature=sig)]
        ),
        ToolResultMessage(tool_call_id="fc_9", tool_name="add", content=[TextContent(text="1")]),
    ]
    async with FakeServer([Stream(text_reply("done"))]) as server:
        model = model_for(server)
        await collect(GoogleProvider(model), StreamRequest(model, history))
        body = server.requests[0].json
    model_part = body["contents"][1]["parts"][0]
    assert model_part["functionCall"]["name"] == "add"
    # google-genai writes bytes as URL-safe base64 on the wire.
    assert base64.urlsafe_b64decode(model_part["thoughtSignature"]) == b"\x00opaque-signature\xff"
