"""The bandit racing pipeline: rank → preview top-k in parallel → judge → answer → learn.

One :meth:`BanditRace.run` call:

1. **Rank** the arms with the router on the query's features.
2. **Race only when unsure**: when the top arm's lower bound is above every other arm's upper bound
   (and it has been observed), skip the previews and answer with it directly.
3. **Previews** from the top-k arms *concurrently* (a ``TaskGroup``), each with a short token
   limit scaled by query complexity (75–150 % of ``preview_tokens``), each under the per-call
   timeout, served from the preview cache when possible. A failed or timed-out preview becomes a
   failed outcome; its siblings keep running.
4. **Judge** the previews that arrived with one structured-output rubric call. Previews are shown
   in a shuffled order and every score is mapped back to its arm **by the number it was shown
   under**, never by list position.
5. **Order** candidates by judge score (router order breaks ties; failed previews go last).
6. **Full answer**: sequentially with fallback, or — for long queries — speculatively from the
   top two at once: the first *successful* answer wins and the other call is cancelled; a failure
   does not end the race while the other is still running, and failed arms are never retried.
   With a ``verify`` check, an answer that fails it counts as a failed attempt (``unverified``)
   and the next candidate is asked; when no answer passes, the first unverified one is returned
   with ``verified=False`` rather than nothing.
7. **Rewards** for every previewed arm (judge quality, observed latency, real dollars, fallback
   penalty for arms that failed), keyed by arm name; **router update**; **persist** each additive
   delta to the state store.

Budgets (total tokens, dollars, per-call and total timeouts) are checked before every call and cap
every call's token limit; exceeding one stops the race cleanly with the partial result and status
``budget_exceeded`` or ``timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..cancel import CancelToken
from ..errors import UserError
from ..loop import AgentContext, AgentLoopConfig, LoopResult, agent_loop
from ..routing.bandits import LinearRouter, Ranking
from ..routing.features import FeatureExtractor, HashedFeatures
from ..routing.reward import ArmOutcome, ArmReward, LatencyTracker, RewardPolicy
from ..routing.stores import PreviewCache, RouterStateStore, preview_cache_key
from ..types import ResponseFormat, Usage

__all__ = [
    "Arm",
    "BanditRace",
    "PreviewOutcome",
    "RaceBudget",
    "RaceResult",
    "RaceSettings",
    "parse_judge_scores",
    "preview_token_limit",
]

logger = logging.getLogger("phi_core.race")

RaceStatus = Literal["ok", "error", "budget_exceeded", "timeout", "cancelled"]
Verifier = Callable[[str], "bool | Awaitable[bool]"]
"""A check of a full answer's text (sync or async): True accepts it."""

PREVIEW_PROMPT = (
    "Give a short preview of how you would answer the query below: the approach, the key points "
    "of the answer, and your confidence. Stay under {tokens} tokens.\n\nQuery:\n{query}"
)
JUDGE_SYSTEM = (
    "You are an impartial judge. Score every candidate preview of an answer to the user's query "
    "from 0 to 1 on relevance (answers the query directly), coverage (covers what the query "
    "asks) and faithfulness (accurate, no invented facts). Ignore the order and the length of "
    "the previews. For each preview give a one-sentence reason first, then the scores. Reply "
    'with JSON only: {"scores": [{"preview": 1, "reason": "...", "relevance": 0.8, '
    '"coverage": 0.7, "faithfulness": 0.9}, ...]} with one entry per preview.'
)
CRITERIA = ("relevance", "coverage", "faithfulness")


@dataclass
class Arm:
    """One candidate configuration; ``name`` is the router's arm id."""

    name: str
    config: AgentLoopConfig


@dataclass(frozen=True)
class RaceBudget:
    """Limits of one race. ``None`` means no limit.

    ``call_timeout_s`` bounds every model call; ``preview_timeout_s`` / ``full_timeout_s`` override
    it for previews / full answers (the judge uses ``call_timeout_s``).
    """

    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    call_timeout_s: float | None = None
    total_timeout_s: float | None = None
    preview_timeout_s: float | None = None
    full_timeout_s: float | None = None

    def __post_init__(self) -> None:
        names = (
            "max_total_tokens",
            "max_cost_usd",
            "call_timeout_s",
            "total_timeout_s",
            "preview_timeout_s",
            "full_timeout_s",
        )
        for name in names:
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UserError(
                    f"RaceBudget.{name} must be > 0 (or None for no limit), got {value!r}."
                )


