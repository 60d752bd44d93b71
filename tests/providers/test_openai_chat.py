from __future__ import annotations

import json
import logging
import socket

import pytest

from phi_core.errors import (
    AuthError,
    ContextOverflowError,
    MissingApiKeyError,
    NetworkError,
    RateLimitedError,
    ServerError,
)
from phi_core.providers.base import ModelConfig, StreamDone, StreamRequest
from phi_core.providers.openai_chat import OpenAIChatProvider
from phi_core.providers.registry import get_provider, resolve_model
from phi_core.providers.retry import RetryPolicy, stream_with_retry
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
from .fakes.openai_wire import chat_stream, chunk, error_body, text_reply, usage_chunk
from .helpers import SleepRecorder, collect

KEY = "sk-test-SECRETKEY0123456789abcdef"


def model_for(server: FakeServer, provider: str = "openai", **kw: object) -> ModelConfig:
    return ModelConfig(
        provider=provider,
        id="gpt-4o-mini",
        base_url=f"{server.url}/v1",
        api_key=KEY,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def history() -> list[UserMessage | AssistantMessage | ToolResultMessage]:
    return [
        UserMessage.text("What is 2+3? Use the tool."),
        AssistantMessage(
            content=[
                ThinkingContent(thinking="I should call add.", signature="sig-1"),
                TextContent(text="Calling add."),
                ToolCall(id="call_a", name="add", arguments={"a": 2, "b": 3}),
            ],
            stop_reason="tool_use",
        ),
        ToolResultMessage(
            tool_call_id="call_a",
            tool_name="add",
            content=[TextContent(text="5"), ImageContent(data="aGk=", mime_type="image/png")],
        ),
        UserMessage.text("And now?"),
    ]


ADD_TOOL = ToolDefinition(
    name="add",
    description="Add two numbers",
    parameters={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
)


async def test_streams_reasoning_text_and_tool_call_deltas_in_order_and_assembles_the_message() -> (
    None
):
    frames = chat_stream(
        chunk({"role": "assistant", "content": None, "reasoning_content": "Think"}),
        chunk({"reasoning_content": "ing."}),
        chunk({"content": "The sum "}),
        chunk({"content": "is 5."}),
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "add", "arguments": "{\"a\": "}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1, \"b\": 2}"}}]}),
        chunk({}, "tool_calls"),
        usage_chunk(prompt=120, completion=40, cached=100, reasoning=12),
    )  # fmt: skip
    async with FakeServer([Stream(frames)]) as server:
        provider = OpenAIChatProvider(model_for(server))
        request = StreamRequest(model=model_for(server), messages=[UserMessage.text("hi")])
        deltas, message = await collect(provider, request)

    assert [type(d) for d in deltas] == [
        ThinkingDelta, ThinkingDelta, TextDelta, TextDelta, ToolCallDelta, ToolCallDelta,
    ]  # fmt: skip
    assert [d.index for d in deltas] == [0, 0, 1, 1, 2, 2]
    assert isinstance(deltas[4], ToolCallDelta) and deltas[4].name == "add"
    assert message.content == [
        ThinkingContent(thinking="Thinking."),
        TextContent(text="The sum is 5."),
        ToolCall(id="call_1", name="add", arguments={"a": 1, "b": 2}),
    ]
    assert message.stop_reason == "tool_use"
    assert (message.usage.input, message.usage.cache_read) == (20, 100)
    assert (message.usage.output, message.usage.reasoning, message.usage.total) == (40, 12, 160)
    assert message.provider == "openai" and message.model == "gpt-4o-mini"


async def test_sends_history_tools_format_and_usage_request_and_never_mutates_the_conversation() -> (
    None
):
    async with FakeServer([Stream(text_reply("ok"))]) as server:
        model = model_for(server, reasoning=True)
        messages = history()
        before = [m.model_dump() for m in messages]
        request = StreamRequest(
            model=model,
            messages=messages,
            system_prompt="Be brief.",
            tools=[ADD_TOOL],
            thinking="medium",
            max_tokens=256,
            temperature=0.2,
            response_format=ResponseFormat(schema={"type": "object"}, name="answer"),
        )
        await collect(OpenAIChatProvider(model), request)
        sent = server.requests[0]

    assert [m.model_dump() for m in messages] == before
    body = sent.json
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert body["model"] == "gpt-4o-mini"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_completion_tokens"] == 256 and body["temperature"] == 0.2
    assert body["reasoning_effort"] == "medium" and body["store"] is False
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
    }
    assert body["tools"] == [{"type": "function", "function": ADD_TOOL.model_dump()}]
    assert body["messages"] == [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "What is 2+3? Use the tool."},
        {
            "role": "assistant",
            "content": "[Reasoning] I should call add.\n\nCalling add.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "5"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}],
        },
        {"role": "user", "content": "And now?"},
    ]


