"""Event delivery on the hard paths: cancelled callers with async sinks, sinks that raise
BaseExceptions, leaving a stream early, and tools cancelled mid-run."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from phi_core import PickFirstEvaluation, agent_loop_parallel
from phi_core import events as events_module
from phi_core.cancel import CancelToken
from phi_core.loop import AgentContext, AgentLoopConfig, LoopHooks, agent_loop, agent_loop_stream
from phi_core.providers import RetryPolicy
from phi_core.testing import Hang, Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import ToolResultMessage


def cfg(*script: Any, name: str = "p", **kw: Any) -> AgentLoopConfig:
    return AgentLoopConfig(
        model=f"{name}:m",
        provider=ScriptedProvider(list(script), name=name),
        retry=RetryPolicy.none(),
        **kw,
    )


def others() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]


class GatedSink:
    """An async sink that holds every event until ``gate`` is set (a slow websocket, say)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.first = asyncio.Event()
        self.types: list[str] = []

    async def __call__(self, event: Any) -> None:
        self.first.set()
        await self.gate.wait()
        self.types.append(event.type)


# ---------------------------------------------------------------- 1. async sink, caller cancels


async def _cancel_while_flushing(start: Any, sink: GatedSink) -> asyncio.Task[Any]:
    """Start a run that finishes at once, and cancel its caller while the run waits for the
    slow sink to take the queued events (the end event among them)."""
    task = asyncio.create_task(start(sink))
    await sink.first.wait()
    await asyncio.sleep(0.05)  # the run is over; its emitter flushes the queue
    assert not task.done()
    task.cancel()
    asyncio.get_running_loop().call_later(0.05, sink.gate.set)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()  # the cancellation is not swallowed
    return task


async def test_async_sink_gets_agent_end_when_the_caller_cancels(
    strict_loop: list[Any],
) -> None:
    sink = GatedSink()
    await _cancel_while_flushing(
        lambda s: agent_loop("hi", AgentContext(), cfg(Reply("a b c", chunks=3)), events=s), sink
    )
    assert sink.types[0] == "agent_start"
    assert sink.types.count("agent_end") == 1
    assert sink.types[-1] == "agent_end"


async def test_async_sink_gets_parallel_loop_end_when_the_caller_cancels(
    strict_loop: list[Any],
) -> None:
    sink = GatedSink()
    await _cancel_while_flushing(
        lambda s: agent_loop_parallel(
            "hi",
            AgentContext(session_id="s", agent_id="a"),
            [cfg("A", name="a"), cfg("B", name="b")],
            PickFirstEvaluation(),
            events=s,
        ),
        sink,
    )
    assert sink.types.count("parallel_loop_end") == 1
    assert sink.types[-1] == "parallel_loop_end"
    assert sink.types.count("agent_end") == 2


async def test_a_sink_that_never_returns_delays_a_cancelled_caller_only_for_the_grace(
    strict_loop: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_module, "CLOSE_GRACE_S", 0.1)
    sink = GatedSink()  # the gate is never opened
    task = asyncio.create_task(agent_loop("hi", AgentContext(), cfg("ok"), events=sink))
    await sink.first.wait()
    await asyncio.sleep(0.02)
    loop = asyncio.get_running_loop()
    started = loop.time()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.time() - started < 1.0
    assert sink.types == []
    assert others() == []  # the drain task was stopped too


# ---------------------------------------------------------------- 2. sinks raising BaseException


class SinkFault(BaseException):
    pass


