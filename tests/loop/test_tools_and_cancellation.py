"""Tool execution strategies, timeouts, bad input, cancellation and event sinks."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from phi_core.cancel import CancelToken
from phi_core.events import (
    AGENT_EVENT_ADAPTER,
    AgentEnd,
    AgentStart,
    Emitter,
    ToolExecutionUpdate,
    Warning,
)
from phi_core.loop import (
    AgentContext,
    AgentLoopConfig,
    Batched,
    LoopHooks,
    agent_loop,
    agent_loop_continue,
    agent_loop_stream,
)
from phi_core.providers import RetryPolicy
from phi_core.testing import Hang, Reply, ScriptedProvider, call
from phi_core.tools import ToolContext, ToolResult, tool
from phi_core.types import (
    MESSAGES_ADAPTER,
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)


def cfg(provider: ScriptedProvider, **kw: Any) -> AgentLoopConfig:
    return AgentLoopConfig(provider=provider, retry=RetryPolicy.none(), **kw)


class ConcurrencyProbe:
    """A tool whose calls record how many of them were in flight at once and their order."""

    name = "probe"
    description = "probe"
    timeout = None

    def __init__(self) -> None:
        self.parameters = {"type": "object", "properties": {"i": {"type": "integer"}}}
        self.active = 0
        self.max_active = 0
        self.log: list[str] = []

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.log.append(f"start{args['i']}")
        for _ in range(5):
            await asyncio.sleep(0)
        self.log.append(f"end{args['i']}")
        self.active -= 1
        return str(args["i"])


def probe_calls(n: int) -> list[ToolCall]:
    return [call("probe", {"i": i}) for i in range(n)]


@pytest.mark.parametrize(
    ("strategy", "n", "expected_max"),
    [("parallel", 3, 3), ("sequential", 2, 1), (Batched(2), 4, 2)],
)
async def test_execution_strategies_bound_concurrency(
    strategy: Any, n: int, expected_max: int
) -> None:
    probe = ConcurrencyProbe()
    provider = ScriptedProvider([Reply(tool_calls=probe_calls(n)), "done"])
    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(tools=[probe]),
        cfg(provider, tool_execution=strategy),
        events=events.append,
    )
    assert probe.max_active == expected_max
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [r.content[0].text for r in results] == [str(i) for i in range(n)]  # type: ignore[union-attr]
    assert sum(e.type == "tool_execution_start" for e in events) == n
    assert sum(e.type == "tool_execution_end" for e in events) == n
    if isinstance(strategy, Batched):
        # The second batch starts only after the first one finished.
        assert probe.log.index("start2") > max(probe.log.index("end0"), probe.log.index("end1"))


async def test_tool_updates_arrive_in_order() -> None:
    @tool
    async def slow_steps(ctx: ToolContext) -> str:
        """Three steps."""
        for i in range(1, 4):
            ctx.update(f"step {i}/3")
        return "done"

    events: list[Any] = []
    await agent_loop(
        "go",
        AgentContext(tools=[slow_steps]),
        cfg(ScriptedProvider([Reply(tool_calls=[call("slow_steps")]), "ok"])),
        events=events.append,
    )
    updates = [e.text for e in events if isinstance(e, ToolExecutionUpdate)]
    assert updates == ["step 1/3", "step 2/3", "step 3/3"]
    order = [e.type for e in events]
    assert order.index("tool_execution_update") < order.index("tool_execution_end")


async def test_config_timeout_and_per_tool_override() -> None:
    @tool
    async def forever() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "unreachable"

    @tool(timeout=0.05)
    async def short_fuse() -> str:
        """Overrides the config timeout."""
        await asyncio.Event().wait()
        return "unreachable"

    @tool
    async def fast() -> str:
        """Returns at once."""
        return "fast!"

    provider = ScriptedProvider(
        [Reply(tool_calls=[call("forever"), call("short_fuse"), call("fast")]), "recovered"]
    )
    result = await agent_loop(
        "go",
        AgentContext(tools=[forever, short_fuse, fast]),
        cfg(provider, tool_timeout=0.2),
    )
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    texts = [r.content[0].text for r in results]  # type: ignore[union-attr]
    assert "timed out after 0.2s" in texts[0] and results[0].is_error
    assert "timed out after 0.05s" in texts[1] and results[1].is_error
    assert texts[2] == "fast!" and not results[2].is_error
    assert isinstance(result.messages[-1], AssistantMessage)
    assert result.text == "recovered"


async def test_invalid_arguments_go_back_to_the_model_as_an_error() -> None:
    @tool
    def square(x: int) -> int:
        """Square a number."""
        return x * x

    provider = ScriptedProvider(
        [
            Reply(tool_calls=[call("square", {"x": "not a number"})]),
            Reply(tool_calls=[call("square", '{"x": 3')]),  # malformed JSON from the provider
            Reply(tool_calls=[call("square", {"x": 3})]),
            "9",
        ]
    )
    result = await agent_loop("go", AgentContext(tools=[square]), cfg(provider))
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert (
        results[0].is_error and "Invalid arguments for tool 'square'" in results[0].content[0].text
    )  # type: ignore[union-attr]
    assert results[1].is_error and "not a JSON object" in results[1].content[0].text  # type: ignore[union-attr]
    assert not results[2].is_error and results[2].content[0].text == "9"  # type: ignore[union-attr]
    assert result.reason == "completed"


async def test_unsendable_tool_result_becomes_an_error_result() -> None:
    @tool
    def weird() -> Any:
        """Returns something that is not JSON."""
        return object()

    @tool
    def rich() -> Any:
        """Returns JSON-serialisable data."""
        return {"rows": [1, 2]}

    provider = ScriptedProvider([Reply(tool_calls=[call("weird"), call("rich")]), "ok"])
    result = await agent_loop("go", AgentContext(tools=[weird, rich]), cfg(provider))
    bad, good = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert bad.is_error and "cannot be sent to the model" in bad.content[0].text  # type: ignore[union-attr]
    assert good.content[0].text == '{"rows": [1, 2]}'  # type: ignore[union-attr]


async def test_raising_hooks_never_crash_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    def bad_before_tool(name: str, id: str, args: Any) -> bool:
        raise RuntimeError("hook exploded")

    def bad_after_turn(messages: Any, usage: Usage) -> None:
        raise ValueError("observer exploded")

    events: list[Any] = []
    provider = ScriptedProvider([Reply(tool_calls=[call("x")]), "fine"])
    with caplog.at_level(logging.WARNING):
        result = await agent_loop(
            "go",
            AgentContext(tools=[]),
            cfg(
                provider,
                hooks=LoopHooks(before_tool_execution=bad_before_tool, after_turn=bad_after_turn),
            ),
            events=events.append,
        )
    tool_result = next(m for m in result.messages if isinstance(m, ToolResultMessage))
    assert tool_result.is_error and "hook exploded" in tool_result.content[0].text  # type: ignore[union-attr]
    warnings = [e.message for e in events if isinstance(e, Warning)]
    assert any("after_turn" in w and "observer exploded" in w for w in warnings)
    assert result.reason == "completed" and result.text == "fine"

    def bad_before_turn(messages: Any, turn: int) -> bool:
        raise RuntimeError("turn hook broke")

    result = await agent_loop(
        "go",
        AgentContext(),
        cfg(ScriptedProvider(["x"]), hooks=LoopHooks(before_turn=bad_before_turn)),
    )
    assert result.reason == "error" and "turn hook broke" in (result.error or "")


async def test_failing_and_slow_sinks_never_break_the_run() -> None:
    def failing(event: Any) -> None:
        raise RuntimeError("consumer broke")

    result = await agent_loop("hi", AgentContext(), cfg(ScriptedProvider(["ok"])), events=failing)
    assert result.text == "ok"

    received: list[str] = []

    async def slow(event: Any) -> None:
        await asyncio.sleep(0.001)
        received.append(event.type)

    result = await agent_loop("hi", AgentContext(), cfg(ScriptedProvider(["ok"])), events=slow)
    # Every event was delivered, in order, before agent_loop returned.
    assert received[0] == "agent_start" and received[-1] == "agent_end"
    assert result.text == "ok"


async def test_queue_sink_and_async_iterator_form(strict_loop: list[Any]) -> None:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    await agent_loop("hi", AgentContext(), cfg(ScriptedProvider(["ok"])), events=queue)
    assert queue.qsize() > 3

    stream = agent_loop_stream(
        "hi", AgentContext(), cfg(ScriptedProvider([Reply("a b c", chunks=3)]))
    )
    seen = [event.type async for event in stream]
    assert seen[0] == "agent_start" and seen[-1] == "agent_end"
    assert seen.count("message_update") == 3
    assert (await stream).text == "a b c"


async def test_leaving_the_iterator_early_cancels_the_run(strict_loop: list[Any]) -> None:
    stream = agent_loop_stream("hi", AgentContext(), cfg(ScriptedProvider([Hang("partial")])))
    async for event in stream:
        if event.type == "message_update":
            break
    with pytest.raises(asyncio.CancelledError):
        await stream


async def test_cancel_mid_stream_aborts_with_the_partial_text(strict_loop: list[Any]) -> None:
    token = CancelToken()
    events: list[Any] = []

    def sink(event: Any) -> None:
        events.append(event)
        if event.type == "message_update":
            token.cancel()

    context = AgentContext()
    result = await agent_loop(
        "hi", context, cfg(ScriptedProvider([Hang("Once upon")])), events=sink, cancel=token
    )
    assert result.reason == "cancelled"
    final = result.final_message
    assert final is not None and final.stop_reason == "aborted"
    assert final.text == "Once upon"
    assert [e.type for e in events].count("agent_end") == 1
    assert events[-1].type == "agent_end" and events[-1].reason == "cancelled"


async def test_cancel_mid_tool_gives_every_call_a_result(strict_loop: list[Any]) -> None:
    started = asyncio.Event()
    token = CancelToken()

    @tool
    async def wait_forever(ctx: ToolContext) -> str:
        """Blocks until cancelled."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    async def cancel_when_started() -> None:
        await started.wait()
        token.cancel()

    events: list[Any] = []
    canceller = asyncio.create_task(cancel_when_started())
    result = await agent_loop(
        "go",
        AgentContext(tools=[wait_forever]),
        cfg(ScriptedProvider([Reply(tool_calls=[call("wait_forever"), call("wait_forever")])])),
        events=events.append,
        cancel=token,
    )
    await canceller
    assert result.reason == "cancelled"
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert len(results) == 2 and all(r.is_error for r in results)
    assert [e.type for e in events].count("agent_end") == 1