@dataclass(frozen=True)
class RaceSettings:
    """Knobs of the pipeline (names follow the seed's CLI flags)."""

    top_k: int = 3
    preview_tokens: int = 120
    min_scale: float = 0.75
    max_scale: float = 1.5
    length_threshold: int = 2000
    speculative_min_chars: int = 2000
    race_only_when_unsure: bool = True
    cache_ttl_s: float = 600.0
    shuffle_seed: int | None = None

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise UserError(f"top_k must be >= 1, got {self.top_k!r}.")
        if self.preview_tokens < 1:
            raise UserError(f"preview_tokens must be >= 1, got {self.preview_tokens!r}.")
        if not 0 < self.min_scale <= self.max_scale:
            raise UserError(
                f"Need 0 < min_scale <= max_scale, got {self.min_scale!r} and {self.max_scale!r}."
            )


def preview_token_limit(query: str, settings: RaceSettings) -> int:
    """``preview_tokens`` scaled from ``min_scale`` (short query) to ``max_scale`` (≥ threshold)."""
    complexity = min(1.0, len(query) / settings.length_threshold)
    scale = settings.min_scale + (settings.max_scale - settings.min_scale) * complexity
    return max(1, round(settings.preview_tokens * scale))


@dataclass
class PreviewOutcome:
    arm: str
    text: str = ""
    ok: bool = False
    error: str | None = None
    latency_s: float | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    cached: bool = False


@dataclass
class RaceResult:
    """What a race produced, also when it stopped early (then ``status`` says why)."""

    status: RaceStatus
    text: str = ""
    winner: str | None = None
    ranking: Ranking | None = None
    previews_skipped: bool = False
    previews: dict[str, PreviewOutcome] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    attempts: list[tuple[str, str]] = field(default_factory=list)
    rewards: dict[str, ArmReward] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    error: str | None = None
    verified: bool | None = None
    """Whether the answer passed the race's ``verify`` check (None: no check configured)."""
    _unverified: tuple[str, str] | None = field(default=None, init=False, repr=False)


class _BudgetExceeded(Exception):
    pass


