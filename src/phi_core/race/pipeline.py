"""The bandit race: a policy over ``agent_loop_parallel`` that learns which arm to trust.

One :meth:`BanditRace.run` call is three ordinary races and a router update:

1. **Rank** the arms with the router on the query's features (``RouteDecision`` event). When the
   top arm is observed and clearly ahead of the other arms the race would preview (its lower
   bound above theirs, by the router's bounds or by the 95 % prediction intervals of their rewards
   on this query: :meth:`~phi_core.routing.Ranking.clearly_ahead`), the race is skipped
   (``sure``); otherwise the ``top_k`` arms with the highest upper bounds are
   the contenders — by default fewer than there are arms, so which arms get evidence depends on
   the router and exploration is real.
2. **Preview race** (``label="preview"``): the contenders answer a short preview prompt in
   parallel, each with a complexity-scaled token limit, served from the preview cache when the
   request actually sent was seen before; the rubric judge
   (:class:`~phi_core.parallel.RubricJudgeEvaluation`, the same as ``phi race --strategy
   rubric``) scores them, shown in a shuffled order.
3. **Answer race** (``label="answer"``): the best-scored arm continues *its own preview branch*
   with "now answer in full"; failed or unverified answers fall back to the next candidate. For
   long queries the first ``top_k`` (at least two) candidates answer at once and the first
   acceptable answer wins (early accept), the others are cancelled.
4. **Learn** (``RouteUpdate`` event): the answering arm's reward comes from its **full** answer —
   verified (``verify``) or graded by the judge —, previewed arms learn from their preview scores
   with a lower weight, and failures are penalised. The reward is bounded (see
   :class:`~phi_core.routing.RewardPolicy`). Every update's additive delta is persisted; the
   answer latencies (and preview latencies, apart) persist too, next to the router state.

Budgets are one :class:`~phi_core.metering.Budget` for the whole run (previews, judge, answers):
each call reserves its worst case before it is sent, so the run never overshoots; the wall clock
cancels whatever still runs when it passes (status ``timeout``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._logging import get_logger
from ..cancel import CancelToken
from ..errors import StateStoreError, UserError, redact
from ..events import BanditRaceEnd, Emitter, RouteDecision, RouteUpdate
from ..loop import AgentContext, AgentLoopConfig
from ..metering import Budget, Meter, metering, token_share
from ..outcome import RaceStatus
from ..parallel import (
    EvaluationDecision,
    ParallelLoopOutcome,
    ParallelLoopResult,
    RubricJudgeEvaluation,
    agent_loop_parallel,
    evaluate_or_fall_back,
)
from ..providers.call import CallCache
from ..routing.bandits import LinearRouter, Ranking
from ..routing.features import FeatureExtractor, HashedFeatures
from ..routing.reward import ArmReward, LatencyTracker, RewardPolicy
from ..routing.stores import RouterStateStore
from ..types import AgentMessage, AssistantMessage, Usage, UserMessage

__all__ = [
    "Arm",
    "BanditRace",
    "BanditRaceResult",
    "RaceSettings",
    "Verifier",
    "preview_token_limit",
]

logger = get_logger("phi_core.race")

Verifier = Callable[[str], "bool | Awaitable[bool]"]
Action = Literal["race", "sure", "single", "baseline"]
"""A check of a full answer's text (sync or async): True accepts it."""

PREVIEW_PROMPT = (
    "Give a short preview of how you would answer the query below: the approach, the key points "
    "of the answer, and your confidence. Stay under {tokens} tokens.\n\nQuery:\n{query}"
)
ANSWER_PROMPT = "Now give your complete answer to the query, following your preview."
_WALL = "wall-clock budget"


@dataclass
class Arm:
    """One candidate configuration; ``name`` is the router's arm id."""

    name: str
    config: AgentLoopConfig


