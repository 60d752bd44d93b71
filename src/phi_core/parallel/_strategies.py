"""The cheap built-in strategies: transparent, pick-first, token-efficient, elaborate and
majority vote, plus the shared rules every built-in follows.

Rules shared by all built-ins (phi-core's strategies had none of them):

* a failed branch (status other than ``ok``) is never selected while a successful one exists;
* an empty answer (a successful branch whose answer is blank and that called no tool) is not a
  candidate while another successful branch answered (:func:`successful`): it is never shown
  to a judge and cannot win; when every successful branch answered empty they all are;
* when every branch failed the decision's ``index`` is ``None`` and the rationale lists why;
* ties are broken by cost, then tokens, then branch order, and the decision says it was a tie;
* a strategy that cannot decide on its own terms falls back to its documented default through
  :meth:`BaseEvaluation.fall_back`, which marks the decision ``fallback`` and emits exactly one
  ``Warning`` event with the reason, so the fallback reaches the event sink (and the CLI).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import UserError
from ..events import Warning
from ..types import AgentMessage
from ._types import EvaluationDecision, ParallelLoopOutcome

if TYPE_CHECKING:
    from ..cancel import CancelToken
    from ..events import Emitter

__all__ = [
    "BaseEvaluation",
    "ElaborateEvaluation",
    "MajorityVoteEvaluation",
    "PickFirstEvaluation",
    "TokenEfficientEvaluation",
    "TransparentEvaluation",
    "cost_key",
    "normalize_answer",
]


def cost_key(outcome: ParallelLoopOutcome) -> tuple[float, int, int]:
    """Order by dollars, then tokens, then branch index (cheapest first)."""
    return (outcome.cost_usd, outcome.usage.total, outcome.config_index)


def latency_key(outcome: ParallelLoopOutcome) -> tuple[float, float, int]:
    return (outcome.latency_s, outcome.cost_usd, outcome.config_index)


class BaseEvaluation:
    """Shared plumbing of the built-ins: a name and the failure rules in the module docstring."""

    name: ClassVar[str] = "custom"
    judges_tool_calls: ClassVar[bool] = True
    """Whether a branch that ends on tool calls (read as ``call name({json})``, see
    :func:`~phi_core.parallel.turn_text`) can be compared with the others."""

    uses_judge: ClassVar[bool] = False
    """Whether the strategy calls a judge model after the branches: a race under a token budget
    then keeps room for it (its branches share the budget with the judge, see
    :func:`~phi_core.metering.sharing`)."""

    def check_race(self, count: int) -> None:
        """Refuse a race this strategy cannot evaluate, before any branch runs."""

    def decision(self, index: int | None, **fields: Any) -> EvaluationDecision:
        return EvaluationDecision(index=index, strategy=self.name, **fields)

    def fall_back(
        self,
        index: int,
        events: Emitter,
        *,
        loop_id: str,
        reason: str,
        reason_without_content: str | None = None,
        **fields: Any,
    ) -> EvaluationDecision:
        """The documented default ``index``, marked ``fallback``; ``reason`` (why the strategy
        could not decide, and what it picked instead) becomes the rationale and the message of
        the one ``Warning`` event this emits. A ``reason`` that quotes model-written text (a
        judge's unusable reply, which can repeat a branch's answer) comes with
        ``reason_without_content``, the same reason without the quote: the warning's
        ``message_without_content``, which telemetry records unless content capture is on."""
        said = f"{self.name} strategy fell back: "
        plain = said + reason_without_content if reason_without_content is not None else None
        events.emit(Warning(loop_id=loop_id, message=said + reason, message_without_content=plain))
        return self.decision(index, fallback=True, rationale=reason, **fields)

    def no_success(self, outcomes: Sequence[ParallelLoopOutcome]) -> EvaluationDecision:
        reasons = "; ".join(
            f"branch {o.config_index}: {o.status} ({o.error or 'no error text'})" for o in outcomes
        )
        return self.decision(
            None,
            rationale=f"No branch succeeded ({len(outcomes)} failed): {reasons}.",
            details={"statuses": {o.config_index: o.status for o in outcomes}},
        )

    def by_tokens(
        self, outcomes: Sequence[ParallelLoopOutcome], *, fewest: bool
    ) -> EvaluationDecision:
        """Fewest (ties: first) or most (ties: last) total tokens among successful branches."""
        ok = successful(outcomes)
        if not ok:
            return self.no_success(outcomes)
        best = (min if fewest else max)(o.usage.total for o in ok)
        tied = [o for o in ok if o.usage.total == best]
        chosen, label, tie_rule = (
            (tied[0], "fewest", "first") if fewest else (tied[-1], "most", "last")
        )
        return self.decision(
            chosen.config_index,
            scores={o.config_index: float(o.usage.total) for o in ok},
            tie=len(tied) > 1,
            rationale=f"{label} tokens ({best})"
            + (f", {tie_rule} of a tie" if len(tied) > 1 else ""),
        )

    def decided_without_judge(
        self, outcomes: Sequence[ParallelLoopOutcome]
    ) -> EvaluationDecision | None:
        """The decision when there is nothing to judge (no successful branch, or just one)."""
        ok = successful(outcomes)
        if not ok:
            return self.no_success(outcomes)
        if len(ok) == 1:
            return self.decision(
                ok[0].config_index,
                rationale="only one branch succeeded; the judge was not called",
                details={"judge_called": False},
            )
        return None


def is_empty_answer(outcome: ParallelLoopOutcome) -> bool:
    """Whether a branch answered nothing: blank text and no tool calls."""
    return not outcome.text.strip() and not outcome.pending_tool_calls


def successful(outcomes: Sequence[ParallelLoopOutcome]) -> list[ParallelLoopOutcome]:
    """The candidates of a race, in config order: the successful branches (status ``ok``) that
    gave an answer (:func:`is_empty_answer` is false); every successful branch when all of them
    answered empty (empty list: no branch succeeded)."""
    ok = [o for o in outcomes if o.ok]
    answered = [o for o in ok if not is_empty_answer(o)]
    return answered or ok


def race_loop_id(outcomes: Sequence[ParallelLoopOutcome]) -> str:
    """The id a strategy's own events carry when it runs no judge: the race's session id."""
    first = outcomes[0]
    return first.session_id or first.loop_id


class TransparentEvaluation(BaseEvaluation):
    """Single-branch pass-through; a race with more than one config is refused before it runs."""

    name = "transparent"

    def check_race(self, count: int) -> None:
        if count != 1:
            raise UserError(
                f"TransparentEvaluation needs exactly one config, got {count}. Use "
                f"PickFirstEvaluation (or a judge) to race several configs."
            )

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision:
        self.check_race(len(outcomes))
        only = outcomes[0]
        if not only.ok:
            return self.no_success(outcomes)
        return self.decision(only.config_index, rationale="single branch")


class PickFirstEvaluation(BaseEvaluation):
    """The first successful branch in config order. Deterministic and free."""

    name = "pick-first"

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision:
        ok = successful(outcomes)
        if not ok:
            return self.no_success(outcomes)
        skipped = ok[0].config_index - outcomes[0].config_index
        why = "first branch" if skipped == 0 else "first successful branch"
        return self.decision(ok[0].config_index, rationale=why)


class TokenEfficientEvaluation(BaseEvaluation):
    """Fewest total tokens among successful branches; ties go to the first such branch."""

    name = "token-efficient"

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision:
        return self.by_tokens(outcomes, fewest=True)


class ElaborateEvaluation(BaseEvaluation):
    """Most total tokens among successful branches; ties go to the last such branch."""

    name = "elaborate"

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision:
        return self.by_tokens(outcomes, fewest=False)


_SPACES = re.compile(r"\s+")
_EDGE_PUNCT = " \t\n.,;:!?\"'`*()[]{}"


def normalize_answer(text: str) -> str:
    """Case-folded, NFKC, whitespace collapsed, surrounding punctuation and markup stripped."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _SPACES.sub(" ", text).strip(_EDGE_PUNCT)
    return text


