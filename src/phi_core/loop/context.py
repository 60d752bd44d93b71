"""Per-run mutable state: the conversation log, tools and loop identity."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..events import ContinuationKind
from ..types import AgentMessage

__all__ = ["AgentContext", "new_id"]


def new_id() -> str:
    return str(uuid.uuid4())


@dataclass
class AgentContext:
    """The conversation one run works on.

    ``messages`` is the single ordered log and the source of truth: every request sends all of it
    (extension messages excepted), on every turn and on every later run over the same context.
    """

    system_prompt: str | None = None
    messages: list[AgentMessage] = field(default_factory=list)
    tools: list[Any] = field(default_factory=list)
    agent_id: str | None = None
    session_id: str | None = None
    loop_id: str | None = None
    parent_loop_id: str | None = None
    continuation_kind: ContinuationKind = "initial"

    def clone(self) -> AgentContext:
        """A copy with deep-copied messages and shared tools (one per race branch)."""
        return AgentContext(
            system_prompt=self.system_prompt,
            messages=[m.model_copy(deep=True) for m in self.messages],
            tools=list(self.tools),
            agent_id=self.agent_id,
            session_id=self.session_id,
            loop_id=self.loop_id,
            parent_loop_id=self.parent_loop_id,
            continuation_kind=self.continuation_kind,
        )

    def ensure_ids(self) -> None:
        """Fill missing ``agent_id``, ``session_id`` and ``loop_id``; keeps ids already set."""
        if not self.agent_id:
            self.agent_id = new_id()
        if not self.session_id:
            self.session_id = new_id()
        if not self.loop_id:
            self.loop_id = new_id()
