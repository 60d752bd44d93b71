"""The session data model: sessions → loops → turns, parallel groups and spawn links.

Every record is a pydantic model, so a session serialises to JSON and loads back equal. Loading is
tolerant of older records: every field added after the first version has a default, unknown
fields are ignored, and ``null`` for a defaulted field reads as the default.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..events import AgentEvent, ContinuationKind, TurnTrigger
from ..types import (
    AgentMessage,
    AssistantMessage,
    CompactionBlock,
    ToolResultMessage,
    TurnId,
    Usage,
)

__all__ = [
    "SCHEMA_VERSION",
    "ChildLoopRef",
    "LoopConfigSnapshot",
    "LoopEvent",
    "LoopRecord",
    "LoopStatus",
    "ParallelGroupRecord",
    "Session",
    "SessionScope",
    "SpawnRef",
    "Turn",
    "config_segment_from_loop_id",
    "session_id_from_loop_id",
]

SCHEMA_VERSION = 1

LoopStatus = Literal["pending", "running", "completed", "rejected", "aborted"]
SessionScope = Literal["ephemeral", "persistent"]


def session_id_from_loop_id(loop_id: str) -> str:
    """The text before the first ``.`` of a ``{session}.{segment}.{N}`` id (whole id if none)."""
    return loop_id.split(".", 1)[0]


def config_segment_from_loop_id(loop_id: str) -> str | None:
    """The text between the first and the last ``.`` (None when the id has fewer than two)."""
    first, last = loop_id.find("."), loop_id.rfind(".")
    if first < 0 or first == last:
        return None
    return loop_id[first + 1 : last]


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")

    @field_validator("*", mode="before")
    @classmethod
    def _null_is_default(cls, value: Any, info: Any) -> Any:
        # Older records wrote ``null`` for fields that now have a non-null default.
        if value is None and info.field_name in cls._non_nullable():
            field = cls.model_fields[info.field_name]
            return field.get_default(call_default_factory=True)
        return value

    @classmethod
    def _non_nullable(cls) -> frozenset[str]:
        cached = cls.__dict__.get("_non_null_cache")
        if cached is None:
            cached = frozenset(
                name
                for name, f in cls.model_fields.items()
                if not f.is_required() and f.get_default(call_default_factory=True) is not None
            )
            setattr(cls, "_non_null_cache", cached)  # noqa: B010 - per-class cache
        return cached


class LoopConfigSnapshot(_Record):
    """What ran a loop (never credentials)."""

    model: str
    provider: str
    config_id: str | None = None
    name: str | None = None
    api: str | None = None
    base_url: str | None = None
    reasoning: bool | None = None
    context_window: int | None = None
    max_tokens: int | None = None
    thinking_level: str | None = None
    temperature: float | None = None

    @classmethod
    def from_event(cls, snapshot: dict[str, Any] | None, loop_id: str) -> LoopConfigSnapshot | None:
        """Build from ``AgentStart.config_snapshot`` (``model`` is a ``provider:model`` spec)."""
        if not snapshot or not snapshot.get("model"):
            return None
        spec = str(snapshot["model"])
        provider, sep, model = spec.partition(":")
        if not sep:
            provider, model = str(snapshot.get("provider") or ""), spec
        return cls(
            model=model,
            provider=provider,
            config_id=config_segment_from_loop_id(loop_id) or snapshot.get("config_id"),
            name=snapshot.get("name"),
            api=snapshot.get("api"),
            base_url=snapshot.get("base_url"),
            reasoning=snapshot.get("reasoning"),
            context_window=snapshot.get("context_window"),
            max_tokens=snapshot.get("max_tokens"),
            thinking_level=snapshot.get("thinking"),
            temperature=snapshot.get("temperature"),
        )


class Turn(_Record):
    """One model call and what came with it, from ``TurnStart`` to ``TurnEnd``."""

    turn_id: TurnId
    triggered_by: TurnTrigger = "user"
    usage: Usage = Field(default_factory=Usage)
    input_messages: list[AgentMessage] = Field(default_factory=list)
    output_message: AssistantMessage | None = None
    tool_results: list[ToolResultMessage] = Field(default_factory=list)
    started_at: int = 0
    ended_at: int | None = None
    request_payload: dict[str, Any] | None = None

    @field_validator("triggered_by", mode="before")
    @classmethod
    def _legacy_trigger(cls, value: Any) -> Any:
        # phi-core's legacy spelling of a continuation trigger.
        if isinstance(value, str):
            lowered = value.lower()
            if lowered in ("followup", "follow_up"):
                return "continuation"
            if lowered in ("user", "sub_agent", "continuation", "branch"):
                return lowered
            if lowered == "subagent":
                return "sub_agent"
        return value


class LoopEvent(_Record):
    """One recorded event with its per-loop sequence number."""

    seq: int
    event: AgentEvent


class ParallelGroupRecord(_Record):
    """Set on every loop of one race: the branches, the winner and what judging cost.

    ``evaluation_loop_ids`` are the loops the strategy ran to decide (judge loops); they sit in
    the same session as the branches and carry the same group with ``role="evaluation"``.
    """

    all_loop_ids: list[str]
    selected_loop_id: str | None = None
    selected_config_index: int | None = None
    evaluation_usage: Usage = Field(default_factory=Usage)
    is_selected: bool = False
    evaluation_loop_ids: list[str] = Field(default_factory=list)
    role: Literal["branch", "evaluation"] = "branch"
    cancelled: bool = False


class ChildLoopRef(_Record):
    """Outbound link from a loop to a sub-agent loop in another session."""

    tool_call_id: str
    tool_name: str
    child_loop_id: str
    child_session_id: str


class SpawnRef(_Record):
    """Inbound link on a sub-agent session: which loop (and tool call) spawned it."""

    parent_session_id: str
    parent_loop_id: str
    tool_call_id: str | None = None
    tool_name: str | None = None


class LoopRecord(_Record):
    """One ``agent_loop`` / ``agent_loop_continue`` execution."""

    loop_id: str
    session_id: str
    agent_id: str = ""
    parent_loop_id: str | None = None
    continuation_kind: ContinuationKind = "initial"
    started_at: int = 0
    ended_at: int | None = None
    status: LoopStatus = "running"
    end_reason: str | None = None
    error: str | None = None
    rejection: str | None = None
    config: LoopConfigSnapshot | None = None
    messages: list[AgentMessage] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    metadata: dict[str, Any] | None = None
    events: list[LoopEvent] = Field(default_factory=list)
    children_loop_ids: list[str] = Field(default_factory=list)
    child_loop_refs: list[ChildLoopRef] = Field(default_factory=list)
    parallel_group: ParallelGroupRecord | None = None
    compaction_block: CompactionBlock | None = None
    """An overlay over the conversation up to this loop (``build_context_from_session``); the
    messages themselves are never changed."""

    @field_validator("continuation_kind", mode="before")
    @classmethod
    def _legacy_kind(cls, value: Any) -> Any:
        # phi-core wrote {"Rerun": {"tag": ...}} / "Initial"; keep the kind, drop the tag.
        if isinstance(value, dict) and len(value) == 1:
            value = next(iter(value))
        return value.lower() if isinstance(value, str) else value

    @field_validator("status", mode="before")
    @classmethod
    def _lower_status(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class Session(_Record):
    """All loops of one ``session_id``, in the order they started."""

    schema_version: int = SCHEMA_VERSION
    session_id: str
    agent_id: str = ""
    created_at: int = 0
    last_active: int = 0
    formation: str = "first_loop"
    scope: SessionScope = "ephemeral"
    parent_spawn_ref: SpawnRef | None = None
    loops: list[LoopRecord] = Field(default_factory=list)

    @field_validator("scope", mode="before")
    @classmethod
    def _lower_scope(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    # ------------------------------------------------------------------ navigation

    def get_loop(self, loop_id: str) -> LoopRecord | None:
        """The loop with this id (the latest, should a caller have reused an id)."""
        for record in reversed(self.loops):
            if record.loop_id == loop_id:
                return record
        return None

    def root_loops(self) -> list[LoopRecord]:
        """Loops with no parent, or whose parent is not in this session."""
        ids = {r.loop_id for r in self.loops}
        return [r for r in self.loops if r.parent_loop_id is None or r.parent_loop_id not in ids]

    def children_of(self, loop_id: str) -> list[LoopRecord]:
        parent = self.get_loop(loop_id)
        if parent is None:
            return []
        return [r for r in (self.get_loop(c) for c in parent.children_loop_ids) if r is not None]

    def parallel_siblings(self, loop_id: str) -> list[LoopRecord]:
        """Every branch of the race ``loop_id`` took part in (itself included), in config order."""
        record = self.get_loop(loop_id)
        if record is None or record.parallel_group is None:
            return []
        ids = record.parallel_group.all_loop_ids
        return [r for r in (self.get_loop(i) for i in ids) if r is not None]

    def parallel_groups(self) -> list[ParallelGroupRecord]:
        """One record per race in this session (taken from its selected or first branch)."""
        seen: set[tuple[str, ...]] = set()
        groups: list[ParallelGroupRecord] = []
        for record in self.loops:
            group = record.parallel_group
            if group is None or group.role != "branch":
                continue
            key = tuple(group.all_loop_ids)
            if key not in seen:
                seen.add(key)
                groups.append(group.model_copy(update={"is_selected": False}))
        return groups

    def loop_chain_to(self, loop_id: str) -> list[LoopRecord]:
        """The loops from a root down to ``loop_id`` following parent links (cycle safe)."""
        chain: list[LoopRecord] = []
        seen: set[str] = set()
        current = self.get_loop(loop_id)
        while current is not None and current.loop_id not in seen:
            seen.add(current.loop_id)
            chain.append(current)
            current = self.get_loop(current.parent_loop_id) if current.parent_loop_id else None
        chain.reverse()
        return chain

    def total_usage(self) -> Usage:
        return Usage.sum(r.usage for r in self.loops)

    def iter_messages(self) -> Iterator[AgentMessage]:
        for record in self.loops:
            yield from record.messages