class MajorityVoteEvaluation(BaseEvaluation):
    """The most common normalised final answer wins; ties between answers go to the cheaper one.

    ``extract`` picks the part of each answer to compare: a callable, or a regex whose *last*
    match (first group if it has one) is used, e.g. ``r"-?\\d+(?:\\.\\d+)?"`` for numeric
    answers. Among the branches that gave the winning answer, the cheapest is selected.
    Successful branches with an empty answer do not vote.
    """

    name = "vote"

    def __init__(
        self,
        *,
        extract: str | Callable[[str], str] | None = None,
        normalize: Callable[[str], str] = normalize_answer,
    ) -> None:
        if isinstance(extract, str):
            try:
                pattern = re.compile(extract)
            except re.error as exc:
                raise UserError(
                    f"MajorityVoteEvaluation extract= is not a valid regex: {extract!r} ({exc})."
                ) from exc
            self._extract: Callable[[str], str] | None = lambda text: _last_match(pattern, text)
        else:
            self._extract = extract
        self._normalize = normalize

    def answer(self, text: str) -> str:
        """The normalised answer a branch's text votes for."""
        if self._extract is not None:
            text = self._extract(text)
        return self._normalize(text)

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision:
        ok = successful(outcomes)
        if not ok:
            return self.no_success(outcomes)
        answers = {o.config_index: self.answer(o.text) for o in ok}
        voters = [o for o in ok if answers[o.config_index]]
        if not voters:
            cheapest = min(ok, key=cost_key)
            return self.fall_back(
                cheapest.config_index,
                events,
                loop_id=race_loop_id(ok),
                reason="no successful branch gave a non-empty answer; picked the cheapest",
            )
        votes = Counter(answers[o.config_index] for o in voters)
        top = max(votes.values())
        leaders = [answer for answer, count in votes.items() if count == top]
        # Cheapest representative of each leading answer decides a tie between answers.
        groups = {
            answer: min((o for o in voters if answers[o.config_index] == answer), key=cost_key)
            for answer in leaders
        }
        winner_answer = min(leaders, key=lambda a: cost_key(groups[a]))
        winner = groups[winner_answer]
        tie = len(leaders) > 1
        rationale = f"{top} of {len(voters)} votes for {winner_answer!r}"
        if tie:
            rationale += f"; tied with {len(leaders) - 1} other answer(s), cheapest wins"
        return self.decision(
            winner.config_index,
            votes=dict(votes),
            scores={o.config_index: votes[answers[o.config_index]] / len(voters) for o in voters},
            tie=tie,
            rationale=rationale,
            details={"answers": {i: a for i, a in answers.items()}},
        )


def _last_match(pattern: re.Pattern[str], text: str) -> str:
    last: re.Match[str] | None = None
    for last in pattern.finditer(text):  # noqa: B007 - we want the final match
        pass
    if last is None:
        return ""
    return last.group(1) if pattern.groups else last.group(0)
