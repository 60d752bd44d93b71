"""``SessionRecorder``: turns a stream of agent events into :class:`Session` records.

Use it as an event sink (it is callable) or call :meth:`SessionRecorder.on_event`. Sessions stay
*open* while any of their loops runs; :meth:`checkpoint` promotes sessions with no open loop to
*completed*, :meth:`flush` finalises everything (open loops become ``aborted``) and
:meth:`drain_completed` hands the completed sessions over, e.g. to a store.

Parallel races are recorded as one group: ``ParallelLoopStart`` pre-registers every branch as a
``pending`` loop, loops of the same session that start while the race is open and are not
branches are its evaluation (judge) loops, and ``ParallelLoopEnd`` stamps the group (branches,
winner, evaluation usage) on every branch and evaluation loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._logging import get_logger
from ..events import (
    AGENT_EVENT_ADAPTER,
    AgentEnd,
    AgentStart,
    CompactionEnded,
    MessageEnd,
    MessageUpdate,
    ParallelLoopEnd,
    ParallelLoopStart,
    ToolExecutionEnd,
    TurnEnd,
    TurnRequest,
    TurnStart,
)
from ..types import AssistantMessage, ToolResultMessage, TurnId, now_ms
from ._model import (
    ChildLoopRef,
    LoopConfigSnapshot,
    LoopEvent,
    LoopRecord,
    ParallelGroupRecord,
    Session,
    SessionScope,
    SpawnRef,
    Turn,
    session_id_from_loop_id,
)

__all__ = ["SessionRecorder", "SessionRecorderConfig"]

logger = get_logger("phi_core.sessions")


@dataclass
class SessionRecorderConfig:
    """What the recorder keeps, and the session-level callbacks.

    ``before_task(session)`` fires when a session id is seen for the first time (its return value
    is ignored: a recorder observes, it cannot stop a run); ``after_task(session)`` fires for every
    session finalised by :meth:`SessionRecorder.flush`.
    """

    include_streaming_events: bool = False
    capture_turn_requests: bool = False
    scope: SessionScope = "ephemeral"
    before_task: Callable[[Session], Any] | None = None
    after_task: Callable[[Session], Any] | None = None


@dataclass
class _Race:
    session_id: str
    branch_ids: list[str]
    evaluation_ids: list[str] = field(default_factory=list)


class SessionRecorder:
    """Materialises sessions → loops → turns from events; see the module docstring."""

    def __init__(self, config: SessionRecorderConfig | None = None) -> None:
        self.config = config or SessionRecorderConfig()
        self._open: dict[str, Session] = {}
        self._completed: dict[str, Session] = {}
        self._open_loops: dict[str, LoopRecord] = {}
        self._partial_turns: dict[str, Turn] = {}
        self._seq: dict[str, int] = {}
        self._races: list[_Race] = []
        # child loop id -> (parent session, parent loop, tool call id, tool name)
        self._spawns: dict[str, SpawnRef] = {}
        self._current: str | None = None

    # ------------------------------------------------------------------ queries

    @property
    def sessions(self) -> list[Session]:
        """Sessions that still have (or may get) running loops."""
        return list(self._open.values())

    def get_session(self, session_id: str) -> Session | None:
        return self._open.get(session_id) or self._completed.get(session_id)

    def all_sessions(self) -> list[Session]:
        return [*self._open.values(), *self._completed.values()]

    def current_loop(self) -> LoopRecord | None:
        """The most recently started loop that has not ended yet."""
        if self._current is not None and self._current in self._open_loops:
            return self._open_loops[self._current]
        return None

    # ------------------------------------------------------------------ lifecycle

    def __call__(self, event: Any) -> None:
        self.on_event(event)

    def on_event(self, event: Any) -> None:
        """Record one event (a pydantic event or its JSON-like dict)."""
        if isinstance(event, dict):
            event = AGENT_EVENT_ADAPTER.validate_python(event)
        if isinstance(event, ParallelLoopStart):
            self._race_start(event)
            return
        if isinstance(event, ParallelLoopEnd):
            self._race_end(event)
            return
        if isinstance(event, AgentStart):
            self._loop_start(event)
        record = self._open_loops.get(event.loop_id)
        if record is None:
            return
        if not isinstance(event, MessageUpdate) or self.config.include_streaming_events:
            seq = self._seq.get(record.loop_id, 0)
            self._seq[record.loop_id] = seq + 1
            record.events.append(LoopEvent(seq=seq, event=event))
        if isinstance(event, TurnStart):
            self._partial_turns[record.loop_id] = Turn(
                turn_id=TurnId(loop_id=record.loop_id, turn_index=event.turn_index),
                triggered_by=event.triggered_by,
                started_at=event.timestamp,
            )
        elif isinstance(event, TurnRequest):
            turn = self._partial_turns.get(record.loop_id)
            if turn is not None and self.config.capture_turn_requests:
                turn.request_payload = event.payload
        elif isinstance(event, MessageEnd):
            turn = self._partial_turns.get(record.loop_id)
            message = event.message
            if turn is not None and not isinstance(message, AssistantMessage | ToolResultMessage):
                turn.input_messages.append(message)
        elif isinstance(event, TurnEnd):
            self._turn_end(record, event)
        elif isinstance(event, ToolExecutionEnd) and event.child_loop_id:
            self._child_link(record, event)
        elif isinstance(event, CompactionEnded) and event.block is not None:
            record.compaction_block = event.block
        elif isinstance(event, AgentEnd):
            self._loop_end(record, event)
        session = self._open.get(record.session_id)
        if session is not None:
            session.last_active = max(session.last_active, event.timestamp)

    def flush(self) -> None:
        """Finalise everything: open loops become ``aborted`` (partial turns discarded), every
        session moves to completed and ``after_task`` fires for each."""
        for record in list(self._open_loops.values()):
            record.status = "aborted"
            record.ended_at = now_ms()
            self._partial_turns.pop(record.loop_id, None)
        self._open_loops.clear()
        self._current = None
        finished = list(self._open.values())
        self._completed.update(self._open)
        self._open.clear()
        for session in finished:
            self._call(self.config.after_task, session)

    def checkpoint(self) -> int:
        """Move sessions without a running loop to completed; returns how many moved."""
        busy = {r.session_id for r in self._open_loops.values()}
        idle = [sid for sid in self._open if sid not in busy]
        for sid in idle:
            self._completed[sid] = self._open.pop(sid)
        return len(idle)

    def drain_completed(self) -> list[Session]:
        """Hand over (and forget) the completed sessions."""
        done = list(self._completed.values())
        self._completed.clear()
        return done

    # ------------------------------------------------------------------ internals

    def _session(self, session_id: str, agent_id: str, timestamp: int) -> Session:
        session = self._open.get(session_id)
        if session is not None:
            return session
        session = self._completed.pop(session_id, None)
        if session is not None:  # a promoted session got a new loop: reopen it
            self._open[session_id] = session
            return session
        session = Session(
            session_id=session_id,
            agent_id=agent_id,
            created_at=timestamp,
            last_active=timestamp,
            scope=self.config.scope,
        )
        self._open[session_id] = session
        self._call(self.config.before_task, session)
        return session

    def _loop_start(self, event: AgentStart) -> None:
        session = self._session(event.session_id, event.agent_id, event.timestamp)
        if not session.agent_id:
            session.agent_id = event.agent_id
        record = session.get_loop(event.loop_id)
        if record is None or record.status != "pending":
            record = LoopRecord(loop_id=event.loop_id, session_id=event.session_id)
            session.loops.append(record)
        record.agent_id = event.agent_id
        record.parent_loop_id = event.parent_loop_id
        record.continuation_kind = event.continuation_kind
        record.started_at = event.timestamp
        record.status = "running"
        record.config = LoopConfigSnapshot.from_event(event.config_snapshot, event.loop_id)
        self._open_loops[event.loop_id] = record
        self._seq[event.loop_id] = 0
        self._current = event.loop_id
        parent = event.parent_loop_id
        if parent and not self._same_session(session, parent):
            pending = self._spawns.get(event.loop_id)
            if session.parent_spawn_ref is None:
                session.parent_spawn_ref = pending or SpawnRef(
                    parent_session_id=self._session_of_loop(parent),
                    parent_loop_id=parent,
                )
        for race in self._races:
            if (
                race.session_id == event.session_id
                and event.loop_id not in race.branch_ids
                and event.loop_id not in race.evaluation_ids
            ):
                race.evaluation_ids.append(event.loop_id)

    def _same_session(self, session: Session, parent_loop_id: str) -> bool:
        if session.get_loop(parent_loop_id) is not None:
            return True
        return session_id_from_loop_id(parent_loop_id) == session.session_id

    def _session_of_loop(self, loop_id: str) -> str:
        for session in self.all_sessions():
            if session.get_loop(loop_id) is not None:
                return session.session_id
        return session_id_from_loop_id(loop_id)

    def _turn_end(self, record: LoopRecord, event: TurnEnd) -> None:
        turn = self._partial_turns.pop(record.loop_id, None)
        if turn is None:
            turn = Turn(
                turn_id=TurnId(loop_id=record.loop_id, turn_index=event.turn_index),
                started_at=event.timestamp,
            )
        turn.output_message = event.message
        turn.usage = event.usage
        turn.tool_results = [
            r.model_copy(update={"turn_id": turn.turn_id}) for r in event.tool_results
        ]
        turn.ended_at = event.timestamp
        record.turns.append(turn)

    def _loop_end(self, record: LoopRecord, event: AgentEnd) -> None:
        self._partial_turns.pop(record.loop_id, None)
        self._open_loops.pop(record.loop_id, None)
        if self._current == record.loop_id:
            self._current = None
        record.ended_at = event.timestamp
        record.status = "rejected" if event.rejection is not None else "completed"
        record.end_reason = event.reason
        record.error = event.error
        record.rejection = event.rejection
        record.messages = list(event.messages)
        record.usage = event.usage
        record.cost_usd = event.cost_usd
        if record.config is None:
            record.config = _snapshot_from_messages(record)
        session = self._open.get(record.session_id)
        parent_id = record.parent_loop_id
        if session is not None and parent_id:
            parent = session.get_loop(parent_id)
            if parent is not None and record.loop_id not in parent.children_loop_ids:
                parent.children_loop_ids.append(record.loop_id)

    def _child_link(self, record: LoopRecord, event: ToolExecutionEnd) -> None:
        child_id = event.child_loop_id
        assert child_id is not None
        child_session_id = self._session_of_loop(child_id)
        ref = ChildLoopRef(
            tool_call_id=event.tool_call_id,
            tool_name=event.tool_name,
            child_loop_id=child_id,
            child_session_id=child_session_id,
        )
        if all(r.child_loop_id != child_id for r in record.child_loop_refs):
            record.child_loop_refs.append(ref)
        spawn = SpawnRef(
            parent_session_id=record.session_id,
            parent_loop_id=record.loop_id,
            tool_call_id=event.tool_call_id,
            tool_name=event.tool_name,
        )
        child_session = self.get_session(child_session_id)
        if child_session is not None and child_session.session_id != record.session_id:
            child_session.parent_spawn_ref = spawn
        else:  # the child's AgentStart has not arrived yet
            self._spawns[child_id] = spawn

    def _race_start(self, event: ParallelLoopStart) -> None:
        session = self._session(event.session_id, "", event.timestamp)
        for loop_id in event.loop_ids:
            if session.get_loop(loop_id) is None:
                session.loops.append(
                    LoopRecord(
                        loop_id=loop_id,
                        session_id=event.session_id,
                        status="pending",
                        started_at=event.timestamp,
                    )
                )
        self._races.append(_Race(session_id=event.session_id, branch_ids=list(event.loop_ids)))

    def _race_end(self, event: ParallelLoopEnd) -> None:
        race = next(
            (r for r in reversed(self._races) if r.session_id == event.session_id),
            None,
        )
        if race is None:
            logger.warning("ParallelLoopEnd for session %s without a start", event.session_id)
            return
        self._races.remove(race)
        decision = event.decision or {}
        for extra in decision.get("evaluation_loop_ids") or decision.get("judge_loop_ids") or []:
            if extra not in race.evaluation_ids:
                race.evaluation_ids.append(str(extra))
        session = self.get_session(event.session_id)
        if session is None:
            return
        group = ParallelGroupRecord(
            all_loop_ids=list(race.branch_ids),
            selected_loop_id=event.selected_loop_id,
            selected_config_index=event.selected_config_index,
            evaluation_usage=event.evaluation_usage,
            evaluation_loop_ids=list(race.evaluation_ids),
            cancelled=event.cancelled,
        )
        for loop_id in race.branch_ids:
            record = session.get_loop(loop_id)
            if record is not None:
                record.parallel_group = group.model_copy(
                    update={"is_selected": loop_id == event.selected_loop_id}
                )
        for loop_id in race.evaluation_ids:
            record = session.get_loop(loop_id)
            if record is not None:
                record.parallel_group = group.model_copy(update={"role": "evaluation"})

    @staticmethod
    def _call(callback: Callable[[Session], Any] | None, session: Session) -> None:
        if callback is None:
            return
        try:
            callback(session)
        except Exception:
            logger.exception("session callback raised; the session is recorded anyway")


def _snapshot_from_messages(record: LoopRecord) -> LoopConfigSnapshot | None:
    for message in record.messages:
        if isinstance(message, AssistantMessage) and message.model:
            return LoopConfigSnapshot(model=message.model, provider=message.provider)
    return None
