"""SessionRecorder behaviour (study §4.10, items 1-3 and 6-13)."""

from __future__ import annotations

from typing import Any

from phi_core.events import (
    AgentEnd,
    AgentStart,
    MessageEnd,
    ToolExecutionEnd,
    TurnEnd,
    TurnStart,
)
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop, agent_loop_continue
from phi_core.providers import RetryPolicy
from phi_core.sessions import (
    LoopRecord,
    Session,
    SessionRecorder,
    SessionRecorderConfig,
    Turn,
)
from phi_core.sessions._model import config_segment_from_loop_id, session_id_from_loop_id
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import AssistantMessage, ToolResultMessage, TurnId, UserMessage


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def config(provider: ScriptedProvider) -> AgentLoopConfig:
    return AgentLoopConfig(provider=provider, retry=RetryPolicy.none())


def context(**kw: Any) -> AgentContext:
    kw.setdefault("agent_id", "agent-1")
    kw.setdefault("session_id", "sess-1")
    return AgentContext(**kw)


async def test_single_loop_makes_one_completed_session_with_the_context_ids() -> None:
    recorder = SessionRecorder()
    ctx = context(loop_id="sess-1.scripted.1")
    await agent_loop("hi", ctx, config(ScriptedProvider(["hello"])), events=recorder)
    recorder.flush()
    [session] = recorder.drain_completed()
    assert (session.session_id, session.agent_id) == ("sess-1", "agent-1")
    [record] = session.loops
    assert record.loop_id == "sess-1.scripted.1"
    assert record.status == "completed" and record.rejection is None
    assert any(isinstance(m, AssistantMessage) for m in record.messages)
    assert record.config is not None and record.config.config_id == "scripted"


async def test_continuation_links_parent_and_child_both_ways() -> None:
    recorder = SessionRecorder()
    provider = ScriptedProvider(["one", "two"])
    ctx = context(loop_id="sess-1.s.1")
    await agent_loop("hi", ctx, config(provider), events=recorder)
    ctx.messages.append(UserMessage.text("more"))
    ctx.parent_loop_id, ctx.loop_id, ctx.continuation_kind = "sess-1.s.1", "sess-1.s.2", "default"
    await agent_loop_continue(ctx, config(provider), events=recorder)
    session = recorder.get_session("sess-1")
    assert session is not None and len(session.loops) == 2
    parent, child = session.loops
    assert parent.children_loop_ids == ["sess-1.s.2"]
    assert child.parent_loop_id == "sess-1.s.1" and child.continuation_kind == "default"
    assert [r.loop_id for r in session.root_loops()] == ["sess-1.s.1"]
    assert [r.loop_id for r in session.children_of("sess-1.s.1")] == ["sess-1.s.2"]
    assert [r.loop_id for r in session.loop_chain_to("sess-1.s.2")] == ["sess-1.s.1", "sess-1.s.2"]


async def test_streaming_deltas_are_recorded_only_when_asked() -> None:
    types: dict[bool, set[str]] = {}
    for include in (False, True):
        recorder = SessionRecorder(SessionRecorderConfig(include_streaming_events=include))
        provider = ScriptedProvider([Reply("a long answer", chunks=3)])
        await agent_loop("hi", context(), config(provider), events=recorder)
        [record] = recorder.sessions[0].loops
        types[include] = {e.event.type for e in record.events}
        assert [e.seq for e in record.events] == list(range(len(record.events)))
    assert "message_update" not in types[False]
    assert "message_update" in types[True]


def _start(loop_id: str, session: str = "s", parent: str | None = None, kind: Any = "initial"):
    return AgentStart(
        loop_id=loop_id,
        agent_id="a",
        session_id=session,
        parent_loop_id=parent,
        continuation_kind=kind,
    )


def test_two_children_link_to_one_parent_and_a_rerun_kind_is_kept() -> None:
    recorder = SessionRecorder()
    for event in [
        _start("s.x.1"),
        AgentEnd(loop_id="s.x.1"),
        _start("s.x.2", parent="s.x.1", kind="default"),
        AgentEnd(loop_id="s.x.2"),
        _start("s.x.3", parent="s.x.1", kind="rerun"),
        AgentEnd(loop_id="s.x.3"),
    ]:
        recorder.on_event(event)
    session = recorder.get_session("s")
    assert session is not None
    origin = session.get_loop("s.x.1")
    assert origin is not None and origin.parent_loop_id is None
    assert origin.children_loop_ids == ["s.x.2", "s.x.3"]
    rerun = session.get_loop("s.x.3")
    assert rerun is not None and rerun.continuation_kind == "rerun"


