"""The vocabulary of a race: branch outcomes, the evaluation decision, the race result, and the
protocol every evaluation strategy implements.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ..errors import AllBranchesFailedError, BranchFailure, UserError
from ..outcome import Outcome, OutcomeStatus, RaceStatus
from ..types import AgentMessage, AssistantMessage, ToolCall, Usage

if TYPE_CHECKING:
    from ..cancel import CancelToken
    from ..events import Emitter
    from ..loop import AgentContext, AgentLoopConfig, LoopResult

__all__ = [
    "EarlyAcceptStrategy",
    "EvaluationDecision",
    "EvaluationStrategy",
    "OutcomeStatus",
    "ParallelLoopOutcome",
    "ParallelLoopResult",
    "RaceStatus",
    "final_text",
    "tool_call_text",
    "turn_text",
]


def final_text(messages: Sequence[Any]) -> str:
    """The text of the last assistant message with non-empty text, scanning from the end.

    Tool calls, tool results and intermediate turns are skipped (phi-core's judge extraction):
    blocks are joined with ``"\\n"``; empty string when no assistant message has text.
    """
    for message in reversed(messages):
        if getattr(message, "role", None) != "assistant":
            continue
        text = "\n".join(
            block.text for block in message.content if getattr(block, "type", None) == "text"
        )
        if text:
            return text
    return ""


def tool_call_text(name: str, arguments: Any) -> str:
    """A tool call as a judge or a vote reads it: ``call get_weather({"city": "Paris"})``, the
    arguments as canonical JSON (sorted keys), so identical calls read identically."""
    return f"call {name}({json.dumps(arguments, sort_keys=True, ensure_ascii=False)})"


def turn_text(message: Any) -> str:
    """An assistant message's text followed by its tool calls, one :func:`tool_call_text` a
    line (what a turn that ends on tool calls the caller executes is judged by)."""
    lines = [b.text for b in message.content if getattr(b, "type", None) == "text" and b.text]
    lines += [
        tool_call_text(b.name, b.arguments if b.raw_arguments is None else b.raw_arguments)
        for b in message.content
        if getattr(b, "type", None) == "tool_call"
    ]
    return "\n".join(lines)


@dataclass(eq=False, kw_only=True)
class ParallelLoopOutcome(Outcome):
    """What one branch produced: an :class:`~phi_core.outcome.Outcome` plus the branch's loop.

    ``context.messages[:original_context_len]`` is the base every branch started from; the rest was
    added by this branch. ``new_messages`` is what the branch's loop returned (the echoed prompts
    included in ``agent_loop`` mode). ``config_id`` is the branch's config segment (its
    ``config_id`` or ``provider.model``).
    """

    config_index: int
    """0-based position of the branch's config in ``configs`` (the branch index)."""
    loop_id: str
    context: AgentContext
    config: AgentLoopConfig
    new_messages: list[AgentMessage] = field(default_factory=list)
    original_context_len: int = 0
    result: LoopResult | None = None
    """The loop's own result; ``None`` when the branch raised before producing one."""
    race_size: int = 1
    """How many branches the race had (judges number their loops after it)."""

    @property
    def text(self) -> str:
        """The branch's final answer: its last non-empty assistant text; when the branch ended
        on tool calls for the caller to execute (its last message calls tools), that turn's
        :func:`turn_text`, so strategies compare a tool call with a text answer."""
        calls = self.pending_tool_calls
        if calls:
            return turn_text(self.new_messages[-1])
        return final_text(self.new_messages)

    @property
    def pending_tool_calls(self) -> list[ToolCall]:
        """The tool calls the branch ended on, for the caller to execute (see
        ``AgentLoopConfig.caller_tools``): its last message's calls, when that message is an
        assistant's; empty otherwise."""
        last = self.new_messages[-1] if self.new_messages else None
        return last.tool_calls if isinstance(last, AssistantMessage) else []

    @property
    def final_message(self) -> AssistantMessage | None:
        for message in reversed(self.new_messages):
            if isinstance(message, AssistantMessage):
                return message
        return None

    @property
    def session_id(self) -> str | None:
        return self.context.session_id

    def __repr__(self) -> str:
        error = f", error={self.error!r}" if self.error else ""
        return (
            f"ParallelLoopOutcome(index={self.config_index}, loop_id={self.loop_id!r}, "
            f"status={self.status!r}{error}, tokens={self.usage.total})"
        )


