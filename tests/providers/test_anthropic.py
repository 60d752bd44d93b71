from __future__ import annotations

import pytest

from phi_core.errors import (
    AuthError,
    ContextOverflowError,
    NetworkError,
    OverloadedError,
    RateLimitedError,
)
from phi_core.providers.anthropic import AnthropicProvider
from phi_core.providers.base import ModelConfig, StreamDone, StreamRequest
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

from .fakes import FakeServer, Respond, Stream, sse
from .fakes.anthropic_wire import (
    MESSAGE_STOP,
    PING,
    block_delta,
    block_start,
    block_stop,
    error,
    message_delta,
    message_start,
    text_reply,
)
from .helpers import SleepRecorder, collect

KEY = "sk-ant-api03-SECRETKEYabcdefghijklmnop"
TOOL = ToolDefinition(
    name="add", description="Add", parameters={"type": "object", "properties": {}}
)


def model_for(server: FakeServer) -> ModelConfig:
    return ModelConfig(
        provider="anthropic",
        id="claude-haiku-4-5",
        api="anthropic_messages",
        base_url=server.url,
        api_key=KEY,  # type: ignore[arg-type]
        max_tokens=1000,
        headers={"x-team": "phi"},
    )


async def test_streams_thinking_with_signature_text_and_tool_use_and_reports_cache_usage() -> None:
    frames = sse([
        message_start(input_tokens=30, cache_read=1000, cache_write=200),
        PING,
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "Let me "}),
        block_delta(0, {"type": "thinking_delta", "thinking": "add."}),
        block_delta(0, {"type": "signature_delta", "signature": "SIG=="}),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        block_delta(1, {"type": "text_delta", "text": "Adding."}),
        block_stop(1),
        block_start(2, {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}),
        block_delta(2, {"type": "input_json_delta", "partial_json": "{\"a\": 1,"}),
        block_delta(2, {"type": "input_json_delta", "partial_json": " \"b\": 2}"}),
        block_stop(2),
        message_delta("tool_use", 42),
        MESSAGE_STOP,
    ])  # fmt: skip
    async with FakeServer([Stream(frames)]) as server:
        model = model_for(server)
        deltas, message = await collect(
            AnthropicProvider(model), StreamRequest(model, [UserMessage.text("hi")])
        )
    kinds = [type(d) for d in deltas]
    assert kinds == [ThinkingDelta] * 3 + [TextDelta] + [ToolCallDelta] * 3
    assert [d.index for d in deltas] == [0, 0, 0, 1, 2, 2, 2]
    assert message.content == [
        ThinkingContent(thinking="Let me add.", signature="SIG=="),
        TextContent(text="Adding."),
        ToolCall(id="toolu_1", name="add", arguments={"a": 1, "b": 2}),
    ]
    assert message.stop_reason == "tool_use"
    u = message.usage
    assert (u.input, u.output, u.cache_read, u.cache_write, u.total) == (30, 42, 1000, 200, 1272)


async def test_request_echoes_signatures_places_cache_markers_and_sets_a_thinking_budget() -> None:
    history = [
        UserMessage(content=[TextContent(text="Look:"), ImageContent(data="aGk=", mime_type="image/jpeg")]),
        AssistantMessage(
            provider="anthropic",
            content=[
                ThinkingContent(thinking="hmm", signature="SIG=="),
                ToolCall(id="toolu_1", name="add", arguments={"a": 1}),
            ],
            stop_reason="tool_use",
        ),
        ToolResultMessage(tool_call_id="toolu_1", tool_name="add", content=[TextContent(text="1")], is_error=True),
        AssistantMessage(provider="openai", content=[ThinkingContent(thinking="other vendor"), TextContent(text="ok")]),
        UserMessage.text("next"),
    ]  # fmt: skip
    async with FakeServer([Stream(text_reply("done"))]) as server:
        model = model_for(server)
        request = StreamRequest(model, history, system_prompt="Sys", tools=[TOOL], thinking="minimal",
                                temperature=0.5)  # fmt: skip
        _, message = await collect(AnthropicProvider(model), request)
        sent = server.requests[0]
    body = sent.json
    assert message.text == "done"
    auth = sent.headers.get("x-api-key") or sent.headers.get("authorization", "")
    assert sent.path == "/v1/messages" and auth.endswith(KEY)
    assert sent.headers["x-team"] == "phi"
    assert body["model"] == "claude-haiku-4-5" and body["stream"] is True
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["max_tokens"] == 2048  # raised above the budget
    assert "temperature" not in body  # not allowed together with thinking
    assert body["system"] == [
        {"type": "text", "text": "Sys", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"] == [{"name": "add", "description": "Add", "input_schema": TOOL.parameters,
                              "cache_control": {"type": "ephemeral"}}]  # fmt: skip
    assert body["messages"] == [
        {"role": "user", "content": [
            {"type": "text", "text": "Look:"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "aGk="}},
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "SIG=="},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "1"}],
             "is_error": True},
        ]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "[Reasoning] other vendor"}, {"type": "text", "text": "ok"},
        ]},
        {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": {"type": "ephemeral"}}]},
    ]  # fmt: skip
    assert history[-1].content[0].model_dump() == {"type": "text", "text": "next"}


