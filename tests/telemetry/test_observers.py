"""Observers (``phi_core.events.add_observer``): every event of every run, each exactly once."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from phi_core.events import Emitter, ToolExecutionUpdate, add_observer, remove_observer
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.parallel import LlmJudgeEvaluation, agent_loop_parallel
from phi_core.providers import RetryPolicy
from phi_core.subagents import SubAgentTool
from phi_core.testing import Reply, ScriptedProvider, call

pytestmark = pytest.mark.usefixtures("strict_loop")


def config(*script: Any, name: str = "p") -> AgentLoopConfig:
    return AgentLoopConfig(
        model=f"{name}:m",
        provider=ScriptedProvider(list(script), name=name),
        retry=RetryPolicy.none(),
    )


class Seen:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    def counts(self) -> Counter[int]:
        return Counter(id(e) for e in self.events)


async def test_forwarded_events_reach_an_observer_once_and_a_sink_sees_the_same_events() -> None:
    seen, sink = Seen(), Seen()
    remove = add_observer(seen)
    try:
        child = SubAgentTool(
            "helper", "child:m", provider=ScriptedProvider([Reply("a b c", chunks=3)])
        )
        judge = config("1", name="judge")  # a judge forwards through `events.emit`
        tool_branch = config(Reply(tool_calls=[call("helper", {"task": "t"})]), "done", name="x")
        context = AgentContext(session_id="ses", tools=[child.with_retry(RetryPolicy.none())])
        await agent_loop_parallel(
            "q",
            context,
            [tool_branch, config("plain", name="y")],
            LlmJudgeEvaluation(judge),
            events=sink,
        )
    finally:
        remove()
    assert seen.events and max(seen.counts().values()) == 1
    assert [id(e) for e in seen.events] == [id(e) for e in sink.events]
    # the sub-agent's streamed text becomes tool updates, emitted from tasks its forwarder
    # started while it delivered another event: those are observed too (the list above is equal)
    updates = [e for e in seen.events if isinstance(e, ToolExecutionUpdate)]
    assert "".join(u.text for u in updates) == "a b c"


async def test_an_async_sink_forwarding_to_another_emitter_is_not_observed_twice() -> None:
    seen, outer = Seen(), Seen()
    forward_to = Emitter(outer)

    async def relay(event: Any) -> None:
        forward_to.emit(event)

    remove = add_observer(seen)
    try:
        await agent_loop("hi", AgentContext(), config("hello"), events=relay)
    finally:
        remove()
    assert outer.events and [id(e) for e in outer.events] == [id(e) for e in seen.events]
    assert max(seen.counts().values()) == 1


async def test_an_observer_that_raises_is_logged_once_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    def broken(event: Any) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("observer bug")

    add_observer(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="phi_core.events"):
            result = await agent_loop("hi", AgentContext(), config("hello"))
    finally:
        remove_observer(broken)
    assert result.ok and result.text == "hello"
    assert calls > 3  # it kept receiving events
    assert [r.message for r in caplog.records].count(
        f"event observer {broken!r} raised; it keeps receiving events"
    ) == 1


async def test_a_removed_observer_sees_no_later_run() -> None:
    seen = Seen()
    remove = add_observer(seen)
    await agent_loop("one", AgentContext(), config("a"))
    count = len(seen.events)
    remove()
    await agent_loop("two", AgentContext(), config("b"))
    assert count > 0 and len(seen.events) == count
    with pytest.raises(TypeError, match="needs a callable"):
        add_observer("not callable")  # type: ignore[arg-type]
