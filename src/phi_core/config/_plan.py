"""Planning a race: from specs (a race file, ``-m`` strings, explicit settings) to a checked plan.

:func:`plan_race` is the one place that decides what a race runs — the branches (the default
three configurations of the embedded model when none are given), the judge (the default rule
below), the strategy and the limits — and checks it all before any model is called (unknown
provider, missing key or extra, unknown strategy). The command line, config files and the
gateway call it; :meth:`RacePlan.run` races a prompt and :meth:`RacePlan.payload` is the JSON
result of ``phi race --json``. A race's and a bandit race's results share one shape (built by
one function): the same keys with the same types, the bandit adding its own on top
(:func:`bandit_payload`).

The strategy rule: an explicit strategy wins; else the race file's; else ``judge`` when a judge
is named, a branch is a vendor model or there are only two branches; else
:data:`EMBEDDED_DEFAULT_STRATEGY` (``consensus``, measured best for the embedded model by
``benchmarks/judge_bench.py`` with three answers).

The judge rule: an explicit judge wins; else the race file's; else the embedded model when every
branch is local; else the first branch's model at temperature 0. A local judge of the ``judge``
strategy is held to a grammar that makes its reply one of the answer numbers.

``strategy = "bandit"`` hands the plan to the learned racing pipeline through one seam,
:func:`bandit_race_from_plan`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from ..cancel import CancelToken
from ..errors import UserError
from ..loop import AgentContext, AgentLoopConfig
from ..metering import Budget
from ..parallel import (
    EvaluationDecision,
    EvaluationStrategy,
    ParallelLoopOutcome,
    ParallelLoopResult,
    agent_loop_parallel,
)
from ..parallel import strategy_from_name as _parallel_strategy
from ..providers.base import Provider
from ..providers.retry import RetryPolicy
from ..race import BanditOptions, BanditRace, BanditRaceResult, build_bandit_race
from ..routing.stores import RouterStateStore
from ..types import AgentMessage, ResponseFormat, Usage, UserMessage
from ._race import (
    DEFAULT_BRANCHES,
    DEFAULT_JUDGE,
    BranchSpec,
    RaceSpec,
    parse_branch,
    strategy_name,
)

_V = TypeVar("_V")

__all__ = [
    "DEFAULT_LOCAL_MAX_TOKENS",
    "EMBEDDED_DEFAULT_STRATEGY",
    "JUDGED_STRATEGIES",
    "JUDGE_MAX_TOKENS",
    "PlanWarning",
    "RacePlan",
    "bandit_payload",
    "bandit_race_from_plan",
    "default_strategy",
    "plan_race",
]

DEFAULT_LOCAL_MAX_TOKENS = 256
"""Output token limit of the default local race when nothing else sets one."""
JUDGE_MAX_TOKENS = 1024
"""A judge's reply (scores with reasons for every answer) must not be cut by the branches' limit;
a judge spec's own ``max_tokens`` still wins."""
JUDGED_STRATEGIES = ("judge", "pairwise", "rubric")
EMBEDDED_DEFAULT_STRATEGY = "consensus"
"""The default strategy when every branch runs a local model and no judge is named: measured
best for the embedded model by ``benchmarks/judge_bench.py`` (``benchmarks/results/judge``): on
RouterBench disagreement prompts with three answers, consensus picked a right answer more often
than the embedded judge (single order or order-debiased), at no judge call."""


def default_strategy(branches: Sequence[BranchSpec], judge: object = None) -> str:
    """The strategy of a race that names none: ``judge`` when a judge model is given or any
    branch is a vendor model (a vendor judge follows content far better than a 135M one; the
    benchmark runs it with ``--judge provider:model`` for anyone with a key) or when only two
    branches race (no majority is possible), else :data:`EMBEDDED_DEFAULT_STRATEGY`."""
    if judge is None and len(branches) >= 3 and all(b.model.startswith("local:") for b in branches):
        return EMBEDDED_DEFAULT_STRATEGY
    # Two answers never have a majority: consensus can only tie (39.3 % right on the benchmark's
    # two-answer prompts), the embedded judge picks the first shown (55.3 %, the same as "first").
    return "judge"


@dataclass(frozen=True)
class PlanWarning:
    """A setting that was given but does nothing in this plan; ``setting`` is its spec name."""

    setting: str
    message: str