@dataclass(frozen=True)
class RaceSettings:
    """Knobs of the bandit race (names follow the seed's flags where it has them).

    Attributes:
        top_k: arms previewed per query; ``None`` = fewer than there are arms (``min(2, n-1)``),
            so the router's upper bounds decide which arms get evidence.
        policy: ``bandit`` (the router orders and may skip the race) or ``baseline`` (the given
            order, every arm previewed, never skipped; the router only learns).
        race_only_when_unsure: skip the previews when the top arm is clearly ahead.
        preview_weight: weight of an update learned from a preview's score (the full answer's
            update weighs 1; 0: previews are not learned from, failures still are).
        preview_timeout_s / answer_timeout_s: per-branch timeouts of the two races.
        speculative_min_chars: queries at least this long race the first candidates' full
            answers at once (early accept) instead of one after the other.
    """

    top_k: int | None = None
    preview_tokens: int = 120
    min_scale: float = 0.75
    max_scale: float = 1.5
    length_threshold: int = 2000
    speculative_min_chars: int = 2000
    race_only_when_unsure: bool = True
    policy: Literal["bandit", "baseline"] = "bandit"
    preview_weight: float = 0.5
    preview_timeout_s: float | None = None
    answer_timeout_s: float | None = None
    max_concurrency: int | None = None
    shuffle_seed: int | None = None

    def __post_init__(self) -> None:
        if self.top_k is not None and self.top_k < 1:
            raise UserError(f"top_k must be >= 1 (or None for the default), got {self.top_k!r}.")
        if self.preview_tokens < 1:
            raise UserError(f"preview_tokens must be >= 1, got {self.preview_tokens!r}.")
        if not 0 < self.min_scale <= self.max_scale:
            raise UserError(
                f"Need 0 < min_scale <= max_scale, got {self.min_scale!r} and {self.max_scale!r}."
            )
        if not 0 <= self.preview_weight <= 1:
            raise UserError(f"preview_weight must be in [0, 1], got {self.preview_weight!r}.")
        if self.policy not in ("bandit", "baseline"):
            raise UserError(f"policy must be 'bandit' or 'baseline', got {self.policy!r}.")
        for name in ("preview_timeout_s", "answer_timeout_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UserError(f"{name} must be > 0 seconds (or None), got {value!r}.")

    def contenders(self, arms: int) -> int:
        """How many arms are previewed out of ``arms``."""
        if self.policy == "baseline":
            return arms
        if self.top_k is not None:
            return min(self.top_k, arms)
        return max(1, min(2, arms - 1))


def preview_token_limit(query: str, settings: RaceSettings) -> int:
    """``preview_tokens`` scaled from ``min_scale`` (short query) to ``max_scale`` (≥ threshold)."""
    complexity = min(1.0, len(query) / settings.length_threshold)
    scale = settings.min_scale + (settings.max_scale - settings.min_scale) * complexity
    return max(1, round(settings.preview_tokens * scale))


@dataclass
class BanditRaceResult:
    """What a bandit race produced, also when it stopped early (``status`` says why)."""

    session_id: str
    status: RaceStatus = "all_failed"
    text: str = ""
    winner: str | None = None
    verified: bool | None = None
    """Whether the answer passed ``verify`` (``None``: no check configured)."""
    quality: float | None = None
    """The answer's judged or verified quality in [0, 1] (``None``: nothing could grade it)."""
    ranking: Ranking | None = None
    action: Action = "race"
    reason: str = ""
    """Why the router took ``action`` (the ``RouteDecision`` event's reason)."""
    contenders: list[str] = field(default_factory=list)
    previews: ParallelLoopResult | None = None
    scores: dict[str, float] = field(default_factory=dict)
    """The preview judge's score per arm."""
    order: list[str] = field(default_factory=list)
    answers: list[ParallelLoopOutcome] = field(default_factory=list)
    """Every full-answer attempt, in the order they were made."""
    grade: EvaluationDecision | None = None
    rewards: dict[str, ArmReward] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    """Tokens of the calls actually sent (cached previews are free)."""
    cost_usd: float = 0.0
    """Dollars actually paid, judge calls included."""
    wall_time_s: float = 0.0
    error: str | None = None

    answer: ParallelLoopOutcome | None = None
    """The attempt whose answer was kept (``None`` when there is none)."""
    arms: list[str] = field(default_factory=list)
    """Every arm of the race in the order given (an arm's ``index`` in the JSON result)."""
    judge: str | None = None
    """The judge's model (``provider:model``) that scores previews and grades the answer."""

    @property
    def previews_skipped(self) -> bool:
        return self.previews is None

    @property
    def attempts(self) -> list[tuple[str, str]]:
        """``(arm, status)`` of every full-answer attempt."""
        return [(_arm_of(o), o.status) for o in self.answers]

    @property
    def outcomes(self) -> list[ParallelLoopOutcome]:
        """Every branch that ran: previews, then answers."""
        previews = list(self.previews.outcomes) if self.previews is not None else []
        return previews + list(self.answers)


def _arm_of(outcome: ParallelLoopOutcome) -> str:
    return str(outcome.config.extra.get("arm", outcome.config_id))


_FEATURES_INLINE_CHARS = 32_768
"""A query up to this long is featurised on the event loop; a longer one in a thread."""


def _loop_segments(arms: Sequence[Arm]) -> dict[str, str]:
    """Each arm's loop-id segment: :meth:`AgentLoopConfig.segment` of its config (its
    ``config_id``, else ``provider.model``), exactly what a race gives the same config. Two arms
    whose configs segment alike (one model at two temperatures, unnamed) get ``-N`` (``N``: the
    arm's position) on the later one: the live view tells arms apart by segment."""
    segments: dict[str, str] = {}
    for i, arm in enumerate(arms):
        segment = arm.config.segment()
        while segment in segments.values():
            segment = f"{segment}-{i}"
        segments[arm.name] = segment
    return segments


class _Acceptor:
    """The answer race's strategy: accept the first complete (and verified) answer at once."""

    name = "bandit-answer"
    early_accept = True

    def __init__(self, verify: Verifier | None) -> None:
        self.verify = verify

    async def accept(self, outcome: ParallelLoopOutcome, *, cancel: CancelToken) -> bool:
        if not outcome.text.strip():
            outcome.status, outcome.error, outcome.error_kind = "error", "empty answer", "internal"
            return False
        if self.verify is None:
            return True
        try:
            verdict = self.verify(outcome.text)
            passed = bool(await verdict) if inspect.isawaitable(verdict) else bool(verdict)
        except Exception as exc:  # a broken check rejects the answer, not the race
            logger.warning("verify raised %s for %s: %s", type(exc).__name__, _arm_of(outcome), exc)
            passed = False
        if not passed:
            outcome.status, outcome.error, outcome.error_kind = (
                "unverified",
                "the answer failed the check",
                "check",
            )
        return passed

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision:
        return EvaluationDecision(
            index=None, strategy=self.name, rationale="no answer was accepted"
        )


class BanditRace:
    """The bandit race around a router; see the module docstring.

    Args:
        arms: the candidate configurations (distinct names).
        router: a :class:`~phi_core.routing.LinearRouter` (LinUCB, Thompson, ε-greedy).
        judge: the judge's loop config; without one (and without ``verify``) nothing grades an
            answer, so the router learns only from failures and the race is never run.
        features: the feature extractor (default: hashed n-grams of the router's dimension).
        reward: the reward policy (bounded; see :class:`~phi_core.routing.RewardPolicy`).
        store: where each update's additive delta is persisted (``namespace`` defaults to the
            feature schema).
        cache: preview cache, keyed by the request actually sent.
        tracker / preview_tracker: answer and preview latency history (persist them by giving a
            :class:`~phi_core.routing.LatencyHistory`).
        settings: :class:`RaceSettings`.
        budget: one :class:`~phi_core.metering.Budget` for the whole run.
        verify: a check of each full answer's text (sync or async, True accepts it): a failing
            answer is ``unverified`` (penalised) and the next candidate is asked; when none
            passes, the first unverified answer is returned with ``verified=False``.
    """

    def __init__(
        self,
        arms: Sequence[Arm],
        router: LinearRouter,
        *,
        judge: AgentLoopConfig | None = None,
        features: FeatureExtractor | None = None,
        reward: RewardPolicy | None = None,
        store: RouterStateStore | None = None,
        namespace: str | None = None,
        cache: CallCache | None = None,
        tracker: LatencyTracker | None = None,
        preview_tracker: LatencyTracker | None = None,
        settings: RaceSettings | None = None,
        budget: Budget | None = None,
        verify: Verifier | None = None,
    ) -> None:
        if not arms:
            raise UserError("BanditRace needs at least one arm (a model to answer with).")
        names = [a.name for a in arms]
        if len(set(names)) != len(names):
            raise UserError(f"Arm names must be distinct, got {names}.")
        self.arms = {a.name: a for a in arms}
        self.router = router
        self.judge = judge
        self.features = features or HashedFeatures(router.dim)
        if self.features.dim != router.dim:
            raise UserError(
                f"The feature extractor gives {self.features.dim} dimensions, the router expects "
                f"{router.dim}."
            )
        self.reward = reward or RewardPolicy()
        self.store = store
        self.namespace = namespace or self.features.schema
        self.cache = cache
        self.tracker = tracker or LatencyTracker(namespace=self.namespace)
        self.preview_tracker = preview_tracker or LatencyTracker(
            namespace=f"{self.namespace}:preview"
        )
        self.settings = settings or RaceSettings()
        self.budget = budget
        self.verify = verify
        self.config_ids = _loop_segments(arms)
        """Each arm's config id: the segment of its branches' loop ids, the same as a race gives
        its config. Only loop ids, events and the live view use it: what the router learns,
        the latency history and the run log are keyed by the arm's name (``extra["arm"]``)."""
        # the judge's window: previews and the graded answer are fitted to it
        window = judge.model_config().context_window if judge is not None else None
        self._judge = (
            RubricJudgeEvaluation(judge, seed=self.settings.shuffle_seed, max_context_tokens=window)
            if judge is not None
            else None
        )
        self._grader = (
            RubricJudgeEvaluation(
                judge,
                seed=self.settings.shuffle_seed,
                judge_single=True,
                max_context_tokens=window,
            )
            if judge is not None
            else None
        )

    async def load(self) -> None:
        """Load the router statistics (sum of every worker's updates) and latency history.

        The router's statistics become exactly the store's: an arm the store does not hold
        (its namespace was reset, by ``phi route reset`` or another process) goes back to the
        prior, so a reset reaches a running process at its next load."""
        if self.store is not None:
            state = await asyncio.to_thread(self.store.load, self.namespace)
            self.router.load_state(state)
        await asyncio.to_thread(self.tracker.load)
        await asyncio.to_thread(self.preview_tracker.load)

    async def flush_state(self, within_s: float = 5.0) -> int:
        """Push router updates a store kept while it was unreachable (Redis), trying for up to
        ``within_s`` seconds; the number still waiting, which are lost if the process exits now.
        Call it before a short-lived process (a CLI run) exits."""
        flush = getattr(self.store, "flush", None)
        if flush is None or not getattr(self.store, "pending", 0):
            return 0
        await asyncio.to_thread(flush, within_s)
        return int(getattr(self.store, "pending", 0))

    async def run(
        self,
        query: str,
        *,
        context: AgentContext | None = None,
        cancel: CancelToken | None = None,
        events: Any = None,
    ) -> BanditRaceResult:
        """Route ``query`` (and race when unsure), answer, learn.

        ``context`` is the conversation the answer continues (earlier turns, tool results),
        ending with the input to answer (a user message or tool results); every preview and
        answer is sent all of it, while ``query`` (usually the last user message's text) is
        what the router's features, the preview prompt and the grader read. Without
        ``context`` the conversation is ``query`` alone. A preview that calls a tool is scored
        like any preview, but its arm then answers from ``context`` rather than continuing it.
        """
        if not isinstance(query, str) or not query.strip():
            raise UserError("The query is empty; pass the text to race on.")
        caller = cancel or CancelToken()
        token = caller.child()
        owns_emitter = not isinstance(events, Emitter)
        emitter = Emitter.of(events)
        result = BanditRaceResult(
            session_id=str(uuid.uuid4()),
            arms=list(self.arms),
            judge=self.judge.model_config().spec if self.judge is not None else None,
        )
        meter = Meter(self.budget)
        wall = (
            asyncio.get_running_loop().call_later(self.budget.max_wall_s, token.cancel, _WALL)
            if self.budget is not None and self.budget.max_wall_s is not None
            else None
        )
        failure: BaseException | None = None
        try:
            # featurising a long query takes a while (a 4 MB one about 2 s): off the event loop
            x = (
                await asyncio.to_thread(self.features, query)
                if len(query) > _FEATURES_INLINE_CHARS
                else self.features(query)
            )
            with metering(meter):
                await self._race(query, x, result, token, emitter, context)
                result.status = self._status(result, caller, token)
                if result.status == "ok":
                    result.quality = await self._grade(query, result, token, emitter)
            result.usage, result.cost_usd = meter.paid_usage, meter.spent
            result.wall_time_s = meter.elapsed()
            await self._learn(query, x, result, emitter)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if wall is not None:
                wall.cancel()
            token.detach()
            emitter.emit(_end_event(result, meter, failure))
            if owns_emitter:
                await emitter.aclose()
        logger.info(
            "bandit race %s: %s, winner %s", result.session_id, result.status, result.winner
        )
        return result

    # ------------------------------------------------------------------ stages

    async def _race(
        self,
        query: str,
        x: Any,
        result: BanditRaceResult,
        token: CancelToken,
        emitter: Emitter,
        conversation: AgentContext | None,
    ) -> None:
        settings = self.settings
        names = list(self.arms)
        ranking = self.router.rank(x, names)
        result.ranking = ranking
        order = ranking.order if settings.policy == "bandit" else names
        k = settings.contenders(len(names))
        action: Action
        if (
            settings.policy == "bandit"
            and settings.race_only_when_unsure
            and len(names) > 1
            and ranking.top.n > 0
            # ahead of the arms a race would preview (at least the runner-up): racing could
            # only tell it from those
            and ranking.clearly_ahead(max(k, 2))
        ):
            action, reason = "sure", f"{order[0]} is clearly ahead: the race is skipped"
        elif k < 2 or self._judge is None:
            action = "single"
            reason = (
                "no judge to compare previews: the router's order decides"
                if self._judge is None
                else f"previewing {k} of {len(names)} arms: the router's order decides"
            )
        else:
            action = "baseline" if settings.policy == "baseline" else "race"
            reason = f"previewing the {k} arms with the highest upper bounds"
        contenders = order[:k] if action in ("race", "baseline") else order[:1]
        result.action, result.contenders, result.reason = action, contenders, reason
        emitter.emit(
            RouteDecision(
                loop_id=result.session_id,
                session_id=result.session_id,
                policy=ranking.policy if settings.policy == "bandit" else "baseline",
                namespace=self.namespace,
                ranking=[
                    {"arm": a.arm, "score": a.score, "mean": a.mean, "width": a.width, "n": a.n}
                    for a in ranking.arms
                ],
                explanation=ranking.explain(),
                action=action,
                contenders=contenders,
                reason=reason,
            )
        )
        bases: dict[str, AgentContext] = {}
        if action in ("race", "baseline"):
            previews = await self._previews(query, contenders, result, token, emitter, conversation)
            result.previews = previews
            by_arm = {_arm_of(o): o for o in previews.outcomes}
            for index, score in previews.decision.scores.items():
                result.scores[contenders[index]] = score
            judged = [a for a in contenders if by_arm[a].ok]
            judged.sort(key=lambda a: -result.scores.get(a, -1.0))  # stable: router order on ties
            failed = [a for a in contenders if not by_arm[a].ok]
            rest = [a for a in order if a not in contenders]
            result.order = judged + rest + failed
            for arm in judged:
                if by_arm[arm].pending_tool_calls:
                    continue  # tool calls nobody answered: the arm answers from the conversation
                context = by_arm[arm].context.clone()
                context.messages.append(UserMessage.text(ANSWER_PROMPT))
                bases[arm] = context
        else:
            result.order = list(order)
        await self._answer(query, result, bases, token, emitter, conversation)

    def _start(self, conversation: AgentContext | None, result: BanditRaceResult) -> AgentContext:
        """A branch's starting context: a copy of the conversation, in this race's session."""
        if conversation is None:
            return AgentContext(session_id=result.session_id)
        context = conversation.clone()
        context.session_id = result.session_id
        return context

    async def _previews(
        self,
        query: str,
        contenders: list[str],
        result: BanditRaceResult,
        token: CancelToken,
        emitter: Emitter,
        conversation: AgentContext | None,
    ) -> ParallelLoopResult:
        cap = preview_token_limit(query, self.settings)
        share = token_share(len(contenders))
        if share is not None:
            cap = max(1, min(cap, share))
        prompt = PREVIEW_PROMPT.format(tokens=cap, query=query)
        configs = [
            self._config(arm, max_tokens=cap, response_cache=self.cache) for arm in contenders
        ]
        assert self._judge is not None
        return await agent_loop_parallel(
            prompt,
            self._start(conversation, result),
            configs,
            self._judge,
            events=emitter,
            cancel=token,
            branch_timeout=self.settings.preview_timeout_s,
            max_concurrency=self.settings.max_concurrency,
            label="preview",
        )

    async def _answer(
        self,
        query: str,
        result: BanditRaceResult,
        bases: dict[str, AgentContext],
        token: CancelToken,
        emitter: Emitter,
        conversation: AgentContext | None,
    ) -> None:
        pending = list(result.order)
        if len(query) >= self.settings.speculative_min_chars and len(pending) >= 2:
            width = max(2, self.settings.contenders(len(self.arms)))
            batch, pending = pending[:width], pending[width:]
            if await self._attempt(query, batch, result, bases, token, emitter, conversation):
                return
        while pending and not token.cancelled:
            arm = pending.pop(0)
            if await self._attempt(query, [arm], result, bases, token, emitter, conversation):
                return
        unverified = next((o for o in result.answers if o.status == "unverified"), None)
        if unverified is not None:  # nothing passed the check: the first unverified answer
            self._win(result, unverified, verified=False)

    async def _attempt(
        self,
        query: str,
        arms: list[str],
        result: BanditRaceResult,
        bases: dict[str, AgentContext],
        token: CancelToken,
        emitter: Emitter,
        conversation: AgentContext | None,
    ) -> bool:
        contexts = []
        for arm in arms:
            context = bases.get(arm)
            if context is None:
                context = self._start(conversation, result)
                if conversation is None:
                    context.messages.append(UserMessage.text(query))
            contexts.append(context)
        # numbered after the previews and earlier attempts: an arm's answer continues its
        # preview's conversation under a loop id of its own
        earlier = len(result.previews.outcomes) if result.previews is not None else 0
        race = await agent_loop_parallel(
            None,
            contexts,
            [self._config(arm) for arm in arms],
            _Acceptor(self.verify),
            events=emitter,
            cancel=token,
            branch_timeout=self.settings.answer_timeout_s,
            label="answer",
            first_index=earlier + len(result.answers),
        )
        result.answers.extend(race.outcomes)
        winner = race.selected
        if winner is None:
            return False
        self._win(result, winner, verified=None if self.verify is None else True)
        return True

    def _win(
        self, result: BanditRaceResult, outcome: ParallelLoopOutcome, *, verified: bool | None
    ) -> None:
        result.text, result.winner, result.verified = outcome.text, _arm_of(outcome), verified
        result.answer = outcome

    def _config(self, arm: str, **changes: Any) -> AgentLoopConfig:
        config = self.arms[arm].config
        extra = {**config.extra, "arm": arm}
        segment = self.config_ids[arm]
        # the config's own id, as in a race, unless two arms' configs segment alike
        config_id = config.config_id if segment == config.segment() else segment
        return dataclasses.replace(config, config_id=config_id, extra=extra, **changes)

    @staticmethod
    def _status(result: BanditRaceResult, caller: CancelToken, token: CancelToken) -> RaceStatus:
        if result.winner is not None:
            return "ok"
        if caller.cancelled:
            return "cancelled"
        if token.reason == _WALL:
            result.error = "the wall-clock budget ran out before an answer was accepted"
            return "timeout"
        failures = [o for o in result.answers if not o.ok]
        if failures and all(o.status == "over_budget" for o in failures):
            result.error = failures[0].error
            return "over_budget"
        result.error = "every candidate failed: " + "; ".join(
            f"{_arm_of(o)}: {o.status}" + (f" ({o.error})" if o.error else "") for o in failures
        )
        return "all_failed"

    # ------------------------------------------------------------------ learning

    async def _learn(self, query: str, x: Any, result: BanditRaceResult, emitter: Emitter) -> None:
        """Reward every arm that produced evidence; see the module docstring."""
        answer = result.answer
        if answer is not None:
            self.tracker.record(_arm_of(answer), answer.latency_s)
        updates: list[tuple[ParallelLoopOutcome, float, float, str]] = []
        if answer is not None and result.quality is not None:
            updates.append((answer, result.quality, 1.0, "answer"))
        wall_expired = result.status == "timeout"
        for outcome in result.answers:
            if outcome is not answer and _is_failure(outcome, wall_expired):
                updates.append((outcome, 0.0, 1.0, "failure"))
        if result.previews is not None:
            for outcome in result.previews.outcomes:
                arm = _arm_of(outcome)
                cached = outcome.result is not None and outcome.result.cached_calls > 0
                if outcome.ok and not cached:
                    self.preview_tracker.record(arm, outcome.latency_s)
                if any(_arm_of(u[0]) == arm for u in updates):
                    continue
                if _is_failure(outcome, wall_expired):
                    updates.append((outcome, 0.0, 1.0, "failure"))
                elif outcome.ok and arm in result.scores:
                    # a cached preview was judged afresh in this race: its score is evidence
                    # about the arm (once per race: one preview per arm, none if it answered)
                    if self.settings.preview_weight == 0:
                        continue  # previews are not learned from
                    updates.append(
                        (outcome, result.scores[arm], self.settings.preview_weight, "preview")
                    )
        rows = []
        for outcome, quality, weight, source in updates:
            arm = _arm_of(outcome)
            tracker = self.tracker if source != "preview" else self.preview_tracker
            reward = self.reward.reward(
                dataclasses.replace(outcome, config_id=arm),
                quality,
                query_chars=len(query),
                tracker=tracker,
            )
            result.rewards[arm] = reward
            delta = self.router.update(x, arm, reward.reward, weight)
            if self.store is not None:
                try:
                    await asyncio.to_thread(self.store.add, self.namespace, arm, delta)
                except (StateStoreError, OSError, sqlite3.Error) as exc:
                    # the answer is paid for: a store that cannot be written does not fail it
                    logger.warning(
                        "router update of arm %r not stored (%s); it is kept in this "
                        "process's memory until its next reload",
                        arm,
                        exc,
                    )
            rows.append({**dataclasses.asdict(reward), "weight": weight, "source": source})
        if rows:
            emitter.emit(
                RouteUpdate(
                    loop_id=result.session_id,
                    session_id=result.session_id,
                    namespace=self.namespace,
                    rewards=rows,
                )
            )

    async def _grade(
        self, query: str, result: BanditRaceResult, token: CancelToken, emitter: Emitter
    ) -> float | None:
        """The answer's quality: 1/0 from ``verify`` when set, else the judge's rubric score."""
        if self.verify is not None:
            return 1.0 if result.verified else 0.0
        answer = result.answer
        if self._grader is None or answer is None:
            return None
        message = answer.final_message or AssistantMessage()
        graded = ParallelLoopOutcome(
            config_id=answer.config_id,
            config_index=0,
            loop_id=answer.loop_id,
            context=AgentContext(session_id=result.session_id),
            config=answer.config,
            new_messages=[message],
        )
        # a grader that raises (on what the judge wrote) leaves the answer ungraded, with a
        # warning, like an unusable reply: the paid answer is kept
        decision = await evaluate_or_fall_back(
            self._grader,
            [UserMessage.text(query)],
            [graded],
            events=emitter,
            cancel=token,
            loop_id=result.session_id,
        )
        result.grade = decision
        score = decision.scores.get(0)
        return None if decision.fallback or score is None else min(1.0, max(0.0, score))


def _end_event(
    result: BanditRaceResult, meter: Meter, failure: BaseException | None
) -> BanditRaceEnd:
    """The race's last event, also when the run raised: ``cancelled`` when it was cancelled,
    ``error`` (as a race's ``ParallelLoopEnd`` says it) when something raised — the arms did not
    all fail, the run did."""
    status: str = result.status
    error = result.error
    if isinstance(failure, asyncio.CancelledError | KeyboardInterrupt):
        status, error = "cancelled", "the bandit race was cancelled"
    elif failure is not None:
        status, error = "error", redact(f"{type(failure).__name__}: {failure}")
    return BanditRaceEnd(
        loop_id=result.session_id,
        session_id=result.session_id,
        status=status,
        winner=result.winner,
        action=result.action,
        quality=result.quality,
        verified=result.verified,
        usage=meter.paid_usage,
        cost_usd=meter.spent,
        error=error,
    )


def _is_failure(outcome: ParallelLoopOutcome, wall_expired: bool) -> bool:
    """An arm's own failure (penalised): not a cancellation, a budget refusal or the race's
    wall clock running out."""
    if outcome.status in ("error", "unverified", "rejected"):
        return True
    return outcome.status == "timeout" and not wall_expired