class EvaluationDecision(BaseModel):
    """Which branch won and why.

    ``index`` is a branch index (an outcome's ``config_index``), or ``None`` when there was nothing
    to select (every branch failed, or the race was cancelled). ``scores`` and ``votes`` are keyed
    the way the strategy explains itself (branch index for scores, normalised answer for votes);
    ``details`` holds strategy-specific figures such as a pairwise judge's flip rate.
    """

    model_config = ConfigDict(extra="forbid")

    index: int | None
    strategy: str = ""
    usage: Usage = Field(default_factory=Usage)
    """Tokens the evaluation itself spent (judge calls); added to the race's total."""
    cost_usd: float = 0.0
    scores: dict[int, float] = Field(default_factory=dict)
    votes: dict[str, int] = Field(default_factory=dict)
    rationale: str = ""
    tie: bool = False
    """True when the evidence did not separate the top branches and a tie-break rule decided."""
    fallback: bool = False
    """True when the strategy could not decide on its own terms (garbage judge reply, nothing
    passed the verifier, ...) and fell back to its documented default."""
    early_accept: bool = False
    details: dict[str, Any] = Field(default_factory=dict)

    def trust(self) -> dict[str, Any]:
        """How the decision was reached and how much to trust it.

        ``how``: the strategy (and its comparison method, e.g. ``consensus/letters``); the
        figures the strategy measured, where it has them: ``position_consistency`` (share of
        the answer orders under which a judge named the winner; 1.0 = the same pick under every
        order), ``agreement_share`` (share of answers agreeing with the winner, or its mean
        similarity), ``flip_rate`` (pairwise: share of pairs whose two orders disagreed),
        ``orders`` (judge calls per decision); and ``tie`` / ``fallback``.
        """
        method = self.details.get("method")
        trust: dict[str, Any] = {"how": f"{self.strategy}/{method}" if method else self.strategy}
        for key in ("position_consistency", "agreement_share", "flip_rate"):
            value = self.details.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                trust[key] = round(float(value), 4)
        if isinstance(self.details.get("orders"), list):
            trust["orders"] = len(self.details["orders"])
        trust["tie"] = self.tie
        trust["fallback"] = self.fallback
        return trust

    def summary(self) -> dict[str, Any]:
        """A JSON-ready view (what ``ParallelLoopEnd.decision`` carries), with :meth:`trust`."""
        return {**self.model_dump(mode="json"), "trust": self.trust()}


@runtime_checkable
class EvaluationStrategy(Protocol):
    """Picks the winner of a race. Implement :meth:`evaluate` to write your own.

    ``prompts`` is empty in continue mode (the query is then the last user message of the base
    context). ``outcomes`` holds every branch in config order, failed ones included (check
    ``outcome.ok``). Judges forward their own events to ``events`` and must honour ``cancel``.
    Return a decision whose ``index`` is one of the outcomes' ``config_index`` (or ``None``).
    """

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision: ...


@runtime_checkable
class EarlyAcceptStrategy(Protocol):
    """A strategy that can accept a branch the moment it finishes (a verifier).

    When the strategy passed to ``agent_loop_parallel`` implements this and ``early_accept`` is
    true, the first finished branch for which :meth:`accept` returns true wins at once and the
    still-running siblings are cancelled.
    """

    early_accept: bool

    async def accept(self, outcome: ParallelLoopOutcome, *, cancel: CancelToken) -> bool: ...