@pytest.mark.parametrize("error", [asyncio.CancelledError, SinkFault])
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_sink_raising_a_base_exception_is_isolated(
    strict_loop: list[Any], caplog: pytest.LogCaptureFixture, kind: str, error: type
) -> None:
    seen: list[str] = []

    def sync_sink(event: Any) -> None:
        seen.append(event.type)
        if event.type == "agent_start":
            raise error()

    async def async_sink(event: Any) -> None:
        await asyncio.sleep(0)
        sync_sink(event)

    sink = sync_sink if kind == "sync" else async_sink
    with caplog.at_level(logging.ERROR, logger="phi_core.events"):
        result = await agent_loop("hi", AgentContext(), cfg("ok"), events=sink)
    assert result.reason == "completed" and result.text == "ok"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert "sink raised" in caplog.text
    if kind == "async":  # an async sink keeps receiving after a failure
        assert seen[-1] == "agent_end"


@pytest.mark.parametrize("error", [asyncio.CancelledError, SinkFault])
async def test_a_race_survives_a_sink_raising_a_base_exception(
    strict_loop: list[Any], error: type
) -> None:
    def sink(event: Any) -> None:
        if event.type == "agent_start":
            raise error()

    result = await agent_loop_parallel(
        "hi",
        AgentContext(session_id="s", agent_id="a"),
        [cfg("A", name="a"), cfg("B", name="b")],
        PickFirstEvaluation(),
        events=sink,
    )
    assert result.selected_index is not None and not result.cancelled
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


# ---------------------------------------------------------------- 3. leaving a stream early


def slow_tool(state: dict[str, bool], started: asyncio.Event | None = None) -> Any:
    @tool
    async def slow(x: int) -> str:
        """Slow tool."""
        state["running"] = True
        if started is not None:
            started.set()
        try:
            await asyncio.sleep(5)
        finally:
            state["running"] = False
        return "never"

    return slow


def tool_run_config() -> AgentLoopConfig:
    return cfg(Reply(tool_calls=[call("slow", {"x": 1})]), Reply("done"))


async def test_break_cancels_the_run_without_waiting_for_a_finaliser(
    strict_loop: list[Any],
) -> None:
    state = {"running": False}
    context = AgentContext(tools=[slow_tool(state)])
    stream = agent_loop_stream("go", context, tool_run_config())
    async for event in stream:
        if event.type == "tool_execution_start":
            break
    await asyncio.sleep(0)  # one step of the event loop
    assert state["running"] is False
    assert others() == []
    with pytest.raises(asyncio.CancelledError):
        await stream


async def test_async_with_ends_the_run_before_the_next_line(strict_loop: list[Any]) -> None:
    state = {"running": False}
    context = AgentContext(tools=[slow_tool(state)])
    seen: list[str] = []
    async with agent_loop_stream("go", context, tool_run_config()) as events:
        async for event in events:
            seen.append(event.type)
            if event.type == "tool_execution_start":
                break
    assert state["running"] is False
    assert others() == []
    # The run ended properly: its tool call has its "Cancelled" result in the conversation.
    results = [m for m in context.messages if isinstance(m, ToolResultMessage)]
    assert [r.content[0].text for r in results] == ["Cancelled"]  # type: ignore[union-attr]


async def test_aclose_on_the_iterator_ends_the_run(strict_loop: list[Any]) -> None:
    state = {"running": False}
    stream = agent_loop_stream("go", AgentContext(tools=[slow_tool(state)]), tool_run_config())
    iterator = aiter(stream)
    async for event in iterator:
        if event.type == "tool_execution_start":
            break
    await iterator.aclose()  # type: ignore[attr-defined]
    assert state["running"] is False
    assert others() == []


async def test_a_cancelled_consumer_stops_the_run_first(strict_loop: list[Any]) -> None:
    stream = agent_loop_stream("hi", AgentContext(), cfg(Hang("partial")))
    streaming = asyncio.Event()

    async def consume() -> None:
        async for event in stream:
            if event.type == "message_update":
                streaming.set()

    consumer = asyncio.create_task(consume())
    await streaming.wait()
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert others() == []
    with pytest.raises(asyncio.CancelledError):
        await stream