def _child_events() -> list[Any]:
    return [
        _start("child.sub.1", session="child", parent="parent.x.1"),
        AgentEnd(loop_id="child.sub.1"),
    ]


def _tool_end() -> ToolExecutionEnd:
    return ToolExecutionEnd(
        loop_id="parent.x.1",
        tool_call_id="call-1",
        tool_name="sub_agent",
        result=ToolResultMessage(tool_call_id="call-1", tool_name="sub_agent", content=[]),
        child_loop_id="child.sub.1",
    )


def _check_cross_session(recorder: SessionRecorder) -> None:
    parent = recorder.get_session("parent")
    child = recorder.get_session("child")
    assert parent is not None and child is not None
    loop = parent.get_loop("parent.x.1")
    assert loop is not None and loop.children_loop_ids == []
    [ref] = loop.child_loop_refs
    assert (ref.tool_call_id, ref.tool_name, ref.child_loop_id, ref.child_session_id) == (
        "call-1",
        "sub_agent",
        "child.sub.1",
        "child",
    )
    spawn = child.parent_spawn_ref
    assert spawn is not None
    assert (spawn.parent_session_id, spawn.parent_loop_id, spawn.tool_call_id) == (
        "parent",
        "parent.x.1",
        "call-1",
    )


def test_sub_agent_session_links_to_its_parent_loop() -> None:
    recorder = SessionRecorder()
    recorder.on_event(_start("parent.x.1", session="parent"))
    for event in _child_events():
        recorder.on_event(event)
    recorder.on_event(_tool_end())
    recorder.on_event(AgentEnd(loop_id="parent.x.1"))
    _check_cross_session(recorder)


def test_tool_end_before_the_child_starts_still_enriches_the_child_session() -> None:
    recorder = SessionRecorder()
    recorder.on_event(_start("parent.x.1", session="parent"))
    recorder.on_event(_tool_end())
    for event in _child_events():
        recorder.on_event(event)
    _check_cross_session(recorder)


def test_child_session_promoted_by_checkpoint_is_still_enriched() -> None:
    recorder = SessionRecorder()
    recorder.on_event(_start("parent.x.1", session="parent"))
    for event in _child_events():
        recorder.on_event(event)
    assert recorder.checkpoint() == 1
    recorder.on_event(_tool_end())
    _check_cross_session(recorder)


def test_flush_aborts_open_loops_and_discards_partial_turns() -> None:
    recorder = SessionRecorder()
    recorder.on_event(_start("s.x.1"))
    recorder.on_event(TurnStart(loop_id="s.x.1", turn_index=0))
    assert recorder.current_loop() is not None
    recorder.flush()
    assert recorder.current_loop() is None
    [session] = recorder.drain_completed()
    [record] = session.loops
    assert record.status == "aborted" and record.turns == []


def test_agent_end_during_an_open_turn_discards_the_partial_turn() -> None:
    recorder = SessionRecorder()
    recorder.on_event(_start("s.x.1"))
    recorder.on_event(TurnStart(loop_id="s.x.1", turn_index=0))
    recorder.on_event(AgentEnd(loop_id="s.x.1", reason="cancelled"))
    record = recorder.sessions[0].loops[0]
    assert record.turns == [] and record.status == "completed"
    assert record.end_reason == "cancelled"
    assert recorder.current_loop() is None


def test_malformed_loop_ids_and_missing_model_are_tolerated() -> None:
    assert session_id_from_loop_id("nodots") == "nodots"
    assert config_segment_from_loop_id("nodots") is None
    assert config_segment_from_loop_id("a.b") is None
    assert config_segment_from_loop_id("s.openai.gpt-4o.3") == "openai.gpt-4o"
    recorder = SessionRecorder()
    recorder.on_event(_start("plain"))
    recorder.on_event(AgentEnd(loop_id="plain", messages=[UserMessage.text("x")]))
    assert recorder.sessions[0].loops[0].config is None