@pytest.mark.parametrize(
    ("provider", "field", "value"),
    [("openrouter", "reasoning", {"effort": "high"}), ("ollama", "enable_thinking", True)],
)
async def test_vendor_thinking_settings_are_top_level_fields_of_the_body(
    provider: str, field: str, value: object
) -> None:
    async with FakeServer([Stream(text_reply("ok"))]) as server:
        model = model_for(server, provider=provider, reasoning=True)
        request = StreamRequest(model=model, messages=[UserMessage.text("hi")], thinking="high")
        await collect(OpenAIChatProvider(model), request)
        body = server.requests[0].json
    assert body[field] == value and "extra_body" not in body
    assert body["messages"] == [{"role": "user", "content": "hi"}]


async def test_mistral_preset_names_tool_results_and_inserts_an_assistant_turn_after_them() -> None:
    async with FakeServer([Stream(text_reply("ok"))]) as server:
        model = model_for(server, provider="mistral")
        msgs = [m for m in history() if not isinstance(m, UserMessage) or m.content[0].text != "x"]
        msgs[2] = ToolResultMessage(
            tool_call_id="call_a", tool_name="add", content=[TextContent(text="5")]
        )
        await collect(OpenAIChatProvider(model), StreamRequest(model=model, messages=msgs))
        body = server.requests[0].json
    assert "store" not in body and body["max_tokens"] == model.max_tokens
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    assert body["messages"][2]["name"] == "add"


async def test_tool_arguments_that_are_not_json_keep_the_raw_text() -> None:
    frames = chat_stream(
        chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                               "function": {"name": "add", "arguments": "{not json"}}]}),
        chunk({}, "tool_calls"),
    )  # fmt: skip
    async with FakeServer([Stream(frames)]) as server:
        model = model_for(server)
        _, message = await collect(
            OpenAIChatProvider(model), StreamRequest(model, [UserMessage.text("x")])
        )
    assert message.tool_calls == [
        ToolCall(id="c1", name="add", arguments={}, raw_arguments="{not json")
    ]


async def test_length_finish_maps_to_length_stop_reason() -> None:
    frames = chat_stream(chunk({"content": "cut"}), chunk({}, "length"))
    async with FakeServer([Stream(frames)]) as server:
        model = model_for(server)
        _, message = await collect(
            OpenAIChatProvider(model), StreamRequest(model, [UserMessage.text("x")])
        )
    assert message.stop_reason == "length" and message.text == "cut"


async def _retry_run(server: FakeServer, sleep: SleepRecorder, retries: int = 3) -> list[object]:
    model = model_for(server)
    request = StreamRequest(model, [UserMessage.text("x")])
    return [
        item
        async for item in stream_with_retry(
            OpenAIChatProvider(model), request, RetryPolicy(max_retries=retries), sleep=sleep
        )
    ]


async def test_429_with_retry_after_is_retried_after_that_delay() -> None:
    script = [
        Respond(429, error_body("Rate limit reached", "requests", "rate_limit_exceeded"),
                headers={"retry-after": "7"}),
        Respond(429, error_body("Rate limit reached"), headers={"retry-after-ms": "1500"}),
        Stream(text_reply("finally")),
    ]  # fmt: skip
    sleep = SleepRecorder()
    async with FakeServer(script) as server:
        items = await _retry_run(server, sleep)
    assert sleep.delays == [7.0, 1.5]
    assert len(server.requests) == 3
    assert isinstance(items[-1], StreamDone) and items[-1].message.text == "finally"


@pytest.mark.parametrize("status", [500, 503, 529])
async def test_server_errors_are_retried(status: int) -> None:
    sleep = SleepRecorder()
    script = [Respond(status, error_body("boom", "server_error")), Stream(text_reply("ok"))]
    async with FakeServer(script) as server:
        items = await _retry_run(server, sleep)
    assert len(server.requests) == 2 and len(sleep.delays) == 1
    assert isinstance(items[-1], StreamDone)


async def test_401_is_not_retried_and_says_to_check_the_key() -> None:
    sleep = SleepRecorder()
    script = [
        Respond(401, error_body(f"Incorrect API key provided: {KEY}", code="invalid_api_key"))
    ]
    async with FakeServer(script) as server:
        with pytest.raises(AuthError) as info:
            await _retry_run(server, sleep)
    assert len(server.requests) == 1 and sleep.delays == []
    assert "check the API key" in str(info.value) and "401" in str(info.value)
    assert KEY not in str(info.value) and KEY not in repr(info.value)
    assert KEY not in (info.value.body or "")