@dataclass(eq=False)
class ParallelLoopResult:
    """The race's result: the winner, the others, usage and the decision that picked the winner.

    ``all_outcomes`` keeps phi-core's meaning (the *non-selected* outcomes, config order);
    ``outcomes`` holds every branch. When every branch failed (``all_failed``) or the race was
    cancelled before a winner was chosen, ``selected`` is ``None``; :meth:`raise_for_status` turns
    that into an exception naming each branch's failure. A winner is chosen when the strategy
    returns its decision: a race cancelled while its strategy was still deciding has none (the
    strategy's pick is dropped, named in ``decision.rationale``), and only a race cancelled after
    a branch was accepted early has both ``cancelled`` and a winner.
    """

    session_id: str
    loop_ids: list[str]
    outcomes: list[ParallelLoopOutcome]
    decision: EvaluationDecision
    total_usage: Usage
    cost_usd: float
    cancelled: bool = False
    wall_time_s: float = 0.0
    timed_out: bool = False
    """The race's wall-clock budget ran out before every branch ended."""

    @property
    def selected_index(self) -> int | None:
        return self.decision.index

    @property
    def selected(self) -> ParallelLoopOutcome | None:
        if self.decision.index is None:
            return None
        for outcome in self.outcomes:
            if outcome.config_index == self.decision.index:
                return outcome
        return None

    @property
    def selected_context(self) -> AgentContext | None:
        winner = self.selected
        return winner.context if winner is not None else None

    @property
    def selected_messages(self) -> list[AgentMessage]:
        winner = self.selected
        return list(winner.new_messages) if winner is not None else []

    @property
    def text(self) -> str:
        """The winner's final answer (empty when there is no winner)."""
        winner = self.selected
        return winner.text if winner is not None else ""

    @property
    def all_outcomes(self) -> list[ParallelLoopOutcome]:
        """The outcomes that were not selected, in config order (phi-core's ``all_outcomes``)."""
        return [o for o in self.outcomes if o.config_index != self.decision.index]

    @property
    def evaluation_usage(self) -> Usage:
        return self.decision.usage

    @property
    def all_failed(self) -> bool:
        return bool(self.outcomes) and not any(o.ok for o in self.outcomes)

    @property
    def status(self) -> RaceStatus:
        if self.cancelled:
            return "cancelled"
        if self.timed_out and self.selected is None:
            return "timeout"
        if self.all_failed:
            kinds = {o.status for o in self.outcomes}
            if kinds == {"over_budget"}:
                return "over_budget"
            if kinds == {"timeout"}:
                return "timeout"
            return "all_failed"
        return "ok"

    def raise_for_status(self) -> ParallelLoopResult:
        """Return ``self`` when a winner exists; raise :class:`AllBranchesFailedError` otherwise."""
        if self.selected is not None and not self.all_failed:
            return self
        failures = [
            BranchFailure(
                index=o.config_index,
                loop_id=o.loop_id,
                status=o.status,
                error=o.error,
                error_kind=o.error_kind,
            )
            for o in self.outcomes
        ]
        causes = "; ".join(
            f"branch {f.index} ({f.loop_id}): {f.error_kind or f.status}: "
            f"{f.error or 'no error text'}"
            for f in failures
        )
        what = "was cancelled" if self.cancelled else "has no successful branch"
        raise AllBranchesFailedError(f"The race {what}. {causes}", failures)


def ensure_valid_index(
    decision: EvaluationDecision, outcomes: Sequence[ParallelLoopOutcome]
) -> None:
    """Reject a decision naming a branch that is not in the race (a bug in a custom strategy)."""
    if decision.index is None:
        return
    valid = [o.config_index for o in outcomes]
    if decision.index not in valid:
        raise UserError(
            f"Evaluation strategy {decision.strategy or '?'!r} selected branch "
            f"{decision.index!r}, but the race's branches are {valid}. Return an outcome's "
            f"`config_index` (or None when nothing should be selected)."
        )
