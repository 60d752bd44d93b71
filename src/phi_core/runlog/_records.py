"""What the run log stores and hands back: one :class:`RunRecord` per run, with its branches and
router events; :class:`RunQuery` says which runs to list.

The records are pydantic models, so ``phi logs --json`` prints the very shape that is stored, and
a web view can serve them as they are.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as dt_time
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import UserError
from ..types import MESSAGES_ADAPTER, AgentMessage, lone_surrogate

__all__ = [
    "MAX_COUNT",
    "BranchRecord",
    "LogStatus",
    "RouteEventRecord",
    "RunFacets",
    "RunKind",
    "RunQuery",
    "RunRecord",
    "check_count",
    "check_text",
    "end_of_day",
    "new_run_id",
    "parse_count",
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
    return _utc_text(datetime.fromtimestamp(time.time() if moment is None else moment, tz=UTC))


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(-?)([0-9]+)([smhdw])", re.IGNORECASE)
_TIME_FORMS = (
    "write a date (2026-01-02), a date and time (2026-01-02T15:00, UTC) or an age (30m, 2h, 7d, 1w)"
)


def _utc_text(stamp: datetime) -> str:
    """``stamp`` (aware) as the log stores times: UTC, milliseconds, four-digit year."""
    return stamp.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def parse_when(text: str, *, now: float | None = None) -> str:
    """A point in time as the log stores it: an ISO date or date-time (``2026-01-02``,
    ``2026-01-02T15:00``; UTC unless it names a zone) or an age (``30m``, ``2h``, ``7d``, ``1w``).

    The one reading of times for ``phi logs --since/--until`` and the web view's ``since`` and
    ``until``.

    Raises:
        UserError: neither form (says which forms are accepted), a negative age, or a time
            outside the years 1 to 9999 (an age reaching back further, a date at the edge
            whose zone moves it out).
    """
    raw = text.strip()
    age = _AGE.fullmatch(raw)
    if age is not None:
        sign, amount, unit = age.groups()
        if sign:
            raise UserError(
                f"An age counts back from now and cannot be negative, got {_quoted(text)}; "
                f"write '{amount}{unit}' for that long ago."
            )
        start = datetime.fromtimestamp(time.time() if now is None else now, tz=UTC)
        reach = (start - datetime(1, 1, 1, tzinfo=UTC)) // timedelta(seconds=1)
        # Lengths first: Python refuses int() of thousands of digits.
        too_far = len(amount.lstrip("0")) > len(str(reach))
        if too_far or int(amount) * _UNITS[unit.lower()] > reach:
            raise UserError(
                f"The age {_quoted(text)} reaches back before the year 1; write a smaller age or a "
                "date (2026-01-02)."
            )
        return _utc_text(start - timedelta(seconds=int(amount) * _UNITS[unit.lower()]))
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"Cannot read {_quoted(text)} as a time; {_TIME_FORMS}.") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return _utc_text(parsed)
    except OverflowError:
        raise UserError(
            f"The time {_quoted(text)} falls outside the years 1 to 9999 in UTC; write a time "
            "within them."
        ) from None


def end_of_day(text: str) -> str:
    """``--until 2026-01-02`` includes that whole day (any other form as :func:`parse_when`).

    Raises:
        UserError: as :func:`parse_when`.
    """
    raw = text.strip()
    if len(raw) == 10 and raw[4] == "-" and raw[7] == "-":
        try:
            day = date.fromisoformat(raw)
        except ValueError:
            return parse_when(raw)  # not a date: raises parse_when's message
        return _utc_text(datetime.combine(day, dt_time(23, 59, 59, 999_000), tzinfo=UTC))
    return parse_when(raw)


MAX_COUNT = 2**63 - 1
"""The largest count or offset the run log takes: SQLite's largest integer (signed 64-bit)."""
_WHOLE = re.compile(r"[+-]?[0-9]+")