async def test_context_overflow_is_classified_and_not_retried() -> None:
    body = error_body(
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
        code="context_length_exceeded",
    )
    async with FakeServer([Respond(400, body)]) as server:
        with pytest.raises(ContextOverflowError):
            await _retry_run(server, SleepRecorder())
    assert len(server.requests) == 1


async def test_connection_dropped_mid_stream_is_a_network_error_and_not_retried() -> None:
    frames = chat_stream(chunk({"content": "Hel"}), chunk({"content": "lo"}), chunk({}, "stop"))
    sleep = SleepRecorder()
    async with FakeServer([Stream(frames, drop_after=2), Stream(text_reply("again"))]) as server:
        received: list[object] = []
        model = model_for(server)
        with pytest.raises(NetworkError):
            async for item in stream_with_retry(
                OpenAIChatProvider(model),
                StreamRequest(model, [UserMessage.text("x")]),
                sleep=sleep,
            ):
                received.append(item)
    assert [d.text for d in received if isinstance(d, TextDelta)] == ["Hel", "lo"]
    assert not any(isinstance(d, StreamDone) for d in received)
    assert len(server.requests) == 1 and sleep.delays == []


async def test_malformed_event_after_first_delta_is_a_clean_error_without_retry() -> None:
    frames = [*chat_stream(chunk({"content": "Hi"}))[:1], b"data: {this is not json\n\n"]
    sleep = SleepRecorder()
    async with FakeServer([Stream(frames), Stream(text_reply("again"))]) as server:
        model = model_for(server)
        with pytest.raises(ServerError, match="malformed"):
            async for _ in stream_with_retry(
                OpenAIChatProvider(model),
                StreamRequest(model, [UserMessage.text("x")]),
                sleep=sleep,
            ):
                pass
    assert len(server.requests) == 1


async def test_error_event_inside_a_stream_is_classified() -> None:
    frames = [
        b'data: {"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}\n\n'
    ]
    async with FakeServer([Stream(frames)]) as server:
        model = model_for(server)
        with pytest.raises(RateLimitedError):
            await collect(OpenAIChatProvider(model), StreamRequest(model, [UserMessage.text("x")]))


async def test_a_refused_connection_is_a_network_error_saying_so_with_host_and_port() -> None:
    with socket.socket() as probe:  # a port nothing listens on: bound, then closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = ModelConfig(
        provider="openai-compat", id="m1", base_url=f"http://127.0.0.1:{port}/v1",
        api_key=KEY,  # type: ignore[arg-type]
    )  # fmt: skip
    with pytest.raises(NetworkError) as caught:
        async for _ in stream_with_retry(
            OpenAIChatProvider(model),
            StreamRequest(model, [UserMessage.text("x")]),
            RetryPolicy(max_retries=0),
        ):
            pass
    message = str(caught.value)
    assert f"the connection to 127.0.0.1:{port} was refused" in message
    assert "timed out" not in message.lower()


async def test_stream_ending_without_finish_reason_is_a_network_error() -> None:
    frames = chat_stream(chunk({"content": "Hel"}), done=False)
    async with FakeServer([Stream(frames)]) as server:
        model = model_for(server)
        with pytest.raises(NetworkError, match="ended before"):
            await collect(OpenAIChatProvider(model), StreamRequest(model, [UserMessage.text("x")]))


def test_missing_key_names_the_environment_variable_when_the_provider_is_built() -> None:
    model = resolve_model("groq:llama-3.1-8b-instant")  # parsing needs no key
    with pytest.raises(MissingApiKeyError, match="GROQ_API_KEY"):
        get_provider(model)


async def test_the_key_never_appears_in_reprs_errors_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    script = [Respond(500, error_body(f"echo {KEY}")), Respond(401, error_body(f"bad key {KEY}"))]
    async with FakeServer(script) as server:
        model = model_for(server)
        provider = OpenAIChatProvider(model)
        with pytest.raises(AuthError) as info:
            async for _ in stream_with_retry(provider, StreamRequest(model, [UserMessage.text("x")]),
                                             sleep=SleepRecorder()):  # fmt: skip
                pass
    texts = [repr(model), str(model), model.model_dump_json(), repr(provider), str(info.value),
             repr(info.value), json.dumps(info.value.body), caplog.text]  # fmt: skip
    assert all(KEY not in t for t in texts)
    assert "retrying" in caplog.text
