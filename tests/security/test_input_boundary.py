"""Input checked at the boundary: bad prompts, messages and tools are a UserError before any
event; once a run has started, exactly one AgentEnd on every path; tool results and Unicode
are made sendable; only genuine stream-decoding faults are retried."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from phi_core.errors import BadRequestError, UserError
from phi_core.events import AgentEnd
from phi_core.loop import (
    AgentContext,
    AgentLoopConfig,
    agent_loop,
    agent_loop_continue,
    agent_loop_stream,
)
from phi_core.providers._common import malformed_stream
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.providers.openai_chat import OpenAIChatProvider
from phi_core.providers.retry import RetryPolicy, stream_with_retry
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import ToolResult, tool
from phi_core.types import (
    MESSAGES_ADAPTER,
    TextContent,
    ToolResultMessage,
    UserMessage,
)

from ..providers.fakes import FakeServer, Stream
from ..providers.fakes.openai_wire import text_reply
from ..providers.helpers import SleepRecorder

REPO = Path(__file__).resolve().parents[2]


async def refused(prompts: Any, context: AgentContext | None = None, **config: Any) -> str:
    """The UserError message for a run that must not start; asserts no event and no call."""
    events: list[Any] = []
    provider = ScriptedProvider(["never"])
    with pytest.raises(UserError) as info:
        await agent_loop(
            prompts,
            context or AgentContext(),
            AgentLoopConfig(provider=provider, **config),
            events=events.append,
        )
    assert events == [] and provider.requests == []
    return str(info.value)


@tool
def echo(text: str) -> str:
    """Echo."""
    return text


@pytest.mark.parametrize(
    ("prompts", "says"),
    [
        (None, "must be a string, a message or a list of messages, got None"),
        (123, "got a int (123)"),
        (b"bytes", "got a bytes"),
        ([None], "prompts[0] is None, not a message"),
        ([{"role": "user", "content": "hi"}], "prompts[0] is a dict"),
        (["text in a list"], "prompts[0] is a str"),
        ("", "The prompt is empty"),
        ([], "needs at least one prompt"),
        ("bad \ud800 text", "lone surrogate '\\ud800' at index 4"),
        ([UserMessage(content=[TextContent(text="x\udc80")])], "prompts[0].content[0].text"),
        ([UserMessage.model_construct(content="not a list")], "content must be a list"),
    ],
)
async def test_bad_prompts_are_a_user_error_before_any_event(prompts: Any, says: str) -> None:
    assert says in await refused(prompts)


async def test_bad_context_messages_and_system_prompts_are_refused() -> None:
    context = AgentContext(messages=[UserMessage.text("ok"), {"role": "user"}])  # type: ignore[list-item]
    assert "context.messages[1] is a dict" in await refused("hi", context)
    with pytest.raises(UserError, match=r"context.messages\[1\] is a dict"):
        context.agent_id, context.session_id = "a", "s"
        await agent_loop_continue(context, AgentLoopConfig(provider=ScriptedProvider(["x"])))
    assert "system prompt" in await refused("hi", AgentContext(system_prompt="s\ud800"))
    assert "system prompt must be a string" in await refused("hi", system_prompt=42)


class _Raw:
    """A hand-written tool with whatever attributes a test gives it."""

    def __init__(self, **attributes: Any) -> None:
        self.name = "raw"
        self.description = "raw tool"
        self.parameters: dict[str, Any] = {"type": "object", "properties": {}}
        self.__dict__.update(attributes)

    async def execute(self, args: dict[str, Any], ctx: Any) -> str:
        return "ok"


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ([_Raw(parameters={"type": 42})], "is not a valid JSON Schema: at type"),
        ([_Raw(parameters={"type": "object", "properties": {"a": {"minimum": "x"}}})], "at properties/a/minimum"),
        ([_Raw(parameters={"type": "string"})], "must describe an object"),
        ([_Raw(parameters={"type": "object", "default": math.nan})], "not strict JSON"),
        ([_Raw(parameters=None)], "must be a JSON schema object"),
        ([_Raw(name="my tool")], "'my tool' is not accepted by model providers"),
        ([_Raw(name="x" * 65)], "is not accepted by model providers"),
        ([_Raw(name="dup"), _Raw(name="dup")], "Two tools are named 'dup' (tools[0] and tools[1])"),
        ([_Raw(description=5)], "`description` must be a string"),
        ([_Raw(timeout=-1)], "`timeout` must be a positive number"),
        ([object()], "tools[0]: the tool name None"),
    ],
)  # fmt: skip
async def test_bad_tools_are_refused_before_the_run(tools: list[Any], says: str) -> None:
    assert says in await refused("hi", AgentContext(tools=tools))


def test_a_bad_tool_name_fails_where_the_tool_is_made() -> None:
    with pytest.raises(UserError, match="'bad name' is not accepted"):
        tool(name="bad name")(lambda: None)


# --------------------------------------------------------------------------- one AgentEnd


def exiting_tools(kind: type[BaseException]) -> list[Any]:
    @tool
    def sync_exit() -> str:
        """Raise in a worker thread."""
        raise kind()

    @tool
    async def async_exit() -> str:
        """Raise in the loop."""
        raise kind()

    return [sync_exit, async_exit]


@pytest.mark.parametrize("kind", [SystemExit, GeneratorExit])
@pytest.mark.parametrize("which", ["sync_exit", "async_exit"])
@pytest.mark.parametrize("calls", [1, 2])
async def test_an_exiting_tool_ends_the_run_with_one_agent_end_then_raises(
    kind: type[BaseException], which: str, calls: int
) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=[call(which, {}) for _ in range(calls)]), Reply("unreached")]
    )
    events: list[Any] = []
    context = AgentContext(tools=exiting_tools(kind))
    with pytest.raises(kind):
        await agent_loop("go", context, AgentLoopConfig(provider=provider), events=events.append)
    ends = [e for e in events if isinstance(e, AgentEnd)]
    assert len(ends) == 1 and ends[0].reason == "error" and kind.__name__ in (ends[0].error or "")
    assert len(provider.requests) == 1


async def test_the_stream_form_delivers_the_end_event_before_raising() -> None:
    provider = ScriptedProvider([Reply(tool_calls=[call("sync_exit", {})]), Reply("x")])
    seen: list[str] = []
    with pytest.raises(SystemExit):
        async for event in agent_loop_stream(
            "go", AgentContext(tools=exiting_tools(SystemExit)), AgentLoopConfig(provider=provider)
        ):
            seen.append(event.type)
    assert seen.count("agent_end") == 1 and seen[-1] == "agent_end"


_KEYBOARD = textwrap.dedent(
    """
    import asyncio, sys
    from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop, agent_loop_stream
    from phi_core.testing import Reply, ScriptedProvider, call
    from phi_core.tools import tool

    @tool
    def interrupt() -> str:
        "Raise KeyboardInterrupt in the worker thread."
        raise KeyboardInterrupt

    async def main(stream):
        provider = ScriptedProvider([Reply(tool_calls=[call("interrupt", {})]), Reply("x")])
        context, config = AgentContext(tools=[interrupt]), AgentLoopConfig(provider=provider)
        events = []
        try:
            if stream:
                async for event in agent_loop_stream("go", context, config):
                    events.append(event.type)
            else:
                await agent_loop("go", context, config, events=lambda e: events.append(e.type))
        finally:
            print("agent_end", events.count("agent_end"))

    try:
        asyncio.run(main(sys.argv[1] == "stream"))
    except KeyboardInterrupt:
        print("raised KeyboardInterrupt")
    """
)


@pytest.mark.parametrize("form", ["plain", "stream"])
def test_keyboard_interrupt_in_a_sync_tool_leaves_no_pending_task(form: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _KEYBOARD, form],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.stdout.split("\n")[:2] == ["agent_end 1", "raised KeyboardInterrupt"], done
    assert "Task was destroyed" not in done.stderr and "never retrieved" not in done.stderr
    assert done.stderr == ""


async def test_a_bad_queued_message_is_dropped_with_a_warning() -> None:
    queued: list[Any] = [{"role": "user", "content": "sneaky"}]

    def steering() -> list[Any]:
        out, queued[:] = list(queued), []
        return out

    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(),
        AgentLoopConfig(provider=ScriptedProvider(["ok"]), get_steering_messages=steering),
        events=events.append,
    )
    assert result.reason == "completed"
    assert any("dropped" in getattr(e, "message", "") for e in events)
    assert sum(isinstance(e, AgentEnd) for e in events) == 1


# --------------------------------------------------------------------------- tool results


async def run_tool(value: Any, **config: Any) -> str:
    @tool
    def produce() -> Any:
        """Produce a value."""
        return value

    provider = ScriptedProvider([Reply(tool_calls=[call("produce", {})]), Reply("done")])
    context = AgentContext(tools=[produce])
    await agent_loop("go", context, AgentLoopConfig(provider=provider, **config))
    result = next(m for m in context.messages if isinstance(m, ToolResultMessage))
    MESSAGES_ADAPTER.dump_json(context.messages)  # the session can be saved
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def strict_json(text: str) -> Any:
    def reject(name: str) -> Any:
        raise ValueError(f"bare {name} is not JSON")

    return json.loads(text, parse_constant=reject)


async def test_non_finite_numbers_in_a_result_are_sent_as_valid_json() -> None:
    text = await run_tool({"mean": math.nan, "hi": math.inf, "lo": -math.inf, "n": [1.5]})
    assert strict_json(text) == {"mean": "NaN", "hi": "Infinity", "lo": "-Infinity", "n": [1.5]}


async def test_a_huge_result_is_capped_with_a_note() -> None:
    text = await run_tool("y" * (50 * 1024 * 1024))
    assert len(text.encode()) < 257 * 1024 and "tool result truncated" in text
    small = await run_tool("z" * 5000, tool_result_max_bytes=1024)
    assert small.startswith("z" * 1024) and "the limit is 1024 bytes" in small
    whole = await run_tool("w" * 5000, tool_result_max_bytes=None)
    assert whole == "w" * 5000


async def test_lone_surrogates_from_tools_and_models_are_replaced_not_sent() -> None:
    text = await run_tool(ToolResult.text("name: caf\udce9.txt"))
    assert text == "name: caf\ufffd.txt"
    provider = ScriptedProvider(["half an emoji \ud83d", "fine"])
    context = AgentContext()
    config = AgentLoopConfig(provider=provider)
    first = await agent_loop("one", context, config)
    assert first.text == "half an emoji \ufffd"
    second = await agent_loop("two", context, config)
    assert second.ok and MESSAGES_ADAPTER.dump_json(context.messages)


# --------------------------------------------------------------------------- retry classes


def test_only_undecodable_streams_are_retryable() -> None:
    decode = malformed_stream("openai", "m", json.JSONDecodeError("bad", "{x", 1))
    utf8 = malformed_stream("openai", "m", UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"))
    encode = malformed_stream("openai", "m", UnicodeEncodeError("utf-8", "\ud800", 0, 1, "bad"))
    other = malformed_stream("openai", "m", ValueError("something else"))
    assert decode.retryable and utf8.retryable
    assert not encode.retryable and isinstance(encode, BadRequestError)
    assert not other.retryable and "invalid Unicode" in str(encode)


async def test_a_lone_surrogate_reaching_a_provider_is_not_retried() -> None:
    async with FakeServer([Stream(text_reply("a")), Stream(text_reply("b"))]) as server:
        model = ModelConfig(
            provider="openai",
            id="gpt-4o-mini",
            base_url=f"{server.url}/v1",
            api_key="sk-test-SECRETKEY0123456789abcdef",  # type: ignore[arg-type]
        )
        request = StreamRequest(model, [UserMessage(content=[TextContent(text="x\ud800")])])
        sleep = SleepRecorder()
        with pytest.raises(BadRequestError, match="invalid Unicode"):
            async for _ in stream_with_retry(
                OpenAIChatProvider(model), request, RetryPolicy(max_retries=3), sleep=sleep
            ):
                pass
        assert server.requests == [] and sleep.delays == []