def check_count(value: int, name: str, *, low: int = 0, high: int = MAX_COUNT) -> int:
    """``value`` when ``low <= value <= high``: the one range check of the counts and offsets
    the run log is asked for (``phi logs -n``, the web view's ``limit`` and ``offset``,
    :class:`RunQuery`, :meth:`RunLog.route_events`). ``name`` is how the caller's user wrote it.

    Raises:
        UserError: out of range (names ``name``, shows the value and the range).
    """
    if low <= value <= high:
        return value
    shown = str(value) if value.bit_length() < 10_000 else "a number of thousands of digits"
    raise _out_of_range(name, shown, below=value < low, low=low, high=high)


def parse_count(text: str, name: str, *, low: int = 0, high: int = MAX_COUNT) -> int:
    """A whole number written as ``text`` (a query string's), range-checked as
    :func:`check_count`.

    Raises:
        UserError: not a whole number, or out of range (names ``name`` and shows ``text``).
    """
    raw = text.strip()
    if _WHOLE.fullmatch(raw) is None:
        raise UserError(f"{name} must be a whole number, got {_quoted(text)}.")
    if len(raw.lstrip("+-").lstrip("0")) > len(str(MAX_COUNT)):
        # Beyond any range we take, and Python refuses int() of thousands of digits.
        shown = raw if len(raw) <= 60 else _quoted(raw)
        raise _out_of_range(name, shown, below=raw.startswith("-"), low=low, high=high)
    return check_count(int(raw), name, low=low, high=high)


def check_text(value: str, name: str) -> str:
    """``value`` when the run log can search for it: valid Unicode and no NUL character. The
    one check of the words, models, statuses and ids the run log is asked for (``phi logs``'s
    options, the web view's query string, :class:`RunQuery`). ``name`` is how the caller's user
    wrote it (``-q/--query``, ``q``).

    A lone surrogate is what bytes that are not UTF-8 become on a command line (Python's
    ``surrogateescape``): SQLite cannot even be handed it. A NUL ends SQLite's full-text query
    early (a syntax error), and no logged text is searched for by one, so it is refused rather
    than silently dropped (which would search for something else than what was asked).

    Raises:
        UserError: either (names ``name``, the offending byte or character and its position,
            and what to write instead).
    """
    index = lone_surrogate(value)
    if index is not None:
        # As `phi race` reports a prompt that is not UTF-8 (cli._common.read_prompt).
        byte = ord(value[index]) - 0xDC00
        shown = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else repr(value[index])
        raise UserError(
            f"{name} is not valid UTF-8 text ({shown} at position {index}); write it as UTF-8 "
            "(for example convert it with `iconv -f latin1 -t utf-8`)."
        )
    if "\x00" in value:
        raise UserError(
            f"{name} contains a NUL character (at position {value.index(chr(0))}), which the "
            "run log cannot search for; remove it."
        )
    return value


def _quoted(text: str) -> str:
    """``text`` quoted for an error message, its middle cut out when it is long."""
    return (
        repr(text) if len(text) <= 60 else f"{text[:30]!r}…{text[-10:]!r} ({len(text)} characters)"
    )


def _out_of_range(name: str, shown: str, *, below: bool, low: int, high: int) -> UserError:
    if high < MAX_COUNT:
        span = f"between {low} and {high}"
    elif below:
        span = f">= {low}"
    else:
        span = f"at most {high} (the largest number SQLite stores)"
    return UserError(f"{name} must be {span}, got {shown}.")


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


_TEXT_FILTERS = ("model", "strategy", "kind", "status", "since", "until", "text", "conversation_id")


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
    """Words that must all appear in the prompt, system prompt, an answer or a model name.

    Every text filter must be valid Unicode without a NUL character (:func:`check_text`): a
    query holding either is refused with a :class:`~phi_core.errors.UserError`."""
    conversation_id: str | None = None

    def __post_init__(self) -> None:
        """Check ``limit`` (``None``: all) and ``offset`` with :func:`check_count`, so every
        query the store runs fits SQLite's integers, and every text filter with
        :func:`check_text` (no lone surrogate, no NUL: refused, not stripped).

        Raises:
            UserError: a count out of range, or a filter that is not valid text.
        """
        if self.limit is not None:
            check_count(self.limit, "limit")
        check_count(self.offset, "offset")
        for name in _TEXT_FILTERS:
            value = getattr(self, name)
            if value is not None:
                check_text(value, f"The run query's {name}")


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
