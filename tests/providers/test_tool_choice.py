"""A client's OpenAI-style ``tool_choice``, ``parallel_tool_calls`` and ``stop`` (what the gateway
passes on in ``StreamRequest.extra``) in each vendor's own request shape."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from phi_core.providers import ModelConfig
from phi_core.providers._common import client_tool_choice
from phi_core.providers.base import StreamRequest
from phi_core.types import (
    AssistantMessage,
    ResponseFormat,
    TextContent,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)

pytest.importorskip("anthropic")
pytest.importorskip("google.genai")
pytest.importorskip("botocore")

from phi_core.providers.anthropic import build_anthropic_params
from phi_core.providers.bedrock import build_converse_params
from phi_core.providers.google import build_google_request
from phi_core.providers.openai_responses import build_responses_params

WEATHER = ToolDefinition(name="get_weather", parameters={"type": "object"})
PICK = {"type": "function", "function": {"name": "get_weather"}}
PICK_RESPONSES = {"type": "function", "name": "get_weather"}


def request(provider: str, api: str, model_id: str, **extra: Any) -> StreamRequest:
    model = ModelConfig(provider=provider, id=model_id, api=api)
    return StreamRequest(
        model=model, messages=[UserMessage.text("Weather?")], tools=[WEATHER], extra=extra
    )


def anthropic(**extra: Any) -> dict[str, Any]:
    return build_anthropic_params(
        request("anthropic", "anthropic_messages", "claude-haiku-4-5", **extra)
    )


def gemini(**extra: Any) -> dict[str, Any]:
    return build_google_request(
        request("google", "google_generative_ai", "gemini-2.5-flash", **extra)
    )[1]


def converse(**extra: Any) -> dict[str, Any]:
    return build_converse_params(
        request("bedrock", "bedrock_converse_stream", "anthropic.claude-3-haiku", **extra)
    )


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, None),
        ({"tool_choice": "auto"}, {"type": "auto"}),
        ({"tool_choice": "none"}, {"type": "none"}),
        ({"tool_choice": "required"}, {"type": "any"}),
        ({"tool_choice": PICK}, {"type": "tool", "name": "get_weather"}),
        ({"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
        (
            {"tool_choice": "required", "parallel_tool_calls": False},
            {"type": "any", "disable_parallel_tool_use": True},
        ),
        ({"parallel_tool_calls": True}, None),
    ],
)
def test_anthropic_tool_choice(extra: dict[str, Any], expected: dict[str, Any] | None) -> None:
    assert anthropic(**extra).get("tool_choice") == expected


def test_anthropic_forced_json_tool_wins_over_the_callers_choice_and_stop_is_sent() -> None:
    req = request("anthropic", "anthropic_messages", "claude-haiku-4-5", tool_choice="none",
                  stop=["END", ""])  # fmt: skip
    req = dataclasses.replace(req, response_format=ResponseFormat(schema={"type": "object"}))
    params = build_anthropic_params(req)
    assert params["tool_choice"]["type"] == "tool" and params["tool_choice"]["name"] != "none"
    assert params["stop_sequences"] == ["END"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (PICK, {"mode": "ANY", "allowed_function_names": ["get_weather"]}),
    ],
)
def test_gemini_function_calling_mode(choice: Any, expected: dict[str, Any]) -> None:
    config = gemini(tool_choice=choice, stop="END")
    assert config["tool_config"] == {"function_calling_config": expected}
    assert config["stop_sequences"] == ["END"]


def test_gemini_without_a_choice_sends_no_tool_config() -> None:
    assert "tool_config" not in gemini()


def test_gemini_takes_the_clients_penalties() -> None:
    config = gemini(frequency_penalty=0.4, presence_penalty=-0.2)
    assert (config["frequency_penalty"], config["presence_penalty"]) == (0.4, -0.2)
    assert "frequency_penalty" not in gemini()


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, None),
        ("auto", None),
        ("required", {"any": {}}),
        (PICK, {"tool": {"name": "get_weather"}}),
    ],
)
def test_converse_tool_choice(choice: Any, expected: dict[str, Any] | None) -> None:
    params = converse(tool_choice=choice, stop=["END"])
    assert params["toolConfig"].get("toolChoice") == expected
    assert params["inferenceConfig"]["stopSequences"] == ["END"]


def test_converse_says_none_by_leaving_the_tools_out_unless_calls_are_in_the_conversation() -> None:
    params = converse(tool_choice="none", stop=["END"])
    assert "toolConfig" not in params and params["inferenceConfig"]["stopSequences"] == ["END"]
    sent = request("bedrock", "bedrock_converse_stream", "anthropic.claude-3-haiku")
    sent.extra = {"tool_choice": "none"}
    sent.messages = [
        UserMessage.text("Weather?"),
        AssistantMessage(content=[ToolCall(id="c1", name="get_weather", arguments={})]),
        ToolResultMessage(
            tool_call_id="c1", tool_name="get_weather", content=[TextContent(text="sun")]
        ),
        UserMessage.text("And tomorrow?"),
    ]
    with_calls = build_converse_params(sent)
    # Converse requires the tools of earlier calls declared: there the model decides
    assert [t["toolSpec"]["name"] for t in with_calls["toolConfig"]["tools"]] == ["get_weather"]
    assert "toolChoice" not in with_calls["toolConfig"]


@pytest.mark.parametrize("bad", ["any", {"type": "function"}, {"type": "tool", "name": "x"}, 3])
def test_a_choice_in_no_openai_shape_is_refused_with_the_shapes_that_work(bad: Any) -> None:
    with pytest.raises(ValueError, match='"required"'):
        client_tool_choice(bad)


@pytest.mark.parametrize(
    ("extra", "choice", "parallel"),
    [
        ({}, None, None),
        ({"tool_choice": "required"}, "required", None),
        ({"tool_choice": PICK, "parallel_tool_calls": False}, PICK_RESPONSES, False),
    ],
)
def test_responses_api_tool_choice(extra: dict[str, Any], choice: Any, parallel: Any) -> None:
    params = build_responses_params(
        request("openai-responses", "openai_responses", "gpt-5-mini", **extra)
    )
    assert params.get("tool_choice") == choice
    assert params.get("parallel_tool_calls") == parallel
