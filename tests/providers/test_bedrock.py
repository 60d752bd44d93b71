from __future__ import annotations

import asyncio

import pytest

from phi_core.errors import AuthError, ContextOverflowError, NetworkError, RateLimitedError
from phi_core.providers.base import ModelConfig, StreamDone, StreamRequest
from phi_core.providers.bedrock import BedrockProvider
from phi_core.providers.registry import resolve_model
from phi_core.providers.retry import stream_with_retry
from phi_core.types import (
    AssistantMessage,
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
from .fakes.bedrock_wire import CONTENT_TYPE, event, exception, text_reply
from .helpers import SleepRecorder, collect

MODEL_ID = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
SECRET = "wJalrFAKESECRETKEYbPxRfiCYEXAMPLEKEY"


def model_for(server: FakeServer) -> ModelConfig:
    return resolve_model(f"bedrock:{MODEL_ID}", base_url=server.url, api_key=f"AKIAFAKEACCESS:{SECRET}",
                         compat={"region": "us-west-2"})  # fmt: skip


def es(frames: list[bytes], drop_after: int | None = None) -> Stream:
    return Stream(frames, content_type=CONTENT_TYPE, drop_after=drop_after)


async def test_accumulates_tool_input_deltas_reasoning_and_text_with_usage() -> None:
    frames = [
        event("messageStart", {"role": "assistant"}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Need add."}}}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "SIG"}}}),
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "Adding."}}),
        event("contentBlockStart", {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tu_1", "name": "add"}}}),
        event("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"a\": 1, "}}}),
        event("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": "\"b\": 2}"}}}),
        event("contentBlockStop", {"contentBlockIndex": 2}),
        event("messageStop", {"stopReason": "tool_use"}),
        event("metadata", {"usage": {"inputTokens": 20, "outputTokens": 9, "totalTokens": 129,
                                     "cacheReadInputTokens": 100}, "metrics": {"latencyMs": 5}}),
    ]  # fmt: skip
    async with FakeServer([es(frames)]) as server:
        model = model_for(server)
        deltas, message = await collect(
            BedrockProvider(model), StreamRequest(model, [UserMessage.text("x")])
        )
        sent = server.requests[0]
    assert sent.path == f"/model/{MODEL_ID}/converse-stream".replace(
        ":", "%3A"
    ) or sent.path.endswith("/converse-stream")
    assert (
        "AWS4-HMAC-SHA256" in sent.headers["authorization"]
        and "us-west-2/bedrock" in sent.headers["authorization"]
    )
    assert [type(d) for d in deltas] == [
        ThinkingDelta,
        ThinkingDelta,
        TextDelta,
        ToolCallDelta,
        ToolCallDelta,
        ToolCallDelta,
    ]
    assert message.content == [
        ThinkingContent(thinking="Need add.", signature="SIG"),
        TextContent(text="Adding."),
        ToolCall(id="tu_1", name="add", arguments={"a": 1, "b": 2}),
    ]
    assert message.stop_reason == "tool_use"
    assert (
        message.usage.input,
        message.usage.output,
        message.usage.cache_read,
        message.usage.total,
    ) == (20, 9, 100, 129)


async def test_request_body_has_messages_tools_thinking_and_json_tool() -> None:
    history = [
        UserMessage.text("add"),
        AssistantMessage(provider="bedrock", content=[ThinkingContent(thinking="t", signature="S"),
                                                      ToolCall(id="tu_1", name="add", arguments={"a": 1})]),
        ToolResultMessage(tool_call_id="tu_1", tool_name="add", content=[TextContent(text="1")]),
    ]  # fmt: skip
    async with FakeServer([es(text_reply("ok")), es(text_reply('{"x": 1}'))]) as server:
        model = model_for(server)
        provider = BedrockProvider(model)
        await collect(provider, StreamRequest(model, history, system_prompt="Sys", thinking="low",
                                              tools=[ToolDefinition(name="add", description="Add")]))  # fmt: skip
        body = server.requests[0].json
        await collect(
            provider,
            StreamRequest(
                model,
                [UserMessage.text("j")],
                response_format=ResponseFormat(schema={"type": "object"}),
            ),
        )
        json_body = server.requests[1].json
    assert body["system"] == [{"text": "Sys"}, {"cachePoint": {"type": "default"}}]
    assert body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 2048}
    }
    assert body["inferenceConfig"]["maxTokens"] >= 3072
    assert body["toolConfig"]["tools"][0]["toolSpec"]["name"] == "add"
    assert body["messages"] == [
        {"role": "user", "content": [{"text": "add"}]},
        {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "t", "signature": "S"}}},
            {"toolUse": {"toolUseId": "tu_1", "name": "add", "input": {"a": 1}}},
        ]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "tu_1", "content": [{"text": "1"}]}}]},
    ]  # fmt: skip
    assert json_body["toolConfig"]["toolChoice"] == {"tool": {"name": "respond_json"}}


