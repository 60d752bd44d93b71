"""Building a bandit race from plain options, with its state next to the router's.

:func:`build_bandit_race` takes the seed's knobs by name (:class:`BanditOptions`: judge model,
alpha, ridge, state location, length threshold, quality/speed/cost weights, preview tokens,
top-k, budgets, …), validates them *before* any model is called and opens the router state with
its companions — the preview cache and the latency history — from one location
(:func:`~phi_core.routing.open_route_state`). :func:`run_bandit_race` loads the shared state,
races once and persists the updates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..cancel import CancelToken
from ..errors import UserError
from ..loop import AgentLoopConfig
from ..metering import Budget, check_amount_limit, check_count_limit
from ..parallel import runnable_python
from ..routing.bandits import LinUCBRouter
from ..routing.features import EmbeddingFeatures, FeatureExtractor, HashedFeatures
from ..routing.reward import LatencyTracker, RewardPolicy
from ..routing.state import open_route_state
from ..routing.stores import RouterStateStore
from ..sandbox import default_sandbox
from .pipeline import Arm, BanditRace, BanditRaceResult, RaceSettings, Verifier

__all__ = [
    "BanditOptions",
    "build_bandit_race",
    "route_scope",
    "run_bandit_race",
    "verifier_from_spec",
]


@dataclass(frozen=True)
class BanditOptions:
    """The seed's knobs, with its defaults (``ridge`` 1.0 instead of 0.01: see the study §7).

    ``top_k`` ``None`` previews fewer arms than there are (see :class:`RaceSettings`);
    ``policy="baseline"`` keeps the given order and previews every arm.
    """

    judge_model: str | None = None
    alpha: float = 1.0
    ridge: float = 1.0
    state: str | None = None
    length_threshold: int = 2000
    quality_weight: float = 0.8
    speed_weight: float = 0.2
    cost_weight: float = 0.0
    cost_scale_usd: float = 0.01
    fallback_penalty: float = 0.05
    min_preview_tokens: int = 120
    adaptive_min_scale: float = 0.75
    adaptive_max_scale: float = 1.5
    speculative_min_query_length: int = 2000
    top_k: int | None = None
    preview_timeout_s: float | None = None
    full_timeout_s: float | None = None
    total_timeout_s: float | None = None
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    max_calls: int | None = None
    max_concurrency: int | None = None
    features: Literal["hashed", "embedding"] = "hashed"
    dim: int = 64
    race_only_when_unsure: bool = True
    policy: Literal["bandit", "baseline"] = "bandit"
    preview_cache: bool = True
    cache_ttl_s: float = 600.0
    state_key: str | None = None
    """Key prefix of a router state in Redis (the seed's ``ROUTER_STATE_KEY``); None: the
    default prefix."""
    verify: str | None = None
    """A check of each full answer (see :func:`verifier_from_spec`); None: no check."""
    scope: str | None = None
    """Who learns apart: the router statistics and latency history are kept under the
    features' schema plus this scope (``{schema}|{scope}``), so two routers whose arms share a
    name (a branch ``fast`` on different models) never mix what they learned. The gateway and
    ``phi mcp`` give each route profile its own (``route=PROFILE``). None: the schema alone,
    which every race with the same features and arm names shares (the command line's)."""

    def namespace(self, features: FeatureExtractor) -> str:
        """The router state's namespace for ``features`` (see :attr:`scope`)."""
        if self.scope is None:
            return features.schema
        if not self.scope.strip():
            raise UserError("BanditOptions.scope must not be empty; leave it out (None) instead.")
        return f"{features.schema}|{self.scope}"

    def budget(self) -> Budget | None:
        """The race's :class:`Budget` from the four limit options (``None``: none set).

        Raises:
            UserError: a limit that is set but not > 0 (0 is refused, not read as "no limit"),
                or not a whole number where one is counted — named as the option it is.
        """
        check_count_limit("BanditOptions.max_total_tokens", self.max_total_tokens)
        check_amount_limit("BanditOptions.max_cost_usd", self.max_cost_usd, "dollars")
        check_amount_limit("BanditOptions.total_timeout_s", self.total_timeout_s, "seconds")
        check_count_limit("BanditOptions.max_calls", self.max_calls)
        budget = Budget(
            max_tokens=self.max_total_tokens,
            max_cost_usd=self.max_cost_usd,
            max_wall_s=self.total_timeout_s,
            max_calls=self.max_calls,
        )
        return None if budget.unlimited else budget


def verifier_from_spec(spec: str) -> Verifier:
    """The answer check named by ``spec``.

    ``python``: the answer must contain Python whose function loads
    (:func:`phi_core.parallel.runnable_python`); ``regex:PATTERN``: the stripped answer must
    contain a match of PATTERN (``re.search``; anchor it with ``^…$`` for an exact format).

    Raises:
        UserError: an unknown form or a pattern that does not compile.
    """
    if spec.strip().lower() == "python":
        return runnable_python
    if spec.startswith("regex:"):
        try:
            pattern = re.compile(spec[len("regex:") :])
        except re.error as exc:
            raise UserError(f"verify {spec!r}: the pattern does not compile ({exc}).") from exc
        return lambda text: pattern.search(text.strip()) is not None
    raise UserError(
        f"Unknown verify check {spec!r}. Use 'python' (the answer must contain runnable Python) "
        "or 'regex:PATTERN' (the answer must match PATTERN, e.g. 'regex:^[A-D]$')."
    )


def route_scope(profile: str) -> str:
    """The :attr:`BanditOptions.scope` of a served route profile (``phi serve``, ``phi mcp``):
    each profile learns apart, and the gateway and the MCP server serving one file share it."""
    return f"route={profile}"


def _features(options: BanditOptions) -> FeatureExtractor:
    if options.features == "hashed":
        return HashedFeatures(options.dim, length_scale=options.length_threshold)
    if options.features == "embedding":
        return EmbeddingFeatures(options.dim)
    raise UserError(f"Unknown features {options.features!r}; use 'hashed' or 'embedding'.")


def build_bandit_race(
    agent_models: Sequence[str],
    options: BanditOptions | None = None,
    *,
    configs: dict[str, AgentLoopConfig] | None = None,
    store: RouterStateStore | None = None,
) -> BanditRace:
    """Validate the options and build the race (no model is called).

    ``configs`` may supply a ready :class:`AgentLoopConfig` per model name (tests pass scripted
    providers this way); other names are resolved as ``provider:model`` strings. ``store``
    replaces the router state (then no preview cache or latency history is opened).
    """
    options = options or BanditOptions()
    models = [m.strip() for m in agent_models if m.strip()]
    if not models:
        raise UserError(
            "No agent models given: name at least one `provider:model`, "
            "e.g. openai:gpt-4o-mini or local:smollm2."
        )
    configs = configs or {}
    arms = []
    for name in models:
        config = configs.get(name) or AgentLoopConfig(model=name)
        config.model_config()  # an unknown model or missing key is reported now
        arms.append(Arm(name, config))
    judge: AgentLoopConfig | None = None
    if options.judge_model:
        judge = configs.get(options.judge_model) or AgentLoopConfig(model=options.judge_model)
        judge.model_config()
    concurrency = options.max_concurrency
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise UserError(
            f"BanditOptions.max_concurrency must be an int >= 1 (or None for no limit), "
            f"got {concurrency!r}."
        )
    features = _features(options)
    reward = RewardPolicy(
        quality_weight=options.quality_weight,
        latency_weight=options.speed_weight,
        cost_weight=options.cost_weight,
        fallback_penalty=options.fallback_penalty,
        cost_scale_usd=options.cost_scale_usd,
        length_threshold=options.length_threshold,
    )
    settings = RaceSettings(
        top_k=options.top_k,
        preview_tokens=options.min_preview_tokens,
        min_scale=options.adaptive_min_scale,
        max_scale=options.adaptive_max_scale,
        length_threshold=options.length_threshold,
        speculative_min_chars=options.speculative_min_query_length,
        race_only_when_unsure=options.race_only_when_unsure,
        policy=options.policy,
        preview_timeout_s=options.preview_timeout_s,
        answer_timeout_s=options.full_timeout_s,
        max_concurrency=options.max_concurrency,
    )
    budget = options.budget()
    verify = verifier_from_spec(options.verify) if options.verify is not None else None
    if verify is runnable_python:
        default_sandbox().check()  # refuse before the race when model code could not be contained
    router = LinUCBRouter(features.dim, alpha=options.alpha, ridge=options.ridge)
    namespace = options.namespace(features)
    cache = None
    tracker = LatencyTracker(namespace=namespace)
    preview_tracker = LatencyTracker(namespace=f"{namespace}:preview")
    if store is None:
        state = open_route_state(
            options.state,
            preview_cache=options.preview_cache,
            cache_ttl_s=options.cache_ttl_s,
            key_prefix=options.state_key,
        )
        store, cache = state.store, state.cache
        tracker.history = preview_tracker.history = state.history
    return BanditRace(
        arms,
        router,
        judge=judge,
        features=features,
        reward=reward,
        store=store,
        namespace=namespace,
        cache=cache,
        tracker=tracker,
        preview_tracker=preview_tracker,
        settings=settings,
        budget=budget,
        verify=verify,
    )


async def run_bandit_race(
    query: str,
    agent_models: Sequence[str],
    options: BanditOptions | None = None,
    *,
    configs: dict[str, AgentLoopConfig] | None = None,
    store: RouterStateStore | None = None,
    events: Any = None,
    cancel: CancelToken | None = None,
) -> BanditRaceResult:
    """Build, load shared state, race once, persist; see :func:`build_bandit_race`."""
    race = build_bandit_race(agent_models, options, configs=configs, store=store)
    await race.load()
    return await race.run(query, events=events, cancel=cancel)