async def test_cancelling_the_task_still_emits_one_agent_end(strict_loop: list[Any]) -> None:
    events: list[Any] = []
    streaming = asyncio.Event()

    def sink(event: Any) -> None:
        events.append(event)
        if event.type == "message_update":
            streaming.set()

    task = asyncio.create_task(
        agent_loop("hi", AgentContext(), cfg(ScriptedProvider([Hang("x")])), events=sink)
    )
    await streaming.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    ends = [e for e in events if isinstance(e, AgentEnd)]
    assert len(ends) == 1 and ends[0].reason == "cancelled"


def test_messages_and_events_round_trip_through_json() -> None:
    messages = [
        UserMessage(
            content=[TextContent(text="hi"), ImageContent(data="AA==", mime_type="image/png")]
        ),
        AssistantMessage(
            content=[
                ThinkingContent(thinking="hmm", signature="sig"),
                TextContent(text="x"),
                ToolCall(id="c", name="t", arguments={"a": 1}),
            ],
            stop_reason="tool_use",
            usage=Usage(input=3, output=4, cache_read=2),
        ),
        ToolResultMessage(
            tool_call_id="c", tool_name="t", content=[TextContent(text="r")], is_error=True
        ),
    ]
    data = MESSAGES_ADAPTER.dump_json(messages)
    assert MESSAGES_ADAPTER.validate_json(data) == messages
    end = AgentEnd(loop_id="l", messages=messages, usage=Usage(input=1))
    assert AGENT_EVENT_ADAPTER.validate_json(end.model_dump_json()) == end