async def test_throttling_is_retried_and_an_exception_event_mid_stream_is_not() -> None:
    script = [
        Respond(429, {"message": "Too many requests"}, headers={"x-amzn-errortype": "ThrottlingException:http://internal"}),
        es(text_reply("ok")),
        es([event("messageStart", {"role": "assistant"}),
            event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "par"}}),
            exception("modelStreamErrorException", "model failed")]),
    ]  # fmt: skip
    sleep = SleepRecorder()
    async with FakeServer(script) as server:
        model = model_for(server)
        provider = BedrockProvider(model)
        errors: list[type] = []
        items = [i async for i in stream_with_retry(provider, StreamRequest(model, [UserMessage.text("x")]), sleep=sleep,
                                                    on_retry=lambda n, e, d: errors.append(type(e)))]  # fmt: skip
        assert errors == [RateLimitedError] and isinstance(items[-1], StreamDone)
        from phi_core.errors import ProviderError

        with pytest.raises(ProviderError):
            async for _ in stream_with_retry(
                provider, StreamRequest(model, [UserMessage.text("x")]), sleep=sleep
            ):
                pass
    assert len(server.requests) == 3


async def test_access_denied_is_auth_and_too_long_input_is_context_overflow() -> None:
    script = [
        Respond(
            403,
            {"message": "You don't have access"},
            headers={"x-amzn-errortype": "AccessDeniedException"},
        ),
        Respond(
            400,
            {"message": "Input is too long for requested model."},
            headers={"x-amzn-errortype": "ValidationException"},
        ),
    ]
    async with FakeServer(script) as server:
        model = model_for(server)
        provider = BedrockProvider(model)
        with pytest.raises(AuthError):
            await collect(provider, StreamRequest(model, [UserMessage.text("x")]))
        with pytest.raises(ContextOverflowError):
            await collect(provider, StreamRequest(model, [UserMessage.text("x")]))


async def test_dropped_event_stream_is_a_network_error() -> None:
    async with FakeServer([es(text_reply("partial"), drop_after=2)]) as server:
        model = model_for(server)
        with pytest.raises(NetworkError):
            await collect(BedrockProvider(model), StreamRequest(model, [UserMessage.text("x")]))


async def test_cancelling_the_caller_stops_the_worker_thread_without_blocking_the_loop() -> None:
    gate = asyncio.Event()
    arrived = asyncio.Event()

    async def slow(_record: object) -> Stream:
        arrived.set()
        await gate.wait()  # the server never answers until the test lets it
        return es(text_reply("late"))

    async with FakeServer([slow]) as server:
        model = model_for(server)
        provider = BedrockProvider(model)
        task = asyncio.create_task(collect(provider, StreamRequest(model, [UserMessage.text("x")])))
        await arrived.wait()  # reached while boto3 blocks in its thread: the loop is not blocked
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.set()


def test_secret_key_never_shows_in_the_provider_repr_or_model_dump() -> None:
    model = resolve_model(f"bedrock:{MODEL_ID}", api_key=f"AKIAFAKEACCESS:{SECRET}")
    provider = BedrockProvider(model)
    assert (
        SECRET not in repr(provider)
        and SECRET not in repr(model)
        and SECRET not in model.model_dump_json()
    )


def test_a_request_max_tokens_caps_claude_thinking_on_bedrock_too() -> None:
    from phi_core.providers.bedrock import build_converse_params

    model = resolve_model(f"bedrock:{MODEL_ID}", compat={"region": "us-west-2"})
    capped = build_converse_params(
        StreamRequest(model, [UserMessage.text("hi")], thinking="high", max_tokens=3000)
    )
    assert capped["inferenceConfig"]["maxTokens"] == 3000
    assert capped["additionalModelRequestFields"]["thinking"]["budget_tokens"] == 1976
    tight = build_converse_params(
        StreamRequest(model, [UserMessage.text("hi")], thinking="high", max_tokens=800)
    )
    assert (
        tight["inferenceConfig"]["maxTokens"] == 800 and "additionalModelRequestFields" not in tight
    )
    # uncapped, the model's limit is raised above the budget, and the loop is told so
    free = StreamRequest(model, [UserMessage.text("hi")], thinking="high")
    raised = build_converse_params(free)["inferenceConfig"]["maxTokens"]
    assert raised == max(model.max_tokens, 16384 + 1024)
    assert BedrockProvider(model).output_ceiling(free) == raised
