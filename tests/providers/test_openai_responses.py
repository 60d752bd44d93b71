from __future__ import annotations

import pytest

from phi_core.errors import ConfigError, NetworkError, RateLimitedError
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.providers.openai_responses import AzureOpenAIProvider, OpenAIResponsesProvider
from phi_core.providers.registry import get_provider, resolve_model
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

from .fakes import FakeServer, Respond, Stream, sse
from .fakes.responses_wire import ev, response, text_reply, usage
from .helpers import SleepRecorder, collect

KEY = "sk-proj-SECRETKEY0123456789"


def model_for(server: FakeServer, **kw: object) -> ModelConfig:
    return ModelConfig(
        provider="openai-responses", id="gpt-5-mini", api="openai_responses",
        base_url=f"{server.url}/v1", api_key=KEY, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


async def test_interleaved_tool_call_arguments_go_to_their_own_call_in_output_order() -> None:
    frames = sse([
        ev("response.created", response=response("in_progress")),
        ev("response.output_item.added", output_index=0, item={"type": "reasoning", "id": "rs_1", "summary": []}),
        ev("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, summary_index=0, delta="Plan."),
        ev("response.output_item.done", output_index=0,
           item={"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENC"}),
        ev("response.output_item.added", output_index=1,
           item={"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "add", "arguments": ""}),
        ev("response.output_item.added", output_index=2,
           item={"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "mul", "arguments": ""}),
        ev("response.function_call_arguments.delta", item_id="fc_2", output_index=2, delta="{\"x\": 2}"),
        ev("response.function_call_arguments.delta", item_id="fc_1", output_index=1, delta="{\"x\": 1}"),
        ev("response.completed", response=response("completed", usage(50, 20, cached=40, reasoning=8))),
    ])  # fmt: skip
    async with FakeServer([Stream(frames)]) as server:
        model = model_for(server)
        deltas, message = await collect(
            OpenAIResponsesProvider(model), StreamRequest(model, [UserMessage.text("x")])
        )
    assert [type(d) for d in deltas] == [
        ThinkingDelta,
        ThinkingDelta,
        ToolCallDelta,
        ToolCallDelta,
        ToolCallDelta,
        ToolCallDelta,
    ]
    assert message.content == [
        ThinkingContent(thinking="Plan.", signature="ENC"),
        ToolCall(id="call_1", name="add", arguments={"x": 1}),
        ToolCall(id="call_2", name="mul", arguments={"x": 2}),
    ]
    assert message.stop_reason == "tool_use"
    assert (message.usage.input, message.usage.cache_read, message.usage.reasoning) == (10, 40, 8)


async def test_request_body_has_input_items_instructions_reasoning_and_text_format() -> None:
    history = [
        UserMessage.text("hi"),
        AssistantMessage(provider="openai-responses", content=[
            ThinkingContent(thinking="Plan.", signature="ENC"), ToolCall(id="call_1", name="add", arguments={"x": 1})]),
        ToolResultMessage(tool_call_id="call_1", tool_name="add", content=[TextContent(text="2")]),
        AssistantMessage(provider="anthropic", content=[ThinkingContent(thinking="t", signature="S"), TextContent(text="two")]),
        UserMessage.text("json please"),
    ]  # fmt: skip
    async with FakeServer([Stream(text_reply('{"a": 1}'))]) as server:
        model = model_for(server)
        request = StreamRequest(model, history, system_prompt="Sys", thinking="high", max_tokens=99,
                                tools=[ToolDefinition(name="add")], response_format=ResponseFormat(schema={"type": "object"}))  # fmt: skip
        _, message = await collect(OpenAIResponsesProvider(model), request)
        sent = server.requests[0]
    body = sent.json
    assert sent.path == "/v1/responses" and message.text == '{"a": 1}'
    assert (
        body["instructions"] == "Sys" and body["max_output_tokens"] == 99 and body["store"] is False
    )
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "response",
            "schema": {"type": "object"},
            "strict": True,
        }
    }
    assert body["tools"][0]["name"] == "add" and body["tools"][0]["type"] == "function"
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Plan."}], "encrypted_content": "ENC"},
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{\"x\": 1}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "2"},
        {"role": "assistant", "content": "[Reasoning] t"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": [{"type": "input_text", "text": "json please"}]},
    ]  # fmt: skip


async def test_incomplete_response_is_a_length_stop() -> None:
    frames = sse([
        ev("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="cut", logprobs=[]),
        ev("response.incomplete", response=response("incomplete", usage(5, 5), incomplete_details={"reason": "max_output_tokens"})),
    ])  # fmt: skip
    async with FakeServer([Stream(frames)]) as server:
        model = model_for(server)
        _, message = await collect(
            OpenAIResponsesProvider(model), StreamRequest(model, [UserMessage.text("x")])
        )
    assert message.stop_reason == "length" and message.text == "cut"


async def test_failed_response_event_is_classified_and_retried_before_any_delta() -> None:
    failed = sse(
        [
            ev(
                "response.failed",
                response=response(
                    "failed", error={"code": "rate_limit_exceeded", "message": "slow"}
                ),
            )
        ]
    )
    sleep = SleepRecorder()
    async with FakeServer([Stream(failed), Stream(text_reply("ok"))]) as server:
        model = model_for(server)
        errors: list[type] = []
        items = [i async for i in stream_with_retry(OpenAIResponsesProvider(model), StreamRequest(model, [UserMessage.text("x")]),
                                                    sleep=sleep, on_retry=lambda n, e, d: errors.append(type(e)))]  # fmt: skip
    assert errors == [RateLimitedError] and len(server.requests) == 2
    assert items[-1].message.text == "ok"  # type: ignore[union-attr]


async def test_dropped_stream_is_a_network_error() -> None:
    async with FakeServer([Stream(text_reply("partial"), drop_after=3)]) as server:
        model = model_for(server)
        with pytest.raises(NetworkError):
            await collect(
                OpenAIResponsesProvider(model), StreamRequest(model, [UserMessage.text("x")])
            )


async def test_azure_sends_the_api_key_header_api_version_and_deployment() -> None:
    async with FakeServer([Stream(text_reply("hello from azure"))]) as server:
        model = resolve_model("azure:my-deployment", base_url=server.url, api_key="azure-SECRET-KEY-123",
                              compat={"api_version": "2025-03-01-preview"})  # fmt: skip
        provider = get_provider(model)
        assert isinstance(provider, AzureOpenAIProvider)
        deltas, message = await collect(provider, StreamRequest(model, [UserMessage.text("x")]))
        sent = server.requests[0]
    assert message.text == "hello from azure" and isinstance(deltas[0], TextDelta)
    assert sent.headers["api-key"] == "azure-SECRET-KEY-123"
    assert sent.query["api-version"] == ["2025-03-01-preview"]
    assert sent.path.startswith("/openai/") and sent.path.endswith("/responses")
    assert sent.json["model"] == "my-deployment"


def test_azure_without_an_endpoint_says_which_variable_to_set() -> None:
    model = resolve_model("azure:dep", api_key="k" * 10)
    with pytest.raises(ConfigError, match="AZURE_OPENAI_ENDPOINT"):
        AzureOpenAIProvider(model)


async def test_401_from_azure_is_not_retried() -> None:
    async with FakeServer(
        [
            Respond(
                401,
                {
                    "error": {
                        "code": "401",
                        "message": "Access denied due to invalid subscription key.",
                    }
                },
            )
        ]
    ) as server:
        model = resolve_model("azure:dep", base_url=server.url, api_key="azure-SECRET-KEY-123")
        from phi_core.errors import AuthError

        with pytest.raises(AuthError):
            async for _ in stream_with_retry(
                AzureOpenAIProvider(model),
                StreamRequest(model, [UserMessage.text("x")]),
                sleep=SleepRecorder(),
            ):
                pass
    assert len(server.requests) == 1