@dataclass
class RacePlan:
    """A checked race: one loop config per branch, the strategy and its judge, the limits."""

    branches: list[BranchSpec]
    configs: list[AgentLoopConfig]
    strategy: str
    judge: BranchSpec | None = None
    judge_config: AgentLoopConfig | None = None
    timeout: float | None = None
    max_concurrency: int | None = None
    budget: Budget | None = None
    """What the whole race (branches and judge) may spend; a call that may not fit is refused."""
    bandit: BanditOptions | None = None
    """The learned router's options (``strategy == "bandit"`` only)."""
    warnings: list[PlanWarning] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return [b.label for b in self.branches]

    def with_retry(self, retry: RetryPolicy) -> RacePlan:
        """This plan with ``retry`` on every branch and the judge (a server's ``retries``)."""
        judge = self.judge_config
        return dataclasses.replace(
            self,
            configs=[dataclasses.replace(c, retry=retry) for c in self.configs],
            judge_config=dataclasses.replace(judge, retry=retry) if judge else None,
        )

    def build_strategy(self) -> EvaluationStrategy:
        """The parallel evaluation strategy (not for ``bandit``, which is a pipeline)."""
        if self.strategy == "bandit":
            raise UserError("A bandit plan has no parallel strategy; use bandit_race_from_plan().")
        strategy = _parallel_strategy(self.strategy, judge_model=self.judge_config)
        return cast(EvaluationStrategy, strategy)  # every built-in implements evaluate()

    async def run(
        self,
        prompt: str | Sequence[AgentMessage],
        *,
        context: AgentContext | None = None,
        events: Any = None,
        cancel: CancelToken | None = None,
        store: RouterStateStore | None = None,
    ) -> ParallelLoopResult | BanditRaceResult:
        """Race ``prompt``; ``events`` receives every event. A bandit plan loads the router
        state (``store``, default: the user directory's), races once and learns. ``prompt`` may
        be messages (a tool result, an image) except for a bandit plan, which races text;
        ``context`` holds the earlier turns (for a bandit plan too)."""
        if self.strategy == "bandit":
            if not isinstance(prompt, str):
                raise UserError("A bandit race answers one text query; pass the prompt as a str.")
            race = bandit_race_from_plan(self, store=store)
            await race.load()
            conversation = None
            if context is not None:  # the earlier turns, then the prompt
                conversation = context.clone()
                conversation.messages.append(UserMessage.text(prompt))
            return await race.run(prompt, context=conversation, events=events, cancel=cancel)
        return await agent_loop_parallel(
            prompt,
            context or AgentContext(),
            self.configs,
            self.build_strategy(),
            events=events,
            cancel=cancel,
            max_concurrency=self.max_concurrency,
            branch_timeout=self.timeout,
            budget=self.budget,
        )

    def payload(self, result: ParallelLoopResult | BanditRaceResult) -> dict[str, Any]:
        """The result object of ``phi race --json`` (its last line)."""
        if isinstance(result, BanditRaceResult):
            return bandit_payload(result)
        labels = self.labels
        winner = result.selected
        return _race_result(
            session_id=result.session_id,
            status=result.status,
            winner=(
                _winner_row(winner.config_index, labels[winner.config_index], winner)
                if winner is not None
                else None
            ),
            decision=result.decision,
            branches=[
                _branch_row(o.config_index, labels[o.config_index], o) for o in result.outcomes
            ],
            judge=self.judge.model if self.judge is not None else None,
            total_usage=result.total_usage,
            cost_usd=result.cost_usd,
            wall_time_s=result.wall_time_s,
        )


