"""What the run log stores and hands back: one :class:`RunRecord` per run, with its branches and
router events; :class:`RunQuery` says which runs to list.

The records are pydantic models, so ``phi logs --json`` prints the very shape that is stored, and
a web view can serve them as they are.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import UserError
from ..types import MESSAGES_ADAPTER, AgentMessage

__all__ = [
    "BranchRecord",
    "LogStatus",
    "RouteEventRecord",
    "RunFacets",
    "RunKind",
    "RunQuery",
    "RunRecord",
    "end_of_day",
    "new_run_id",
    "parse_when",
    "utc_iso",
]

RunKind = Literal["run", "race", "bandit", "select"]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_run_id() -> str:
    """A 26-character id that sorts by creation time (48 bits of milliseconds, 80 random bits,
    Crockford base 32, like a ULID)."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(secrets.token_bytes(10), "big")
    chars = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_CROCKFORD[digit])
    return "".join(reversed(chars))


def utc_iso(moment: float | None = None) -> str:
    """``2026-01-02T03:04:05.678Z`` for a unix time (now by default)."""
    stamp = datetime.fromtimestamp(time.time() if moment is None else moment, tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, *, now: float | None = None) -> str:
    """A point in time as the log stores it: an ISO date or date-time (``2026-01-02``,
    ``2026-01-02T15:00``; UTC unless it names a zone) or an age (``30m``, ``2h``, ``7d``, ``1w``).

    Raises:
        UserError: neither form (says which forms are accepted).
    """
    raw = text.strip()
    if raw and raw[:-1].isdigit() and raw[-1].lower() in _UNITS:
        age = int(raw[:-1]) * _UNITS[raw[-1].lower()]
        return utc_iso((time.time() if now is None else now) - age)
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(
            f"Cannot read {text!r} as a time; write a date (2026-01-02), a date and time "
            "(2026-01-02T15:00, UTC) or an age (30m, 2h, 7d, 1w)."
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return utc_iso(parsed.timestamp())


def end_of_day(text: str) -> str:
    """``--until 2026-01-02`` includes that whole day."""
    raw = text.strip()
    if len(raw) == 10 and raw[4] == "-" and raw[7] == "-":
        day = datetime.fromisoformat(raw).replace(tzinfo=UTC) + timedelta(days=1)
        return utc_iso(day.timestamp() - 0.001)
    return parse_when(raw)


class BranchRecord(BaseModel):
    """One branch of a race (a preview or answer call of a bandit race, the one agent of a run,
    or a combination of a selection)."""

    index: int
    label: str
    model: str
    phase: str = ""
    """``preview`` or ``answer`` in a bandit race; empty otherwise."""
    status: str
    error: str | None = None
    error_kind: str | None = None
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float | None = None
    score: float | None = None
    """The judge's score (races), the preview score (bandit), the accuracy (selection)."""
    winner: bool = False
    spec: dict[str, Any] | None = None
    """The branch as configured (model and settings), so a continuation can race it again."""


class RouteEventRecord(BaseModel):
    """A router decision or update of a bandit race."""

    run_id: str
    seq: int
    type: str
    namespace: str = ""
    action: str | None = None
    timestamp: int | None = None
    payload: dict[str, Any] = Field(default_factory=dict)


class RunRecord(BaseModel):
    """One logged run: what was asked, what every branch produced, what won and why."""

    id: str = Field(default_factory=new_run_id)
    kind: RunKind
    source: str = "cli"
    """Who ran it: ``cli``, ``gateway``, ``library``."""
    conversation_id: str | None = None
    created_at: str = Field(default_factory=utc_iso)
    duration_s: float | None = None
    prompt: str
    system: str | None = None
    strategy: str | None = None
    status: str
    winner: str | None = None
    winner_model: str | None = None
    text: str = ""
    """The winner's answer."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    verdict: dict[str, Any] | None = None
    """How the winner was chosen: the decision (rationale, scores, details such as a judge's
    flip rate) or the bandit's action, scores and rewards."""
    plan: dict[str, Any] | None = None
    """The branch specs (``branches``), judge and strategy: what a continuation races again."""
    warnings: list[str] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)
    branches: list[BranchRecord] = Field(default_factory=list)
    route_events: list[RouteEventRecord] = Field(default_factory=list)
    messages: list[dict[str, Any]] | None = None
    """The winner's whole conversation (JSON messages); ``None`` in listings."""

    @property
    def models(self) -> list[str]:
        """The distinct models of the branches, in order."""
        return list(dict.fromkeys(b.model for b in self.branches))

    def history(self) -> list[AgentMessage]:
        """The winner's conversation as messages (what ``-c`` continues from)."""
        return MESSAGES_ADAPTER.validate_python(self.messages or [])

    @property
    def winning_branch(self) -> BranchRecord | None:
        return next((b for b in self.branches if b.winner), None)


@dataclass(frozen=True)
class RunQuery:
    """Which runs :meth:`RunLog.list_runs` returns (newest first); every filter is optional."""

    limit: int | None = 20
    offset: int = 0
    """How many of the selected runs to skip first (pagination)."""
    model: str | None = None
    """A model (``openai:gpt-4o``, or the bare ``gpt-4o``) or branch label any branch used."""
    strategy: str | None = None
    kind: str | None = None
    status: str | None = None
    since: str | None = None
    """ISO time (as :func:`parse_when` returns); runs created at or after it."""
    until: str | None = None
    text: str | None = None
    """Words that must all appear in the prompt, system prompt, an answer or a model name."""
    conversation_id: str | None = None


@dataclass(frozen=True)
class LogStatus:
    """``phi logs status``: where the log is, whether runs are logged, what it holds."""

    path: str
    enabled: bool
    why_disabled: str | None
    exists: bool
    runs: int
    conversations: int
    size_bytes: int
    migrations: list[str]
    full_text_search: bool

    @classmethod
    def missing(cls, path: str, enabled: bool, why: str | None) -> LogStatus:
        return cls(path, enabled, why, False, 0, 0, 0, [], False)


@dataclass(frozen=True)
class RunFacets:
    """The values the logged runs take, for search filters: every model a branch used, every
    strategy, kind and status, and the time span (``None`` when the log is empty)."""

    models: list[str]
    strategies: list[str]
    kinds: list[str]
    statuses: list[str]
    first: str | None
    last: str | None
