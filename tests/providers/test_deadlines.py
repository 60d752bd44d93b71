"""Deadlines of every model call, enforced in the one call path: a real ``openai`` SDK provider
against a local OpenAI-compatible server (127.0.0.1) that stalls or drips."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from phi_core.context.limits import ExecutionLimits
from phi_core.errors import CallTimeoutError, UserError
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.metering import Budget, Meter, metering
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.providers.call import ModelCall
from phi_core.providers.deadlines import CallDeadlines, deadline_scope
from phi_core.providers.registry import get_provider
from phi_core.providers.retry import RetryPolicy
from phi_core.testing import Hang, Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import UserMessage

from .fakes import FakeServer, Stream
from .fakes.openai_wire import chat_stream, chunk, text_reply


def _model(url: str) -> ModelConfig:
    return ModelConfig(
        provider="openai", id="gpt-4o-mini", base_url=url, api_key="sk-test-deadlines-0001"
    )  # type: ignore[arg-type]


def _partial_then_more(text: str = "The answer is forty") -> list[bytes]:
    """A reply whose first delta arrives, followed by more that never comes (stall) or comes
    one byte at a time (drip)."""
    return chat_stream(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": text}),
        *[chunk({"content": " and more"}) for _ in range(50)],
        chunk({}, "stop"),
    )


async def _call(url: str, deadlines: CallDeadlines, meter: Meter) -> ModelCall:
    model = _model(url)
    request = StreamRequest(model=model, messages=[UserMessage.text("hi")])
    with metering(meter):
        mc = ModelCall(get_provider(model), request, retry=RetryPolicy.none(), deadlines=deadlines)
        async for _ in mc.stream():
            pass
    return mc


async def test_a_stalled_stream_ends_within_the_total_deadline_and_keeps_its_usage(
    strict_loop: Any,
) -> None:
    meter = Meter()
    async with FakeServer([Stream(_partial_then_more(), stall_after=2)]) as server:
        started = time.monotonic()
        with pytest.raises(CallTimeoutError) as caught:
            await _call(server.url, CallDeadlines(total=2.0), meter)
        elapsed = time.monotonic() - started
    assert 2.0 <= elapsed < 3.0, elapsed
    error = caught.value
    assert error.kind == "timeout" and error.deadline == "total"
    assert "CallDeadlines.total" in str(error)
    record = meter.calls[-1]
    assert record.error_kind == "timeout"
    assert record.usage.output > 0, "the text that streamed before the stall is counted"


async def test_a_dripping_stream_ends_at_the_total_deadline(strict_loop: Any) -> None:
    meter = Meter()
    stream = Stream(_partial_then_more(), drip=1.0)  # one byte a second: no read ever waits long
    async with FakeServer([stream]) as server:
        started = time.monotonic()
        with pytest.raises(CallTimeoutError) as caught:
            await _call(server.url, CallDeadlines(total=3.0, idle=None), meter)
        elapsed = time.monotonic() - started
    assert 3.0 <= elapsed < 4.0, elapsed
    assert caught.value.deadline == "total"


async def test_silence_after_the_first_delta_trips_the_idle_deadline(strict_loop: Any) -> None:
    async with FakeServer([Stream(_partial_then_more(), stall_after=2)]) as server:
        started = time.monotonic()
        with pytest.raises(CallTimeoutError) as caught:
            await _call(server.url, CallDeadlines(idle=0.5, total=30.0), Meter())
        elapsed = time.monotonic() - started
    assert caught.value.deadline == "idle"
    assert elapsed < 5.0


async def test_no_first_byte_is_retried_then_fails_on_the_first_byte_deadline(
    strict_loop: Any,
) -> None:
    stalled = Stream(_partial_then_more(), stall_after=0)
    async with FakeServer([stalled, Stream(text_reply("hello"))]) as server:
        model = _model(server.url)
        request = StreamRequest(model=model, messages=[UserMessage.text("hi")])
        mc = ModelCall(
            get_provider(model),
            request,
            retry=RetryPolicy(max_retries=1, base_delay=0.01),
            deadlines=CallDeadlines(first_byte=0.5),
        )
        async for _ in mc.stream():
            pass
    assert mc.message is not None and mc.message.text == "hello"
    assert len(server.requests) == 2, "the stalled attempt was retried once"


async def test_the_enclosing_deadline_scope_ends_a_call_with_deadlines_off(
    strict_loop: Any,
) -> None:
    async with FakeServer([Stream(_partial_then_more(), stall_after=2)]) as server:
        started = time.monotonic()
        with deadline_scope(1.0), pytest.raises(CallTimeoutError) as caught:
            await _call(server.url, CallDeadlines.none(), Meter())
    assert caught.value.deadline == "run"
    assert time.monotonic() - started < 2.0


async def test_a_wall_clock_budget_ends_a_call_that_is_still_streaming(strict_loop: Any) -> None:
    async with FakeServer([Stream(_partial_then_more(), stall_after=2)]) as server:
        meter = Meter(Budget(max_wall_s=1.5))
        started = time.monotonic()
        with pytest.raises(CallTimeoutError) as caught:
            await _call(server.url, CallDeadlines.none(), meter)
    assert caught.value.deadline == "run"
    assert time.monotonic() - started < 2.5
    assert meter.calls[-1].error_kind == "timeout" and meter.calls[-1].usage.output > 0


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "5", True])
def test_deadlines_refuse_values_that_are_not_positive_seconds(bad: Any) -> None:
    with pytest.raises(UserError, match=r"CallDeadlines\.idle"):
        CallDeadlines(idle=bad)


async def test_max_duration_ends_an_agent_loop_mid_stream(strict_loop: Any) -> None:
    async with FakeServer([Stream(_partial_then_more(), stall_after=2)]) as server:
        config = AgentLoopConfig(
            model=_model(server.url),
            retry=RetryPolicy.none(),
            limits=ExecutionLimits(max_duration=1.5),
        )
        started = time.monotonic()
        result = await agent_loop("hi", AgentContext(), config)
    assert time.monotonic() - started < 2.5
    assert result.reason == "limit"
    assert result.error_kind == "timeout"
    assert result.error is not None and "Max duration reached mid-stream" in result.error
    assert result.usage.output > 0, "what streamed before the deadline is counted"


async def test_max_duration_cancels_a_tool_that_is_still_running(strict_loop: Any) -> None:
    finished: list[str] = []

    @tool
    async def slow() -> str:
        """Takes a minute."""
        await asyncio.sleep(60)
        finished.append("slow")
        return "done"

    provider = ScriptedProvider([Reply(tool_calls=[call("slow")]), Hang()])
    config = AgentLoopConfig(provider=provider, limits=ExecutionLimits(max_duration=1.0))
    events: list[Any] = []
    started = time.monotonic()
    result = await agent_loop("go", AgentContext(tools=[slow]), config, events=events.append)
    assert time.monotonic() - started < 2.0
    assert result.reason == "limit" and result.error_kind == "timeout"
    assert result.error is not None and "while tools ran" in result.error
    assert finished == []
    assert sum(e.type == "agent_end" for e in events) == 1
    assert provider.calls == 1, "no turn starts after the deadline"


async def test_a_steady_stream_longer_than_the_idle_deadline_is_not_cut_and_a_late_stall_is(
    strict_loop: Any,
) -> None:
    """The timer is re-armed lazily: chunks every 50 ms for about 1.5 s pass an idle deadline
    of 0.3 s (the first arming's moment goes by many times), and the silence after them trips
    it — counted from the last chunk, not from the first."""
    pieces = [chunk({"role": "assistant", "content": ""})]
    pieces += [chunk({"content": f"w{i} "}) for i in range(30)]
    steady = Stream(chat_stream(*pieces, chunk({}, "stop")), interval=0.05)
    stalling = Stream(chat_stream(*pieces, chunk({}, "stop")), interval=0.05, stall_after=25)
    async with FakeServer([steady, stalling]) as server:
        whole = await _call(server.url, CallDeadlines(idle=0.3, total=30.0), Meter())
        started = time.monotonic()
        with pytest.raises(CallTimeoutError) as caught:
            await _call(server.url, CallDeadlines(idle=0.3, total=30.0), Meter())
        elapsed = time.monotonic() - started
    assert whole.message is not None and whole.message.text.startswith("w0 w1")
    assert whole.message.text.count("w") == 30
    assert caught.value.deadline == "idle"
    assert 25 * 0.05 < elapsed < 10.0  # after the 25 chunks that came, not at 0.3 s


async def test_a_cancellation_from_outside_stays_a_cancellation(strict_loop: Any) -> None:
    """The deadline timer turns only its own cancellation into CallTimeoutError."""
    async with FakeServer([Stream(_partial_then_more(), stall_after=2)]) as server:
        task = asyncio.create_task(_call(server.url, CallDeadlines(idle=0.5, total=30.0), Meter()))
        await asyncio.sleep(0.2)  # the stream is waiting for its third chunk
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