def plan_race(
    spec: RaceSpec | None = None,
    *,
    models: Sequence[str | BranchSpec] = (),
    judge: str | BranchSpec | None = None,
    strategy: str | None = None,
    system_prompt: str | None = None,
    max_tokens: int | None = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    budget: Budget | None = None,
    bandit: BanditOptions | None = None,
    providers: Mapping[str, Provider] | None = None,
) -> RacePlan:
    """Decide and check what a race runs; keyword settings override the spec's.

    Args:
        spec: a race file's contents (branches, judge, strategy, limits).
        models: the branches to race (``provider:model[@settings]`` strings or names of the
            spec's branches); default: the spec's branches, else :data:`DEFAULT_BRANCHES`.
        judge: the judge of judge strategies (and of the bandit's previews).
        strategy: a name from :data:`RACE_STRATEGIES` (default: the strategy rule above).
        system_prompt: for branches that set none; on the default race it is put before each
            configuration's own prompt, so it applies to every branch.
        max_tokens: output token limit for branches that set none.
        timeout: seconds after which a branch times out.
        max_concurrency: at most this many branches at once.
        budget: what the whole race may spend (tokens, dollars, wall clock, calls).
        bandit: the learned router's options (``strategy="bandit"`` only).
        providers: a provider per model string, used instead of the registry's (test doubles).

    Raises:
        UserError: anything that would make the race fail before it starts.
    """
    spec = spec or RaceSpec()
    providers = providers or {}
    warnings: list[PlanWarning] = []
    named = spec.branches or []
    if models:
        branches = [m if isinstance(m, BranchSpec) else parse_branch(m, named) for m in models]
    else:
        branches = list(named) or [b.model_copy() for b in DEFAULT_BRANCHES]
    default_race = not models and not named
    name = strategy_name(
        strategy or spec.strategy or default_strategy(branches, judge or spec.judge)
    )
    system_prompt = system_prompt if system_prompt is not None else spec.system_prompt
    if system_prompt is not None:
        if default_race:
            branches = [_with_instruction(b, system_prompt) for b in branches]
        elif all(b.system_prompt is not None for b in branches):
            warnings.append(
                PlanWarning("system_prompt", "has no effect: every branch sets its own.")
            )
    max_tokens = max_tokens if max_tokens is not None else spec.max_tokens
    if max_tokens is None and default_race:
        max_tokens = DEFAULT_LOCAL_MAX_TOKENS
    elif max_tokens is not None and all(b.max_tokens is not None for b in branches):
        warnings.append(PlanWarning("max_tokens", "has no effect: every branch sets its own."))
    configs = [
        b.loop_config(
            provider=providers.get(b.model), max_tokens=max_tokens, system_prompt=system_prompt
        )
        for b in branches
    ]
    judge_spec, judge_config = _judge(name, judge, spec, branches, providers, warnings)
    timeout = timeout if timeout is not None else spec.timeout
    max_concurrency = max_concurrency if max_concurrency is not None else spec.max_concurrency
    _check_limits(timeout, max_concurrency)
    if name == "bandit":
        labels = [b.label for b in branches]
        if len(set(labels)) != len(labels):
            raise UserError(
                f"The bandit router learns per branch label, and these repeat: {labels}; give "
                "each branch a distinct `name` (or distinct settings)."
            )
        bandit = bandit or BanditOptions()
    elif bandit is not None:
        warnings.append(PlanWarning("bandit", f"has no effect with strategy {name!r}."))
        bandit = None
    plan = RacePlan(
        branches=branches,
        configs=configs,
        strategy=name,
        judge=judge_spec,
        judge_config=judge_config,
        timeout=timeout,
        max_concurrency=max_concurrency,
        budget=None if budget is None or budget.unlimited else budget,
        bandit=bandit,
        warnings=warnings,
    )
    if name != "bandit":
        plan.build_strategy()  # the strategy's own checks (a judge model that does not resolve)
    return plan


def _with_instruction(branch: BranchSpec, instruction: str) -> BranchSpec:
    persona = branch.system_prompt
    prompt = f"{instruction}\n\n{persona}" if persona else instruction
    return branch.model_copy(update={"system_prompt": prompt})