async def test_turns_are_materialised_from_turn_events() -> None:
    recorder = SessionRecorder(SessionRecorderConfig(capture_turn_requests=True))
    provider = ScriptedProvider([Reply(tool_calls=[call("add", {"a": 1, "b": 2})]), "3"])
    await agent_loop("add 1 and 2", context(tools=[add]), config(provider), events=recorder)
    [record] = recorder.sessions[0].loops
    first, second = record.turns
    assert first.turn_id.turn_index == 0 and first.triggered_by == "user"
    assert isinstance(first.input_messages[0], UserMessage)
    assert first.output_message is not None and first.output_message.tool_calls
    assert [r.turn_id for r in first.tool_results] == [first.turn_id]
    assert first.request_payload is not None
    assert second.triggered_by == "continuation" and second.tool_results == []
    assert second.ended_at is not None and second.ended_at >= second.started_at
    again = Turn.model_validate_json(first.model_dump_json())
    assert again == first
    assert LoopRecord.model_validate_json(record.model_dump_json()) == record


async def test_single_turn_loop_has_one_user_turn_without_tool_calls() -> None:
    recorder = SessionRecorder()
    await agent_loop("hi", context(), config(ScriptedProvider(["hello"])), events=recorder)
    [turn] = recorder.sessions[0].loops[0].turns
    assert turn.turn_id.turn_index == 0 and turn.triggered_by == "user"
    assert turn.output_message is not None and not turn.output_message.tool_calls


def test_older_records_without_newer_fields_load_with_defaults() -> None:
    old = {
        "session_id": "s",
        "agent_id": "a",
        "scope": None,
        "loops": [
            {
                "loop_id": "s.x.1",
                "session_id": "s",
                "status": "Completed",
                "continuation_kind": None,
            },
            {
                "loop_id": "s.x.2",
                "session_id": "s",
                "continuation_kind": {"Rerun": {"tag": "2024-01-01T00:00:00Z"}},
                "turns": [
                    {"turn_id": {"loop_id": "s.x.2", "turn_index": 1}, "triggered_by": "FollowUp"}
                ],
            },
        ],
    }
    session = Session.model_validate(old)
    assert session.scope == "ephemeral"
    first, second = session.loops
    assert first.turns == [] and first.status == "completed"
    assert first.continuation_kind == "initial"
    assert second.continuation_kind == "rerun"
    assert second.turns[0].triggered_by == "continuation"
    persistent = session.model_copy(update={"scope": "persistent"})
    assert Session.model_validate_json(persistent.model_dump_json()).scope == "persistent"


def test_before_task_fires_once_per_new_session_and_after_task_on_flush() -> None:
    seen: list[tuple[str, str]] = []

    def refuse(session: Session) -> bool:
        seen.append(("before", session.session_id))
        return False  # a recorder cannot abort a run: the session is still created

    recorder = SessionRecorder(
        SessionRecorderConfig(
            before_task=refuse, after_task=lambda s: seen.append(("after", s.session_id))
        )
    )
    recorder.on_event(_start("s.x.1"))
    recorder.on_event(AgentEnd(loop_id="s.x.1"))
    recorder.on_event(_start("s.x.2", parent="s.x.1", kind="default"))
    recorder.on_event(AgentEnd(loop_id="s.x.2"))
    assert seen == [("before", "s")]
    assert recorder.get_session("s") is not None
    recorder.flush()
    assert seen == [("before", "s"), ("after", "s")]


def test_recorder_accepts_events_as_json_dicts() -> None:
    recorder = SessionRecorder()
    recorder.on_event(_start("s.x.1").model_dump(mode="json"))
    recorder.on_event(TurnStart(loop_id="s.x.1", turn_index=0).model_dump(mode="json"))
    message = AssistantMessage(turn_id=TurnId(loop_id="s.x.1", turn_index=0))
    recorder.on_event(MessageEnd(loop_id="s.x.1", message=message).model_dump(mode="json"))
    recorder.on_event(
        TurnEnd(loop_id="s.x.1", turn_index=0, message=message).model_dump(mode="json")
    )
    recorder.on_event(AgentEnd(loop_id="s.x.1").model_dump(mode="json"))
    [record] = recorder.sessions[0].loops
    assert record.status == "completed" and len(record.turns) == 1