def test_usage_total_falls_back_and_adds_fieldwise() -> None:
    assert Usage(input=3, output=4).total == 7
    assert Usage(input=3, output=4, total=10).total == 10
    both = Usage(input=1, output=2, reasoning=3, cache_read=4, cache_write=5) + Usage(input=1)
    assert (both.input, both.output, both.reasoning, both.cache_read, both.cache_write) == (
        2,
        2,
        3,
        4,
        5,
    )


async def test_emitter_rejects_a_non_sink() -> None:
    with pytest.raises(TypeError, match="events="):
        Emitter(42)


def test_tool_result_helpers() -> None:
    assert ToolResult.error("x").is_error
    assert ToolResult.text("y").content == [TextContent(text="y")]


async def test_a_turn_calling_a_caller_tool_ends_the_run_on_the_calls(strict_loop: Any) -> None:
    from phi_core.types import ToolDefinition

    ran: list[str] = []

    @tool
    def lookup(term: str) -> str:
        """Look a term up."""
        ran.append(term)
        return f"{term}: found"

    weather = ToolDefinition(
        name="get_weather",
        description="The weather of a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    provider = ScriptedProvider(
        [
            Reply(tool_calls=[call("lookup", {"term": "Paris"})]),  # the loop's own tool: run
            Reply("Checking.", tool_calls=[call("get_weather", {"city": "Paris"}, id="w1")]),
            Reply("never asked"),
        ]
    )
    events: list[Any] = []
    context = AgentContext(tools=[lookup])
    result = await agent_loop(
        "Weather in Paris?", context, cfg(provider, caller_tools=[weather]), events=events.append
    )
    assert result.reason == "completed" and result.error is None
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage) and last.text == "Checking."
    assert [(c.id, c.name, c.arguments) for c in last.tool_calls] == [
        ("w1", "get_weather", {"city": "Paris"})
    ]
    assert ran == ["Paris"] and len(provider.requests) == 2  # no result was made up for w1
    assert [t.name for t in provider.requests[0].tools] == ["lookup", "get_weather"]
    assert sum(isinstance(e, AgentEnd) for e in events) == 1
    [start] = [e for e in events if isinstance(e, AgentStart)]
    assert start.config_snapshot is not None
    assert start.config_snapshot["caller_tools"] == ["get_weather"]
    # the caller sends the result back: the run continues from it
    context.messages.append(
        ToolResultMessage(
            tool_call_id="w1", tool_name="get_weather", content=[TextContent(text="sunny")]
        )
    )
    follow = await agent_loop_continue(context, cfg(provider, caller_tools=[weather]))
    assert follow.text == "never asked" and provider.requests[2].messages[-1].role == "tool_result"


async def test_a_caller_tool_named_like_a_loop_tool_is_refused() -> None:
    from phi_core.errors import UserError
    from phi_core.types import ToolDefinition

    @tool
    def lookup(term: str) -> str:
        """Look a term up."""
        return term

    twin = ToolDefinition(name="lookup", description="", parameters={"type": "object"})
    with pytest.raises(UserError, match=r"tools\[0\] and caller_tools\[0\]"):
        await agent_loop("hi", AgentContext(tools=[lookup]), cfg(ScriptedProvider(["x"]),
                                                                 caller_tools=[twin]))  # fmt: skip