async def test_structured_output_forces_the_json_tool_and_streams_its_input_as_text() -> None:
    frames = sse([
        message_start(),
        block_start(0, {"type": "tool_use", "id": "toolu_j", "name": "respond_json", "input": {}}),
        block_delta(0, {"type": "input_json_delta", "partial_json": "{\"answer\": "}),
        block_delta(0, {"type": "input_json_delta", "partial_json": "5}"}),
        block_stop(0), message_delta("tool_use", 9), MESSAGE_STOP,
    ])  # fmt: skip
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    async with FakeServer([Stream(frames)]) as server:
        model = model_for(server)
        request = StreamRequest(
            model,
            [UserMessage.text("2+3?")],
            response_format=ResponseFormat(schema=schema),
            cache=False,
        )
        deltas, message = await collect(AnthropicProvider(model), request)
        body = server.requests[0].json
    assert body["tool_choice"] == {"type": "tool", "name": "respond_json"}
    assert body["tools"][-1]["input_schema"] == schema and "cache_control" not in body["tools"][-1]
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert (
        message.text == '{"answer": 5}' and message.stop_reason == "stop" and not message.tool_calls
    )


async def test_overloaded_error_event_in_the_stream_is_retried_before_the_first_delta() -> None:
    frames = sse([message_start(), ("error", error("overloaded_error", "Overloaded"))])
    sleep = SleepRecorder()
    async with FakeServer([Stream(frames), Stream(text_reply("ok"))]) as server:
        model = model_for(server)
        items = [
            i
            async for i in stream_with_retry(
                AnthropicProvider(model), StreamRequest(model, [UserMessage.text("x")]), sleep=sleep
            )
        ]
    assert len(server.requests) == 2 and len(sleep.delays) == 1
    assert isinstance(items[-1], StreamDone) and items[-1].message.text == "ok"


async def test_529_overloaded_and_429_retry_after_are_retried() -> None:
    script = [
        Respond(529, error("overloaded_error", "Overloaded")),
        Respond(429, error("rate_limit_error", "slow down"), headers={"retry-after": "3"}),
        Stream(text_reply("ok")),
    ]
    sleep = SleepRecorder()
    async with FakeServer(script) as server:
        model = model_for(server)
        errors: list[type] = []
        items = [i async for i in stream_with_retry(
            AnthropicProvider(model), StreamRequest(model, [UserMessage.text("x")]), RetryPolicy(base_delay=0.25, jitter=0),
            sleep=sleep, on_retry=lambda n, e, d: errors.append(type(e)))]  # fmt: skip
    assert errors == [OverloadedError, RateLimitedError]
    assert sleep.delays == [0.25, 3.0]
    assert isinstance(items[-1], StreamDone)


async def test_401_is_an_auth_error_and_prompt_too_long_is_context_overflow() -> None:
    script = [
        Respond(401, error("authentication_error", "invalid x-api-key")),
        Respond(
            400,
            error("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
        ),
    ]
    async with FakeServer(script) as server:
        model = model_for(server)
        provider = AnthropicProvider(model)
        with pytest.raises(AuthError, match="check the API key"):
            await collect(provider, StreamRequest(model, [UserMessage.text("x")]))
        with pytest.raises(ContextOverflowError):
            await collect(provider, StreamRequest(model, [UserMessage.text("x")]))


async def test_dropped_stream_after_text_is_a_network_error_without_retry() -> None:
    sleep = SleepRecorder()
    async with FakeServer(
        [Stream(text_reply("partial"), drop_after=3), Stream(text_reply("x"))]
    ) as server:
        model = model_for(server)
        with pytest.raises(NetworkError):
            async for _ in stream_with_retry(
                AnthropicProvider(model), StreamRequest(model, [UserMessage.text("x")]), sleep=sleep
            ):
                pass
    assert len(server.requests) == 1 and sleep.delays == []


@pytest.mark.parametrize(
    ("level", "max_tokens", "budget", "sent_max"),
    [
        ("high", None, 16384, 17408),  # no cap on the request: the model's limit is raised
        ("high", 3000, 1976, 3000),  # a cap: thinking shrinks, 1024 left for the answer
        ("medium", 20000, 8192, 20000),  # room enough: the level's budget
        ("low", 1500, 1024, 1500),  # never under the API's minimum of 1024
        ("minimal", 1024, None, 1024),  # no room to think: none asked for, temperature sent
    ],
)
def test_a_request_max_tokens_caps_thinking_and_answer_together(
    level: str, max_tokens: int | None, budget: int | None, sent_max: int
) -> None:
    from phi_core.providers.anthropic import build_anthropic_params

    model = ModelConfig(
        provider="anthropic",
        id="claude-haiku-4-5",
        api="anthropic_messages",
        max_tokens=1000,
        api_key=KEY,  # type: ignore[arg-type]
    )
    request = StreamRequest(
        model, [UserMessage.text("hi")], thinking=level, max_tokens=max_tokens, temperature=0.3
    )  # type: ignore[arg-type]
    params = build_anthropic_params(request)
    assert params["max_tokens"] == sent_max  # what an ExecutionLimits cap sets is never raised
    # what the loop compares an ExecutionLimits cap with is what is sent
    assert AnthropicProvider(model).output_ceiling(request) == sent_max
    if budget is None:
        assert "thinking" not in params and params["temperature"] == 0.3
    else:
        assert params["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert budget < params["max_tokens"] and "temperature" not in params
