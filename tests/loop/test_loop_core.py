"""The agent loop's core behaviour (study §4.1, §4.2, §4.4) and the three phi-core fixes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from phi_core.cancel import CancelToken
from phi_core.context import ExecutionLimits, ExecutionTracker
from phi_core.errors import AuthError, NetworkError, RateLimitedError, UserError
from phi_core.events import (
    AgentEnd,
    AgentStart,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
    TurnRequest,
    TurnStart,
)
from phi_core.loop import AgentContext, AgentLoopConfig, LoopHooks, agent_loop, agent_loop_continue
from phi_core.providers import ModelConfig, RetryPolicy, StreamDone, StreamRequest
from phi_core.testing import Fail, Reply, ScriptedProvider, call
from phi_core.tools import ToolError, tool
from phi_core.types import (
    AssistantMessage,
    Pricing,
    ResponseFormat,
    TextContent,
    TextDelta,
    ToolResultMessage,
    Usage,
    UserMessage,
)

NO_RETRY_DELAY = RetryPolicy(base_delay=0.0, jitter=0.0)


def config_for(provider: ScriptedProvider, **kw: Any) -> AgentLoopConfig:
    kw.setdefault("retry", NO_RETRY_DELAY)
    return AgentLoopConfig(provider=provider, **kw)


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
async def explode() -> str:
    """Always fails."""
    raise ToolError("boom")


def kinds(events: list[Any]) -> list[str]:
    return [e.type for e in events]


async def test_single_text_reply_returns_prompt_and_answer(strict_loop: list[Any]) -> None:
    provider = ScriptedProvider(["Hello there."])
    context = AgentContext()
    events: list[Any] = []
    result = await agent_loop("hi", context, config_for(provider), events=events.append)
    assert [m.role for m in result.messages] == ["user", "assistant"]
    assert len(context.messages) == 2
    assert result.text == "Hello there."
    assert result.reason == "completed"
    order = kinds(events)
    for needed in ("agent_start", "turn_start", "turn_end", "agent_end"):
        assert needed in order
    assert order[0] == "agent_start" and order[-1] == "agent_end"
    assert order.count("agent_end") == 1


async def test_tool_call_round_trip(strict_loop: list[Any]) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("add", {"a": 2, "b": 3})]), Reply("The sum is 5.")]
    )
    context = AgentContext(tools=[add])
    events: list[Any] = []
    result = await agent_loop("2+3?", context, config_for(provider), events=events.append)
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant"]
    tool_result = result.messages[2]
    assert isinstance(tool_result, ToolResultMessage)
    assert not tool_result.is_error
    assert tool_result.content[0] == TextContent(text="5")
    assert [type(e) for e in events if isinstance(e, ToolExecutionStart | ToolExecutionEnd)] == [
        ToolExecutionStart,
        ToolExecutionEnd,
    ]
    # The tool definition built from type hints and docstring reached the model.
    sent = provider.requests[0].tools[0]
    assert sent.name == "add" and sent.description == "Add two integers."
    assert sent.parameters["properties"]["a"] == {
        "type": "integer",
        "description": "The first number.",
    }


async def test_event_order_of_a_tool_turn_follows_phi_core() -> None:
    provider = ScriptedProvider([Reply(tool_calls=[call("add", {"a": 1, "b": 1})]), "two"])
    events: list[Any] = []
    await agent_loop("1+1", AgentContext(tools=[add]), config_for(provider), events=events.append)
    assert kinds(events)[:13] == [
        "agent_start",
        "turn_start",
        "message_start",  # the prompt
        "message_end",
        "turn_request",
        "message_start",  # assistant placeholder
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_end",
        "message_start",  # tool result
        "message_end",
        "turn_end",
    ]


async def test_cancelled_before_the_call_ends_with_one_agent_end(strict_loop: list[Any]) -> None:
    token = CancelToken()
    token.cancel()
    events: list[Any] = []
    result = await agent_loop(
        "hi",
        AgentContext(),
        config_for(ScriptedProvider(["x"])),
        events=events.append,
        cancel=token,
    )
    assert len(result.messages) <= 2
    assert result.reason == "cancelled"
    assert kinds(events).count("agent_end") == 1


async def test_continue_on_tool_result_produces_an_assistant_message_first() -> None:
    provider = ScriptedProvider(["Continuing."])
    context = AgentContext(
        agent_id="a",
        session_id="s",
        messages=[
            UserMessage.text("run it"),
            ToolResultMessage(tool_call_id="c1", tool_name="x", content=[TextContent(text="ok")]),
        ],
    )
    result = await agent_loop_continue(context, config_for(provider))
    assert isinstance(result.messages[0], AssistantMessage)
    assert [m.role for m in provider.requests[0].messages] == ["user", "tool_result"]


async def test_continue_preconditions_raise_clear_errors() -> None:
    config = config_for(ScriptedProvider(["x"]))
    with pytest.raises(
        UserError, match=r"agent_loop_continue requires context\.agent_id to be set"
    ):
        await agent_loop_continue(AgentContext(messages=[UserMessage.text("x")]), config)
    with pytest.raises(UserError, match="at least one message"):
        await agent_loop_continue(AgentContext(agent_id="a", session_id="s"), config)
    ends_with_assistant = AgentContext(
        agent_id="a", session_id="s", messages=[UserMessage.text("x"), AssistantMessage()]
    )
    with pytest.raises(UserError, match="assistant message"):
        await agent_loop_continue(ends_with_assistant, config)


async def test_empty_prompt_is_a_usage_error() -> None:
    with pytest.raises(UserError, match="empty"):
        await agent_loop("   ", AgentContext(), config_for(ScriptedProvider(["x"])))


async def test_failing_tool_gives_one_error_end_and_the_run_finishes() -> None:
    provider = ScriptedProvider([Reply(tool_calls=[call("explode")]), "It failed, sorry."])
    events: list[Any] = []
    result = await agent_loop(
        "go", AgentContext(tools=[explode]), config_for(provider), events=events.append
    )
    ends = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert len(ends) == 1 and ends[0].is_error
    assert "boom" in ends[0].result.content[0].text  # type: ignore[union-attr]
    assert isinstance(result.messages[-1], AssistantMessage)
    # The model saw the error result on its next turn.
    last_request = provider.requests[-1].messages[-1]
    assert isinstance(last_request, ToolResultMessage) and last_request.is_error


async def test_unknown_tool_yields_error_result_and_run_continues() -> None:
    provider = ScriptedProvider([Reply(tool_calls=[call("nope")]), "ok"])
    result = await agent_loop("go", AgentContext(tools=[add]), config_for(provider))
    tool_result = result.messages[2]
    assert isinstance(tool_result, ToolResultMessage) and tool_result.is_error
    assert "Tool nope not found" in tool_result.content[0].text  # type: ignore[union-attr]
    assert "add" in tool_result.content[0].text  # type: ignore[union-attr]
    assert result.text == "ok"


async def test_streamed_deltas_sit_between_message_start_and_end() -> None:
    provider = ScriptedProvider([Reply(["Hello", ", world!"])])
    events: list[Any] = []
    await agent_loop("hi", AgentContext(), config_for(provider), events=events.append)
    start = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, MessageStart) and isinstance(e.message, AssistantMessage)
    )
    end = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, MessageEnd) and isinstance(e.message, AssistantMessage)
    )
    updates = [(i, e) for i, e in enumerate(events) if isinstance(e, MessageUpdate)]
    assert "".join(e.delta.text for _, e in updates) == "Hello, world!"  # type: ignore[union-attr]
    assert all(start < i < end for i, _ in updates)


class _GatedProvider:
    """Streams one delta, then waits until the test has seen that delta in its sink."""

    name = "gated"

    def __init__(self) -> None:
        self.seen = asyncio.Event()

    async def stream(self, request: StreamRequest) -> AsyncIterator[Any]:
        yield TextDelta(text="first")
        await self.seen.wait()
        yield TextDelta(text=" second")
        yield StreamDone(
            AssistantMessage(content=[TextContent(text="first second")], model="g", provider="g")
        )


async def test_text_deltas_reach_the_sink_while_the_provider_is_still_streaming() -> None:
    provider = _GatedProvider()

    def sink(event: Any) -> None:
        if isinstance(event, MessageUpdate):
            provider.seen.set()

    # If deltas were buffered until the call returned, this would deadlock (guarded).
    async with asyncio.timeout(10):
        result = await agent_loop(
            "hi", AgentContext(), AgentLoopConfig(provider=provider), events=sink
        )
    assert result.text == "first second"


async def test_before_turn_false_on_third_call_stops_the_run() -> None:
    calls: list[int] = []

    def before_turn(messages: list[Any], turn: int) -> bool:
        calls.append(turn)
        return len(calls) < 3

    provider = ScriptedProvider(
        [
            Reply(tool_calls=[call("add", {"a": 1, "b": 1})]),
            Reply(tool_calls=[call("add", {"a": 2, "b": 2})]),
            "never",
        ]
    )
    result = await agent_loop(
        "go",
        AgentContext(tools=[add]),
        config_for(provider, hooks=LoopHooks(before_turn=before_turn)),
    )
    assert len(calls) == 3
    assert sum(isinstance(m, AssistantMessage) for m in result.messages) == 2
    assert result.reason == "vetoed"


async def test_after_turn_sees_a_growing_message_count_and_hooks_fire() -> None:
    seen: list[int] = []
    flags: dict[str, Any] = {}

    async def after_turn(messages: list[Any], usage: Usage) -> None:
        seen.append(len(messages))

    hooks = LoopHooks(
        before_loop=lambda msgs: flags.setdefault("before_loop", True),
        after_loop=lambda msgs, usage: flags.setdefault("after_loop", len(msgs)),
        after_turn=after_turn,
        before_tool_execution=lambda name, id, args: flags.setdefault("before_tool", name) == name,
        after_tool_execution=lambda name, id, err: flags.setdefault("after_tool", err),
    )
    provider = ScriptedProvider([Reply(tool_calls=[call("add", {"a": 1, "b": 1})]), "2"])
    await agent_loop("go", AgentContext(tools=[add]), config_for(provider, hooks=hooks))
    assert seen == [3, 4]
    assert flags == {
        "before_loop": True,
        "after_loop": 4,
        "before_tool": "add",
        "after_tool": False,
    }


async def test_before_loop_veto_emits_only_agent_end() -> None:
    events: list[Any] = []
    result = await agent_loop(
        "hi",
        AgentContext(),
        config_for(ScriptedProvider(["x"]), hooks=LoopHooks(before_loop=lambda m: False)),
        events=events.append,
    )
    assert kinds(events) == ["agent_end"]
    assert result.messages == [] and result.reason == "vetoed"


async def test_on_error_fires_once_with_the_provider_error_text() -> None:
    errors: list[str] = []
    provider = ScriptedProvider(default=Fail(NetworkError("connection reset")))
    result = await agent_loop(
        "hi",
        AgentContext(),
        config_for(
            provider,
            retry=RetryPolicy(max_retries=2, base_delay=0, jitter=0),
            hooks=LoopHooks(on_error=errors.append),
        ),
    )
    assert provider.calls == 3  # first attempt + 2 retries
    assert len(errors) == 1 and "connection reset" in errors[0]
    final = result.final_message
    assert final is not None and final.stop_reason == "error"
    assert "connection reset" in (final.error_message or "")
    assert result.reason == "error"


async def test_rate_limited_three_times_then_success() -> None:
    provider = ScriptedProvider([Fail(RateLimitedError("slow down"))] * 3 + ["finally"])
    result = await agent_loop("hi", AgentContext(), config_for(provider))
    assert provider.calls == 4
    assert [m.role for m in result.messages] == ["user", "assistant"]
    assert result.text == "finally"


async def test_auth_errors_are_not_retried() -> None:
    provider = ScriptedProvider(default=Fail(AuthError("bad key")))
    result = await agent_loop("hi", AgentContext(), config_for(provider))
    assert provider.calls == 1
    assert result.reason == "error"
    provider2 = ScriptedProvider(default=Fail(NetworkError("down")))
    await agent_loop("hi", AgentContext(), config_for(provider2, retry=RetryPolicy.none()))
    assert provider2.calls == 1


async def test_preset_identity_is_reported_and_continuations_carry_parent() -> None:
    events: list[Any] = []
    context = AgentContext(session_id="ses-test", loop_id="ses-test.anthropic-opus.1")
    await agent_loop("hi", context, config_for(ScriptedProvider(["a"])), events=events.append)
    start = next(e for e in events if isinstance(e, AgentStart))
    assert start.loop_id == "ses-test.anthropic-opus.1" and start.session_id == "ses-test"
    assert all(e.loop_id == "ses-test.anthropic-opus.1" for e in events)

    context.messages.append(UserMessage.text("again"))
    context.loop_id = "ses-test.mock.mock.2"
    context.parent_loop_id = "ses-test.mock.mock.1"
    context.continuation_kind = "rerun"
    events.clear()
    await agent_loop_continue(context, config_for(ScriptedProvider(["b"])), events=events.append)
    start = next(e for e in events if isinstance(e, AgentStart))
    assert (start.loop_id, start.parent_loop_id, start.continuation_kind) == (
        "ses-test.mock.mock.2",
        "ses-test.mock.mock.1",
        "rerun",
    )
    turn = next(e for e in events if isinstance(e, TurnStart))
    assert turn.triggered_by == "continuation"


def test_ensure_ids_fills_missing_ids_idempotently() -> None:
    context = AgentContext(session_id="keep")
    context.ensure_ids()
    ids = (context.agent_id, context.session_id, context.loop_id)
    assert all(ids) and context.session_id == "keep"
    context.ensure_ids()
    assert (context.agent_id, context.session_id, context.loop_id) == ids


def test_loop_id_segment_follows_phi_core() -> None:
    config = AgentLoopConfig(model=ModelConfig(provider="openai", id="gpt-4o.mini_x"))
    assert config.segment() == "openai.gpt-4o-mini-x"
    assert AgentLoopConfig(model=config.model, thinking="high").segment().endswith(".thinking")
    assert AgentLoopConfig(model=config.model, config_id="fast").segment() == "fast"


async def test_usage_per_turn_and_summed_over_the_run() -> None:
    usage = Usage(input=100, output=50, reasoning=25)
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("add", {"a": 1, "b": 2})], usage=usage), Reply("3", usage=usage)]
    )
    events: list[Any] = []
    result = await agent_loop(
        "go", AgentContext(tools=[add]), config_for(provider), events=events.append
    )
    assert [e.usage for e in events if isinstance(e, TurnEnd)] == [usage, usage]
    end = next(e for e in events if isinstance(e, AgentEnd))
    assert (end.usage.input, end.usage.output, end.usage.reasoning) == (200, 100, 50)
    assert result.usage == end.usage


async def test_cost_budget_stops_after_the_turn_that_exceeded_it() -> None:
    # 1M input tokens at $1/M = $1.00 for the first turn; the budget is $0.50.
    model = ModelConfig(provider="scripted", id="m", api="scripted", pricing=Pricing(input=1.0))
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("add", {"a": 1, "b": 1})], usage=Usage(input=1_000_000)), "x"]
    )
    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(tools=[add]),
        config_for(
            provider, model=model, limits=ExecutionLimits(max_total_tokens=None, max_cost=0.5)
        ),
        events=events.append,
    )
    assert kinds(events).count("turn_start") == 1
    assert kinds(events)[-1] == "agent_end"
    assert result.reason == "limit"
    assert result.cost_usd == pytest.approx(1.0)
    assert result.messages[-1].content[0].text.startswith("[Agent stopped: Max cost reached")  # type: ignore[union-attr]


async def test_a_turn_cannot_spend_past_max_cost_or_max_total_tokens() -> None:
    # $10 per million output tokens; $0.01 left allows at most 1000 output tokens
    model = ModelConfig(
        provider="scripted", id="m", api="scripted", pricing=Pricing(input=0.0, output=10.0)
    )
    provider = ScriptedProvider(default=Reply("word " * 4000, usage=Usage(input=5, output=0)))
    result = await agent_loop(
        "go",
        AgentContext(),
        config_for(provider, model=model, limits=ExecutionLimits(max_cost=0.01)),
    )
    assert provider.requests[0].max_tokens == 1000  # lowered from the model's 4096
    assert result.messages[-1].stop_reason == "length"  # type: ignore[union-attr]

    tokens = ScriptedProvider(default=Reply("word " * 4000))
    await agent_loop(
        "go",
        AgentContext(),
        config_for(tokens, max_tokens=300, limits=ExecutionLimits(max_total_tokens=200)),
    )
    sent = tokens.requests[0]
    assert sent.max_tokens is not None and 0 < sent.max_tokens < 200  # minus the input estimate

    roomy = ScriptedProvider(default=Reply("ok"))
    await agent_loop("go", AgentContext(), config_for(roomy, limits=ExecutionLimits()))
    assert roomy.requests[0].max_tokens is None  # far from every limit: nothing is changed


async def test_a_cap_is_compared_with_what_the_provider_sends_not_the_models_limit() -> None:
    # $10 per million output tokens; $0.10 allows 10,000 output tokens: above the model's 4096,
    # below the 17,408 a thinking provider raises it to (Anthropic: budget 16,384 + 1024)
    model = ModelConfig(
        provider="scripted", id="m", api="scripted", pricing=Pricing(input=0.0, output=10.0)
    )

    class Thinking(ScriptedProvider):
        def output_ceiling(self, request: StreamRequest) -> int:
            return request.max_tokens or 17408

    limits = ExecutionLimits(max_cost=0.1)
    plain, thinking = ScriptedProvider(default=Reply("ok")), Thinking(default=Reply("ok"))
    await agent_loop("go", AgentContext(), config_for(plain, model=model, limits=limits))
    await agent_loop("go", AgentContext(), config_for(thinking, model=model, limits=limits))
    assert plain.requests[0].max_tokens is None  # the model's 4096 fits the cap: unchanged
    assert thinking.requests[0].max_tokens == 10000  # 17,408 would not: capped


async def test_a_turn_whose_input_alone_passes_the_limits_is_not_sent() -> None:
    usage = Usage(input=150, output=10)
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("add", {"a": 1, "b": 1})], usage=usage), "never"]
    )
    events: list[Any] = []
    result = await agent_loop(
        "x " * 200,  # ~134 input tokens by the cautious estimate
        AgentContext(tools=[add]),
        config_for(provider, limits=ExecutionLimits(max_total_tokens=300)),
        events=events.append,
    )
    assert provider.calls == 1  # the second turn (160 used + ~140 input) was refused unsent
    assert result.reason == "limit"
    assert "does not fit the run's limits" in (result.error or "")
    assert kinds(events).count("agent_end") == 1


async def test_max_turns_limit_appends_a_stop_message() -> None:
    provider = ScriptedProvider(default=Reply(tool_calls=[call("add", {"a": 1, "b": 1})]))
    result = await agent_loop(
        "loop forever",
        AgentContext(tools=[add]),
        config_for(provider, limits=ExecutionLimits(max_turns=2)),
    )
    assert provider.calls == 2
    assert result.reason == "limit"
    assert "Max turns reached (2/2)" in result.messages[-1].content[0].text  # type: ignore[union-attr]


def test_execution_tracker_reports_the_first_violated_limit() -> None:
    tracker = ExecutionTracker(ExecutionLimits(max_turns=2, max_total_tokens=10))
    assert tracker.check_limits() is None
    tracker.record_turn(20)
    assert tracker.check_limits() == "Max tokens reached (20/10)"
    tracker.record_turn(0)
    assert tracker.check_limits() == "Max turns reached (2/2)"


# --------------------------------------------------------------------------- the fixes


async def test_every_request_carries_the_full_conversation() -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("add", {"a": 1, "b": 2})]), "3", "second answer", "third"]
    )
    context = AgentContext(system_prompt="be brief", tools=[add])
    config = config_for(provider)
    await agent_loop("first question", context, config)
    # Later turn of the same run: prompt, tool call and tool result.
    assert [m.role for m in provider.requests[1].messages] == ["user", "assistant", "tool_result"]
    # A second agent_loop over the same context sends the whole first exchange.
    await agent_loop("second question", context, config)
    second = provider.requests[2]
    assert [m.role for m in second.messages] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "user",
    ]
    assert second.system_prompt == "be brief"
    # agent_loop_continue sends everything too.
    context.messages.append(UserMessage.text("third question"))
    await agent_loop_continue(context, config)
    assert len(provider.requests[3].messages) == 7


async def test_a_loaded_history_is_sent_on_the_first_call() -> None:
    history = [UserMessage.text("earlier"), AssistantMessage(content=[TextContent(text="reply")])]
    provider = ScriptedProvider(["now"])
    await agent_loop("next", AgentContext(messages=list(history)), config_for(provider))
    assert [m.role for m in provider.requests[0].messages] == ["user", "assistant", "user"]


async def test_extension_messages_never_reach_the_model() -> None:
    from phi_core.types import ExtensionMessage

    provider = ScriptedProvider(["ok"])
    context = AgentContext(messages=[ExtensionMessage(kind="note", data={"x": 1})])
    await agent_loop("hi", context, config_for(provider))
    assert [m.role for m in provider.requests[0].messages] == ["user"]
    assert context.messages[0].role == "extension"


async def test_structured_output_request_reaches_the_provider_and_turn_request() -> None:
    schema = {"type": "object", "properties": {"winner": {"type": "integer"}}}
    fmt = ResponseFormat(schema=schema)
    provider = ScriptedProvider(['{"winner": 1}'])
    events: list[Any] = []
    await agent_loop(
        "pick",
        AgentContext(),
        config_for(provider, response_format=fmt, temperature=0.1, max_tokens=20),
        events=events.append,
    )
    assert provider.requests[0].response_format == fmt
    payload = next(e for e in events if isinstance(e, TurnRequest)).payload
    assert payload["response_format"]["schema"] == schema
    assert payload["temperature"] == 0.1 and payload["max_tokens"] == 20