async def test_a_full_iteration_still_gives_the_result(strict_loop: list[Any]) -> None:
    stream = agent_loop_stream("hi", AgentContext(), cfg(Reply("a b", chunks=2)))
    async with stream as events:
        seen = [event.type async for event in events]
    assert seen[0] == "agent_start" and seen[-1] == "agent_end"
    assert (await stream).text == "a b"


# ---------------------------------------------------------------- 4. tools cancelled mid-run


def _check_tool_events(types: list[str], events: list[Any], calls: int) -> None:
    starts = [e for e in events if e.type == "tool_execution_start"]
    ends = [e for e in events if e.type == "tool_execution_end"]
    assert sorted(e.tool_call_id for e in starts) == sorted(e.tool_call_id for e in ends)
    assert len({e.tool_call_id for e in ends}) == len(ends)  # one end per call
    assert types.count("turn_end") == 1
    turn_end = next(e for e in events if e.type == "turn_end")
    assert len(turn_end.tool_results) == calls
    assert all(r.is_error and r.content[0].text == "Cancelled" for r in turn_end.tool_results)
    for end in ends:
        assert end.is_error and end.cancelled and end.result.content[0].text == "Cancelled"
    tool_messages = [
        e.message
        for e in events
        if e.type == "message_end" and isinstance(e.message, ToolResultMessage)
    ]
    assert sorted(m.tool_call_id for m in tool_messages) == sorted(
        r.tool_call_id for r in turn_end.tool_results
    )
    assert types.index("turn_end") > max(i for i, t in enumerate(types) if t == "message_end")
    assert types.count("agent_end") == 1 and types[-1] == "agent_end"


@pytest.mark.parametrize("strategy", ["parallel", "sequential"])
@pytest.mark.parametrize("how", ["task", "token"])
async def test_a_tool_cancelled_mid_run_gets_its_end_and_the_turn_is_closed(
    strict_loop: list[Any], how: str, strategy: str
) -> None:
    state = {"running": False}
    started = asyncio.Event()
    events: list[Any] = []
    context = AgentContext(tools=[slow_tool(state, started)])
    token = CancelToken()
    config = cfg(
        Reply(tool_calls=[call("slow", {"x": 1}), call("slow", {"x": 2})]),
        Reply("done"),
        tool_execution=strategy,
    )
    task = asyncio.create_task(
        agent_loop("go", context, config, events=events.append, cancel=token)
    )
    await started.wait()
    if how == "task":
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        token.cancel()
        assert (await task).reason == "cancelled"
    types = [e.type for e in events]
    expected_starts = 2 if strategy == "parallel" else 1
    assert types.count("tool_execution_start") == expected_starts
    _check_tool_events(types, events, calls=2)
    results = [m for m in context.messages if isinstance(m, ToolResultMessage)]
    assert len(results) == 2


async def test_a_tool_cancelled_in_its_after_hook_keeps_its_result_and_one_end(
    strict_loop: list[Any],
) -> None:
    @tool
    async def quick(x: int) -> str:
        """Quick tool."""
        return f"got {x}"

    hooked = asyncio.Event()

    async def after(name: str, call_id: str, is_error: bool) -> None:
        hooked.set()
        await asyncio.Event().wait()

    events: list[Any] = []
    context = AgentContext(tools=[quick])
    config = cfg(
        Reply(tool_calls=[call("quick", {"x": 1})]),
        Reply("done"),
        hooks=LoopHooks(after_tool_execution=after),
    )
    task = asyncio.create_task(agent_loop("go", context, config, events=events.append))
    await hooked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    types = [e.type for e in events]
    assert types.count("tool_execution_start") == 1
    assert types.count("tool_execution_end") == 1
    turn_end = next(e for e in events if e.type == "turn_end")
    assert [r.content[0].text for r in turn_end.tool_results] == ["got 1"]
    results = [m for m in context.messages if isinstance(m, ToolResultMessage)]
    assert [r.content[0].text for r in results] == ["got 1"]  # type: ignore[union-attr]
    assert types[-1] == "agent_end"