def _judge(
    strategy: str,
    judge: str | BranchSpec | None,
    spec: RaceSpec,
    branches: list[BranchSpec],
    providers: Mapping[str, Provider],
    warnings: list[PlanWarning],
) -> tuple[BranchSpec | None, AgentLoopConfig | None]:
    if strategy not in (*JUDGED_STRATEGIES, "bandit"):
        if judge is not None:
            raise UserError(
                f"A judge has no effect with strategy {strategy!r}; use strategy judge, "
                "pairwise, rubric or bandit, or leave the judge out."
            )
        if spec.judge is not None:
            warnings.append(PlanWarning("judge", f"has no effect with strategy {strategy!r}."))
        return None, None
    if judge is not None:
        chosen = judge if isinstance(judge, BranchSpec) else parse_branch(judge)
    elif spec.judge is not None:
        chosen = spec.judge
    elif all(b.model.startswith("local:") for b in branches):
        chosen = DEFAULT_JUDGE
    else:
        # Racing vendors: the first branch's model judges, deterministically.
        chosen = BranchSpec(name="judge", model=branches[0].model, temperature=0.0)
    config = chosen.loop_config(provider=providers.get(chosen.model), max_tokens=JUDGE_MAX_TOKENS)
    if strategy == "judge" and chosen.model.startswith("local:"):
        # A small local judge often forgets to name an answer; llama.cpp's grammar makes its
        # reply one of the answer numbers (vendor APIs take no bare-enum schema).
        numbers = list(range(1, len(branches) + 1))
        config = dataclasses.replace(
            config, response_format=ResponseFormat(name="choice", schema={"enum": numbers})
        )
    return chosen, config


def _check_limits(timeout: float | None, max_concurrency: int | None) -> None:
    if timeout is not None and not timeout > 0:
        raise UserError(f"timeout must be > 0 seconds (or None for none), got {timeout!r}.")
    if max_concurrency is not None and max_concurrency < 1:
        raise UserError(
            f"max_concurrency must be >= 1 (or None for no limit), got {max_concurrency!r}."
        )


# --------------------------------------------------------------------------- the bandit seam


def bandit_race_from_plan(plan: RacePlan, *, store: RouterStateStore | None = None) -> BanditRace:
    """The one seam between a plan and the bandit race: each branch becomes an arm named by its
    label, the plan's judge scores the previews, and the plan's limits (timeout per call,
    concurrency, budget) apply wherever the bandit options set none."""
    options = plan.bandit or BanditOptions()
    configs = dict(zip(plan.labels, plan.configs, strict=True))
    if plan.judge is not None and plan.judge_config is not None:
        judge_name = f"judge:{plan.judge.model}"
        configs[judge_name] = plan.judge_config
        options = dataclasses.replace(options, judge_model=judge_name)
    budget = plan.budget or Budget()
    # `is not None`, not `or`: a bandit option set to 0 is refused by build_bandit_race as it
    # is on the direct path, instead of silently meaning "the plan's limit (or none)".
    options = dataclasses.replace(
        options,
        preview_timeout_s=_own(options.preview_timeout_s, plan.timeout),
        full_timeout_s=_own(options.full_timeout_s, plan.timeout),
        max_concurrency=_own(options.max_concurrency, plan.max_concurrency),
        max_total_tokens=_own(options.max_total_tokens, budget.max_tokens),
        max_cost_usd=_own(options.max_cost_usd, budget.max_cost_usd),
        total_timeout_s=_own(options.total_timeout_s, budget.max_wall_s),
        max_calls=_own(options.max_calls, budget.max_calls),
    )
    return build_bandit_race(plan.labels, options, configs=configs, store=store)


def _own(value: _V | None, fallback: _V | None) -> _V | None:
    """``value`` when it is set (0 included), else ``fallback``."""
    return value if value is not None else fallback


# --------------------------------------------------------------------------- the JSON result


def _branch_row(index: int, name: str, outcome: ParallelLoopOutcome) -> dict[str, Any]:
    """A branch of the result: ``index`` and ``name`` are its branch's (a bandit arm's)."""
    return {
        "index": index,
        "name": name,
        "loop_id": outcome.loop_id,
        "model": outcome.config.model_config().spec,
        "status": outcome.status,
        "error": outcome.error,
        "error_kind": outcome.error_kind,
        "text": outcome.text,
        "latency_s": round(outcome.latency_s, 4),
        "usage": outcome.usage.model_dump(mode="json"),
        "cost_usd": outcome.cost_usd,
    }


def _winner_row(index: int, name: str, outcome: ParallelLoopOutcome) -> dict[str, Any]:
    """The winner of the result: its branch row's identity and text."""
    row = _branch_row(index, name, outcome)
    return {key: row[key] for key in ("index", "name", "loop_id", "model", "text")}