class _Meter:
    """Running totals checked against the budget before every call."""

    def __init__(self, budget: RaceBudget) -> None:
        self.budget = budget
        self.usage = Usage()
        self.cost = 0.0

    def add(self, result: LoopResult) -> None:
        self.usage = self.usage + result.usage
        self.cost += result.cost_usd

    def token_cap(self, wanted: int | None, share: int = 1) -> int | None:
        """The token limit a new call may use; raises when nothing is left."""
        if self.budget.max_cost_usd is not None and self.cost >= self.budget.max_cost_usd:
            raise _BudgetExceeded(
                f"dollar budget ${self.budget.max_cost_usd:g} spent (${self.cost:.4f})"
            )
        if self.budget.max_total_tokens is None:
            return wanted
        left = self.budget.max_total_tokens - self.usage.total
        if left <= 0:
            raise _BudgetExceeded(
                f"token budget {self.budget.max_total_tokens} spent ({self.usage.total} tokens)"
            )
        cap = max(1, left // max(1, share))
        return cap if wanted is None else min(wanted, cap)


class BanditRace:
    """The racing pipeline around a router; see the module docstring.

    Args:
        arms: the candidate configurations (distinct names).
        router: a :class:`~phi_core.routing.LinearRouter` (LinUCB, Thompson, ε-greedy).
        judge: the judge's loop config; without one, previews are skipped and the router's order
            decides (nothing is learned from quality then, only from failures).
        features: the feature extractor (default: hashed n-grams of the router's dimension).
        reward: the reward policy.
        store: where each update's additive delta is persisted (``namespace`` defaults to the
            feature schema).
        cache: preview cache.
        verify: a check of each full answer's text (sync or async callable returning a bool,
            e.g. :func:`phi_core.parallel.runnable_python` or a regex test): a failing answer
            is a failed attempt (penalised like an error) and the next candidate is asked.
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
        cache: PreviewCache | None = None,
        tracker: LatencyTracker | None = None,
        settings: RaceSettings | None = None,
        budget: RaceBudget | None = None,
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
        self.tracker = tracker or LatencyTracker()
        self.settings = settings or RaceSettings()
        self.budget = budget or RaceBudget()
        self._rng = random.Random(self.settings.shuffle_seed)
        self.verify = verify

    async def load(self) -> None:
        """Replace the router's statistics with the store's (sum of every worker's updates)."""
        if self.store is not None:
            state = await asyncio.to_thread(self.store.load, self.namespace)
            if state:
                self.router.load_state(state)

    async def run(
        self, query: str, *, cancel: CancelToken | None = None, events: Any = None
    ) -> RaceResult:
        if not query.strip():
            raise UserError("The query is empty; pass the text to race on.")
        meter = _Meter(self.budget)
        result = RaceResult(status="error")
        x = self.features(query)
        cancel = cancel or CancelToken()
        try:
            timeout = self.budget.total_timeout_s
            async with asyncio.timeout(timeout):
                await self._race(query, x, result, meter, cancel, events)
        except TimeoutError:
            result.status = "timeout"
            result.error = f"total timeout of {self.budget.total_timeout_s:g}s reached"
        except _BudgetExceeded as exc:
            result.status = "budget_exceeded"
            result.error = str(exc)
        result.usage = meter.usage
        result.cost_usd = meter.cost
        if cancel.cancelled and result.status != "ok":
            result.status = "cancelled"
        await self._learn(query, x, result)
        logger.info(
            "race %s: winner=%s order=%s previews_skipped=%s scores=%s rewards=%s cost=$%.5f",
            result.status,
            result.winner,
            result.order,
            result.previews_skipped,
            {a: round(v, 3) for a, v in result.scores.items()},
            {a: round(r.reward, 3) for a, r in result.rewards.items()},
            result.cost_usd,
        )
        return result

    # ------------------------------------------------------------------ stages

    async def _race(
        self,
        query: str,
        x: Any,
        result: RaceResult,
        meter: _Meter,
        cancel: CancelToken,
        events: Any,
    ) -> None:
        ranking = self.router.rank(x, list(self.arms))
        result.ranking = ranking
        order = ranking.order
        if (
            self.judge is None
            or len(order) == 1
            or (
                self.settings.race_only_when_unsure
                and ranking.top.n > 0
                and ranking.clearly_ahead()
            )
        ):
            result.previews_skipped = True
            result.order = order
        else:
            contenders = order[: self.settings.top_k]
            await self._previews(query, contenders, result, meter, cancel, events)
            await self._judge(query, result, meter, cancel, events)
            judged = [a for a in contenders if result.previews[a].ok]
            judged.sort(key=lambda a: -result.scores.get(a, -1.0))  # stable: router order on ties
            failed = [a for a in contenders if not result.previews[a].ok]
            rest = [a for a in order if a not in contenders]
            result.order = judged + rest + failed
        if len(query) >= self.settings.speculative_min_chars and len(result.order) >= 2:
            await self._speculative(query, result, meter, cancel, events)
        else:
            await self._sequential(query, result.order, result, meter, cancel, events)

    async def _call(
        self,
        arm: str,
        prompt: str,
        max_tokens: int | None,
        cancel: CancelToken,
        events: Any,
        *,
        preview: bool = False,
    ) -> LoopResult:
        config = dataclasses.replace(self.arms[arm].config, max_tokens=max_tokens)
        specific = self.budget.preview_timeout_s if preview else self.budget.full_timeout_s
        async with asyncio.timeout(specific or self.budget.call_timeout_s):
            return await agent_loop(prompt, AgentContext(), config, events=events, cancel=cancel)

    async def _previews(
        self,
        query: str,
        contenders: list[str],
        result: RaceResult,
        meter: _Meter,
        cancel: CancelToken,
        events: Any,
    ) -> None:
        limit = preview_token_limit(query, self.settings)
        cap = meter.token_cap(limit, share=len(contenders))
        assert cap is not None
        prompt = PREVIEW_PROMPT.format(tokens=cap, query=query)

        async def one(arm: str) -> None:
            config = self.arms[arm].config
            key = preview_cache_key(
                model=config.model_config().spec,
                prompt=prompt,
                max_tokens=cap,
                params={
                    "temperature": config.temperature,
                    "top_p": config.top_p,
                    "seed": config.seed,
                    "thinking": config.thinking,
                    "system": self.arms[arm].config.extra.get("system_prompt"),
                },
            )
            if self.cache is not None:
                hit = await asyncio.to_thread(self.cache.get, key)
                if hit is not None:
                    result.previews[arm] = PreviewOutcome(arm, hit["text"], ok=True, cached=True)
                    return
            started = time.monotonic()
            outcome = PreviewOutcome(arm)
            try:
                loop = await self._call(arm, prompt, cap, cancel, events, preview=True)
            except TimeoutError:
                limit_s = self.budget.preview_timeout_s or self.budget.call_timeout_s
                outcome.error = f"preview timed out after {limit_s:g}s"
            else:
                meter.add(loop)
                outcome.usage, outcome.cost_usd = loop.usage, loop.cost_usd
                outcome.latency_s = time.monotonic() - started
                if loop.ok and loop.text.strip():
                    outcome.ok, outcome.text = True, loop.text
                    self.tracker.record(arm, outcome.latency_s)
                    if self.cache is not None:
                        await asyncio.to_thread(
                            self.cache.set, key, {"text": loop.text}, self.settings.cache_ttl_s
                        )
                else:
                    outcome.error = loop.error or "empty preview"
            result.previews[arm] = outcome

        async with asyncio.TaskGroup() as group:
            for arm in contenders:
                group.create_task(one(arm))

    async def _judge(
        self, query: str, result: RaceResult, meter: _Meter, cancel: CancelToken, events: Any
    ) -> None:
        arrived = [a for a, p in result.previews.items() if p.ok]
        if len(arrived) < 2 or self.judge is None:
            return
        shown = list(arrived)
        self._rng.shuffle(shown)  # position bias cannot follow the router's order
        parts = [f"Query:\n{query}\n"]
        parts += [f"Preview {n}:\n{result.previews[a].text}\n" for n, a in enumerate(shown, 1)]
        parts.append(f"Score each of the {len(shown)} previews as instructed.")
        config = dataclasses.replace(
            self.judge,
            response_format=_judge_format(),
            max_tokens=meter.token_cap(self.judge.max_tokens),
        )
        try:
            async with asyncio.timeout(self.budget.call_timeout_s):
                loop = await agent_loop(
                    "\n".join(parts),
                    AgentContext(system_prompt=JUDGE_SYSTEM),
                    config,
                    events=events,
                    cancel=cancel,
                )
        except TimeoutError:
            logger.warning("judge timed out; ordering by the router")
            return
        meter.add(loop)
        if not loop.ok:
            logger.warning("judge failed (%s); ordering by the router", loop.error)
            return
        for number, score in parse_judge_scores(loop.text, len(shown)).items():
            result.scores[shown[number - 1]] = score

    async def _sequential(
        self,
        query: str,
        order: list[str],
        result: RaceResult,
        meter: _Meter,
        cancel: CancelToken,
        events: Any,
    ) -> None:
        for arm in order:
            if cancel.cancelled:
                return
            if any(a == arm for a, _ in result.attempts):
                continue
            if await self._full(arm, query, result, meter, cancel, events):
                return
        if self._keep_unverified(result):
            return
        result.status = "error"
        result.error = "every candidate failed: " + "; ".join(
            f"{a}: {s}" for a, s in result.attempts
        )

    async def _full(
        self,
        arm: str,
        query: str,
        result: RaceResult,
        meter: _Meter,
        cancel: CancelToken,
        events: Any,
    ) -> bool:
        cap = meter.token_cap(self.arms[arm].config.max_tokens)
        try:
            loop = await self._call(arm, query, cap, cancel, events)
        except TimeoutError:
            result.attempts.append((arm, "timeout"))
            return False
        meter.add(loop)
        status = await self._accept(arm, loop, result)
        result.attempts.append((arm, status))
        if status == "ok":
            self._win(result, arm, loop.text)
            return True
        return False

    def _win(self, result: RaceResult, arm: str, text: str) -> None:
        result.status, result.text, result.winner = "ok", text, arm
        result.verified = None if self.verify is None else True

    async def _accept(self, arm: str, loop: LoopResult, result: RaceResult) -> str:
        """``ok``, ``unverified`` (kept as a last resort) or why the full answer failed."""
        if not (loop.ok and loop.text.strip()):
            return loop.reason if loop.reason != "completed" else "empty"
        if self.verify is None:
            return "ok"
        try:
            verdict = self.verify(loop.text)
            passed = bool(await verdict) if inspect.isawaitable(verdict) else bool(verdict)
        except Exception as exc:  # a broken check rejects the answer, not the race
            logger.warning("verify raised %s for %s's answer: %s", type(exc).__name__, arm, exc)
            passed = False
        if passed:
            return "ok"
        if result._unverified is None:
            result._unverified = (arm, loop.text)
        return "unverified"

    def _keep_unverified(self, result: RaceResult) -> bool:
        """No answer passed ``verify``: return the first unverified one (if any) as the answer."""
        first = result._unverified
        if first is None:
            return False
        self._win(result, *first)
        result.verified = False
        return True

    async def _speculative(
        self, query: str, result: RaceResult, meter: _Meter, cancel: CancelToken, events: Any
    ) -> None:
        first_two = result.order[:2]
        tokens = {a: cancel.child() for a in first_two}
        tasks = {
            asyncio.create_task(self._full_isolated(a, query, meter, tokens[a], events, result)): a
            for a in first_two
        }
        try:
            pending = set(tasks)
            while pending and result.winner is None:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    arm = tasks[task]
                    status, loop = task.result()
                    if loop is not None:
                        meter.add(loop)
                    if status == "ok" and loop is not None and result.winner is None:
                        result.attempts.append((arm, "ok"))
                        self._win(result, arm, loop.text)
                    else:
                        result.attempts.append((arm, status))
            # The loser is cancelled through its token, so its partial spend is still counted.
            for task in pending:
                tokens[tasks[task]].cancel("another candidate answered first")
            for task in pending:
                _, loop = await task
                if loop is not None:
                    meter.add(loop)
                result.attempts.append((tasks[task], "cancelled"))
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            for task in tasks:
                if not task.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        if result.winner is None:
            rest = [a for a in result.order if a not in first_two]
            await self._sequential(query, rest, result, meter, cancel, events)

    async def _full_isolated(
        self,
        arm: str,
        query: str,
        meter: _Meter,
        cancel: CancelToken,
        events: Any,
        result: RaceResult,
    ) -> tuple[str, LoopResult | None]:
        cap = meter.token_cap(self.arms[arm].config.max_tokens, share=2)
        try:
            loop = await self._call(arm, query, cap, cancel, events)
        except TimeoutError:
            return "timeout", None
        return await self._accept(arm, loop, result), loop

    # ------------------------------------------------------------------ learning

    async def _learn(self, query: str, x: Any, result: RaceResult) -> None:
        failed_full = {a for a, s in result.attempts if s not in ("ok", "cancelled")}
        outcomes: list[ArmOutcome] = []
        for arm, preview in result.previews.items():
            if preview.cached or (preview.ok and arm not in result.scores):
                # A cached preview was learned from when it was made; an unjudged one carries
                # no quality signal. Neither updates the router (no correlated re-counting).
                continue
            quality = result.scores.get(arm, 0.0)
            outcomes.append(
                ArmOutcome(
                    arm,
                    quality,
                    preview.latency_s,
                    preview.cost_usd,
                    failed=(not preview.ok) or arm in failed_full,
                )
            )
        for arm in failed_full - set(result.previews):
            outcomes.append(ArmOutcome(arm, 0.0, None, 0.0, failed=True))
        if not outcomes:
            return
        result.rewards = self.reward.rewards(outcomes, query_chars=len(query), tracker=self.tracker)
        for arm, reward in result.rewards.items():
            delta = self.router.update(x, arm, reward.reward)
            if self.store is not None:
                await asyncio.to_thread(self.store.add, self.namespace, arm, delta)


def _judge_format() -> ResponseFormat:
    item = {
        "type": "object",
        "properties": {
            "preview": {"type": "integer"},
            "reason": {"type": "string"},
            **{c: {"type": "number", "minimum": 0, "maximum": 1} for c in CRITERIA},
        },
        "required": ["preview", "reason", *CRITERIA],
        "additionalProperties": False,
    }
    return ResponseFormat(
        name="preview_scores",
        schema={
            "type": "object",
            "properties": {"scores": {"type": "array", "items": item}},
            "required": ["scores"],
            "additionalProperties": False,
        },
    )


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_judge_scores(reply: str, count: int) -> dict[int, float]:
    """``{preview number: mean criterion score}``; the number, not the list position, counts.

    Entries with numbers outside ``1..count``, repeated numbers, or missing/non-numeric criteria
    are dropped; scores are clamped to [0, 1].
    """
    data: Any = None
    for candidate in (reply.strip(), *(m.group(0) for m in [_OBJECT.search(reply)] if m)):
        try:
            data = json.loads(candidate)
            break
        except ValueError:
            continue
    entries = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return {}
    out: dict[int, float] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        number = entry.get("preview")
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= count:
            continue
        if number in out:
            continue
        values: list[float] = []
        for criterion in CRITERIA:
            value = entry.get(criterion)
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                break
            values.append(min(1.0, max(0.0, float(value))))
        else:
            out[number] = sum(values) / len(values)
    return out
