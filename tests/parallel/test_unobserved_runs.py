"""A run nobody listens to builds no events beyond each run's AgentEnd (the hot-path rule)."""

from __future__ import annotations

from typing import Any

import pytest

from phi_core import events as events_module
from phi_core.loop import AgentContext, agent_loop
from phi_core.parallel import PickFirstEvaluation, agent_loop_parallel
from phi_core.testing import Reply

from .helpers import Recorder, branch


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The type of every event object constructed during the test."""
    types: list[str] = []
    original_init = events_module._Event.__init__
    original_construct = events_module.MessageUpdate.model_construct

    def init(self: Any, **data: Any) -> None:
        types.append(type(self).__name__)
        original_init(self, **data)

    def construct(*args: Any, **kwargs: Any) -> Any:
        types.append("MessageUpdate")
        return original_construct(*args, **kwargs)

    monkeypatch.setattr(events_module._Event, "__init__", init)
    monkeypatch.setattr(events_module.MessageUpdate, "model_construct", construct)
    return types


async def test_an_unobserved_loop_builds_only_its_agent_end(built: list[str]) -> None:
    config = branch(Reply("one two three", chunks=3))
    result = await agent_loop("hi", AgentContext(), config)
    assert result.text == "one two three"
    assert built == ["AgentEnd"]


async def test_an_observed_loop_still_gets_every_event_in_order(built: list[str]) -> None:
    recorder = Recorder()
    config = branch(Reply("one two three", chunks=3))
    await agent_loop("hi", AgentContext(), config, events=recorder)
    assert recorder.types()[0] == "agent_start" and recorder.types()[-1] == "agent_end"
    assert recorder.types().count("message_update") == 3
    assert "MessageUpdate" in built and "TurnStart" in built


async def test_an_unobserved_race_builds_no_per_delta_events_in_its_branches(
    built: list[str],
) -> None:
    configs = [branch(Reply(f"answer {i} here", chunks=3), config_id=f"b{i}") for i in range(3)]
    result = await agent_loop_parallel("hi", AgentContext(), configs, PickFirstEvaluation())
    assert [o.status for o in result.outcomes] == ["ok", "ok", "ok"]
    assert "MessageUpdate" not in built and "TurnRequest" not in built
    assert built.count("AgentEnd") == 3  # each branch still ends with exactly one


async def test_an_observed_race_forwards_every_branch_event(built: list[str]) -> None:
    recorder = Recorder()
    configs = [branch(Reply(f"answer {i} here", chunks=3), config_id=f"b{i}") for i in range(3)]
    await agent_loop_parallel("hi", AgentContext(), configs, PickFirstEvaluation(), events=recorder)
    assert recorder.types().count("message_update") == 9
    assert recorder.types().count("agent_end") == 3
    assert recorder.types()[0] == "parallel_loop_start"
    assert recorder.types()[-1] == "parallel_loop_end"