def _race_result(
    *,
    session_id: str,
    status: str,
    winner: dict[str, Any] | None,
    decision: EvaluationDecision,
    branches: list[dict[str, Any]],
    judge: str | None,
    total_usage: Usage,
    cost_usd: float,
    wall_time_s: float,
) -> dict[str, Any]:
    """The keys every ``race_result`` has, a race's or a bandit race's, with one type each."""
    return {
        "type": "race_result",
        "session_id": session_id,
        "status": status,
        "winner": winner,
        "decision": decision.summary(),
        "branches": branches,
        "judge": judge,
        "evaluation_usage": decision.usage.model_dump(mode="json"),
        "total_usage": total_usage.model_dump(mode="json"),
        "cost_usd": cost_usd,
        "wall_time_s": round(wall_time_s, 4),
    }


def bandit_payload(result: BanditRaceResult) -> dict[str, Any]:
    """The result object of a bandit race's ``--json`` (its last line).

    Every key of a race's result, with the same type (:meth:`RacePlan.payload`): ``winner`` is
    ``{index, name, loop_id, model, text}`` or null, ``decision`` the bandit's (strategy
    ``bandit``, preview scores by arm index, the judge calls' usage), each branch row has
    ``index`` and ``name`` (its arm's position and name), ``total_usage`` is what was paid.
    The bandit's own keys come on top: ``strategy``, ``text``, ``verified``, ``quality``,
    ``error``, the route decision (``action``, ``contenders``, ``order``, ``ranking``,
    ``previews_skipped``), ``scores``, ``attempts``, ``rewards``, ``usage`` (the same as
    ``total_usage``) and, on each branch row, ``arm`` and ``call`` (``preview`` or ``answer``)."""
    arms = list(result.arms)

    def index(arm: str) -> int:
        if arm not in arms:  # a result built by hand, without its arms
            arms.append(arm)
        return arms.index(arm)

    branches: list[dict[str, Any]] = []
    previews = result.previews.outcomes if result.previews is not None else []
    for call, outcomes in (("preview", previews), ("answer", result.answers)):
        for o in outcomes:
            arm = _arm(o)
            branches.append({**_branch_row(index(arm), arm, o), "arm": arm, "call": call})
    answer, name = result.answer, result.winner
    winner = (
        _winner_row(index(name), name, answer) if answer is not None and name is not None else None
    )
    common = _race_result(
        session_id=result.session_id,
        status=result.status,
        winner=winner,
        decision=_bandit_decision(result, index),
        branches=branches,
        judge=result.judge,
        total_usage=result.usage,
        cost_usd=result.cost_usd,
        wall_time_s=result.wall_time_s,
    )
    return {
        "type": common.pop("type"),
        "strategy": "bandit",
        **common,
        "text": result.text,
        "verified": result.verified,
        "quality": result.quality,
        "error": result.error,
        "action": result.action,
        "previews_skipped": result.previews_skipped,
        "contenders": result.contenders,
        "order": result.order,
        "ranking": result.ranking.explain() if result.ranking is not None else [],
        "scores": result.scores,
        "attempts": [list(a) for a in result.attempts],
        "rewards": {k: v.reward for k, v in result.rewards.items()},
        "usage": common["total_usage"],
    }


def _arm(outcome: ParallelLoopOutcome) -> str:
    return str(outcome.config.extra.get("arm", outcome.config_id))


def _bandit_decision(result: BanditRaceResult, index: Callable[[str], int]) -> EvaluationDecision:
    """The bandit's decision in a race's terms: the winner's arm index, the preview judge's
    scores by arm index, the judge calls' usage (preview scoring and the answer's grading)."""
    judged = [
        d
        for d in (result.previews.decision if result.previews is not None else None, result.grade)
        if d is not None
    ]
    if result.winner is None:
        rationale = result.error or "no answer was accepted"
    else:
        rationale = f"{result.winner} answered"
        if result.reason:
            rationale = f"{result.reason}; {rationale}"
        if result.verified is not None:
            rationale += " (verified)" if result.verified else " (no answer passed the check)"
    return EvaluationDecision(
        index=index(result.winner) if result.winner is not None else None,
        strategy="bandit",
        usage=Usage.sum(d.usage for d in judged),
        cost_usd=sum(d.cost_usd for d in judged),
        scores={index(arm): score for arm, score in result.scores.items()},
        rationale=rationale,
        fallback=result.previews is not None and result.previews.decision.fallback,
        details={
            "action": result.action,
            "reason": result.reason,
            "contenders": result.contenders,
            "order": result.order,
            "verified": result.verified,
            "quality": result.quality,
        },
    )
