"""``parallel-agents``: the seed's command line (the parallel research system) on phi-core.

Every flag and environment variable of the seed is accepted with its documented meaning or
refused with a message saying what to use instead:

* ``--agent-models`` (``DEEP_RESEARCH_AGENT_MODELS``): comma-separated models; a bare name
  (``gpt-4o``) is looked up in the catalog, and each may carry ``@settings`` exactly as
  ``phi race -m`` (``gpt-4o@temperature=0.2,max_tokens=300,gpt-4o-mini``).
* ``--judge-model`` (``DEEP_RESEARCH_JUDGE_MODEL``): default as in ``phi race``.
* ``--bandit-*`` flags and their ``BANDIT_*`` variables; ``--bandit-state`` (``BANDIT_STATE``).
* ``REDIS_URL``: router state (its keys under the ``ROUTER_STATE_KEY`` prefix), preview cache
  and latency history in Redis, unless ``--bandit-state`` names a file; cached previews live
  ``PREVIEW_CACHE_TTL`` seconds wherever the state is.
* ``--speculative-top-k`` (``SPECULATIVE_TOP_K``): how many full answers race at once for a long
  query, which here is the number of previewed arms, so it sets ``--top-k``.
* ``--bandit-features length`` uses the hashed features, which carry the seed's length features
  (characters / threshold, words) plus word n-grams and intent signals.
* ``--embedding-model``: only the local ``all-MiniLM-L6-v2`` (extra ``embed``, no network).
* ``--latency-bias-scale``: 0 is accepted (no bias); phi-core puts latency into the reward
  instead, so any other value is refused with a pointer to ``--bandit-speed-weight``.
* ``--no-web-search``: accepted; phi-core's candidates never search the web.
* ``MODEL_PRICE_USD_PER_TOKEN_JSON``: ``{model: dollars per token}`` overrides the price table.

The ``parallel-agents`` console script also reads a ``.env`` file from the current directory (as
the seed did); variables already set win.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from ..cancel import CancelToken
from ..config import (
    BranchSpec,
    RacePlan,
    bandit_payload,
    bandit_race_from_plan,
    plan_race,
    split_branch_list,
)
from ..errors import Interrupted, PhiError, StateStoreError, UserError, redact
from ..providers.base import Provider
from ..providers.registry import resolve_model
from ..race import BanditOptions, BanditRace, BanditRaceResult
from ..routing.state import check_redis_url, is_redis
from ..types import Pricing
from ._bandit import flush_router_updates
from ._branches import flag_branch, flag_branches
from ._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_PIPE,
    guard_process_streams,
    output_closed,
    read_prompt,
    run_interruptible,
    usage_error,
    warn,
)
from ._options import warn_key_without_redis
from ._script import load_scripts

__all__ = ["main", "parallel_agents", "parallel_agents_app"]

MINILM = ("all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2")

parallel_agents_app = typer.Typer(
    name="parallel-agents",
    help="Race agent models with a learned router (the seed's flags and environment variables).",
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


@parallel_agents_app.command()
def parallel_agents(
    query: Annotated[str, typer.Argument(help="The question to answer; `-` reads stdin.")],
    agent_models: Annotated[
        str,
        typer.Option(
            "--agent-models",
            envvar="DEEP_RESEARCH_AGENT_MODELS",
            help="Comma-separated models: `provider:model` or a bare name from the catalog "
            "(gpt-4o), each optionally with @settings as in `phi race -m`.",
        ),
    ],
    judge_model: Annotated[
        str | None,
        typer.Option(
            "--judge-model",
            envvar="DEEP_RESEARCH_JUDGE_MODEL",
            help="Model that scores the previews (default: as `phi race`).",
        ),
    ] = None,
    min_preview_tokens: Annotated[int, typer.Option("--min-preview-tokens", min=1)] = 120,
    strategy: Annotated[
        str, typer.Option("--strategy", help="bandit (learned order) or baseline (given order).")
    ] = "bandit",
    bandit_alpha: Annotated[float, typer.Option("--bandit-alpha", envvar="BANDIT_ALPHA")] = 1.0,
    bandit_ridge: Annotated[float, typer.Option("--bandit-ridge", envvar="BANDIT_RIDGE")] = 1.0,
    bandit_state: Annotated[
        str | None,
        typer.Option(
            "--bandit-state",
            envvar=["BANDIT_STATE", "PHI_ROUTER_STATE"],
            help="Router state: .sqlite/.json file or redis://… (default: REDIS_URL when set, "
            "else router_state.sqlite in $PHI_HOME).",
        ),
    ] = None,
    bandit_length_threshold: Annotated[
        int, typer.Option("--bandit-length-threshold", envvar="BANDIT_LENGTH_THRESHOLD", min=1)
    ] = 2000,
    bandit_quality_weight: Annotated[
        float, typer.Option("--bandit-quality-weight", envvar="BANDIT_QUALITY_WEIGHT")
    ] = 0.8,
    bandit_speed_weight: Annotated[
        float, typer.Option("--bandit-speed-weight", envvar="BANDIT_SPEED_WEIGHT")
    ] = 0.2,
    bandit_cost_weight: Annotated[
        float, typer.Option("--bandit-cost-weight", envvar="BANDIT_COST_WEIGHT")
    ] = 0.0,
    bandit_fallback_penalty: Annotated[
        float, typer.Option("--bandit-fallback-penalty", envvar="BANDIT_FALLBACK_PENALTY")
    ] = 0.05,
    adaptive_min_scale: Annotated[
        float, typer.Option("--adaptive-min-scale", envvar="ADAPTIVE_MIN_SCALE")
    ] = 0.75,
    adaptive_max_scale: Annotated[
        float, typer.Option("--adaptive-max-scale", envvar="ADAPTIVE_MAX_SCALE")
    ] = 1.5,
    latency_bias_scale: Annotated[
        float | None,
        typer.Option(
            "--latency-bias-scale",
            envvar="LATENCY_BIAS_SCALE",
            help="Only 0: latency enters the reward (--bandit-speed-weight), not the ranking.",
        ),
    ] = None,
    speculative_min_query_length: Annotated[
        int, typer.Option("--speculative-min-query-length", envvar="SPECULATIVE_MIN_QUERY_LENGTH")
    ] = 2000,
    speculative_top_k: Annotated[
        int | None,
        typer.Option(
            "--speculative-top-k",
            envvar="SPECULATIVE_TOP_K",
            min=2,
            help="Full answers raced at once for long queries: the previewed arms (--top-k).",
        ),
    ] = None,
    preview_timeout_s: Annotated[
        float,
        typer.Option("--preview-timeout-s", envvar="PREVIEW_TIMEOUT_S", min=0, help="0 = off"),
    ] = 0,
    full_timeout_s: Annotated[
        float, typer.Option("--full-timeout-s", envvar="FULL_TIMEOUT_S", min=0, help="0 = off")
    ] = 0,
    total_timeout_s: Annotated[float, typer.Option("--total-timeout-s", min=0, help="0 = off")] = 0,
    max_total_tokens: Annotated[int, typer.Option("--max-total-tokens", min=0, help="0 = off")] = 0,
    max_total_cost_usd: Annotated[
        float, typer.Option("--max-total-cost-usd", min=0, help="0 = off")
    ] = 0,
    bandit_features: Annotated[
        str,
        typer.Option(
            "--bandit-features",
            envvar="BANDIT_FEATURES",
            help="hashed (default; `length`, the seed's default, means the same) or embedding.",
        ),
    ] = "hashed",
    embedding_model: Annotated[
        str | None,
        typer.Option(
            "--embedding-model",
            envvar="EMBEDDING_MODEL",
            help="Only all-MiniLM-L6-v2 (local, extra `embed`).",
        ),
    ] = None,
    embedding_dim: Annotated[
        int, typer.Option("--embedding-dim", envvar="EMBEDDING_DIM", min=8)
    ] = 64,
    no_web_search: Annotated[
        bool,
        typer.Option(
            "--no-web-search", help="Accepted: phi-core's candidates never search the web."
        ),
    ] = False,
    top_k: Annotated[
        int | None,
        typer.Option("--top-k", min=1, help="Arms to preview (default: fewer than there are)."),
    ] = None,
    redis_url: Annotated[
        str | None,
        typer.Option("--redis-url", envvar="REDIS_URL", help="Redis for state and cache."),
    ] = None,
    router_state_key: Annotated[
        str | None,
        typer.Option(
            "--router-state-key",
            envvar="ROUTER_STATE_KEY",
            help="Key prefix of the state in Redis.",
        ),
    ] = None,
    preview_cache_ttl: Annotated[
        float | None,
        typer.Option(
            "--preview-cache-ttl",
            envvar="PREVIEW_CACHE_TTL",
            min=1,
            help="Seconds a cached preview stays valid (default 600).",
        ),
    ] = None,
    model_prices: Annotated[
        str | None,
        typer.Option(
            "--model-prices",
            envvar="MODEL_PRICE_USD_PER_TOKEN_JSON",
            help='JSON {"model": dollars per token} overriding the price table.',
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    script: Annotated[
        Path | None, typer.Option(hidden=True, envvar="PHI_SCRIPT", help="Scripted replies.")
    ] = None,
) -> None:
    """Race the agent models on QUERY and learn which one to trust.

    The seed's command line and variables; the separate `parallel-agents` script also reads
    ./.env first, as the seed did (`phi parallel-agents` reads no .env, like every phi command).
    """
    del no_web_search  # the documented meaning (no web search) is what phi-core always does
    try:
        text = read_prompt(query, "parallel-agents")
        features = _features(bandit_features, embedding_model)
        _refuse_unsupported(strategy, latency_bias_scale)
        location = _state_location(bandit_state, redis_url, router_state_key)
        options = BanditOptions(
            alpha=bandit_alpha, ridge=bandit_ridge, state=location,
            length_threshold=bandit_length_threshold, quality_weight=bandit_quality_weight,
            speed_weight=bandit_speed_weight, cost_weight=bandit_cost_weight,
            fallback_penalty=bandit_fallback_penalty, min_preview_tokens=min_preview_tokens,
            adaptive_min_scale=adaptive_min_scale, adaptive_max_scale=adaptive_max_scale,
            speculative_min_query_length=speculative_min_query_length,
            top_k=_preview_width(top_k, speculative_top_k),
            preview_timeout_s=preview_timeout_s or None, full_timeout_s=full_timeout_s or None,
            total_timeout_s=total_timeout_s or None, max_total_tokens=max_total_tokens or None,
            max_cost_usd=max_total_cost_usd or None, features=features, dim=embedding_dim,
            # "baseline" keeps the given order and previews every arm: the router only learns.
            policy="baseline" if strategy == "baseline" else "bandit",
            race_only_when_unsure=strategy == "bandit",
            cache_ttl_s=preview_cache_ttl or 600.0, state_key=router_state_key,
        )  # fmt: skip
        providers = load_scripts(script) if script is not None else {}
        plan = _plan(agent_models, judge_model, options, _prices(model_prices), providers)
        race = bandit_race_from_plan(plan)
    except UserError as exc:
        raise usage_error(exc) from None
    except StateStoreError as exc:  # the state cannot be opened: say so, no traceback
        typer.echo(f"Error: {redact(str(exc))}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    try:
        result, stopped = run_interruptible(lambda token: _race(race, text, token))
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C before the handler is in place, too
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except UserError as exc:
        raise usage_error(exc) from None
    except PhiError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    if as_json:
        typer.echo(json.dumps(bandit_payload(result), indent=2))
    else:
        typer.echo(result.text)
        typer.echo(
            f"[{result.status}] winner={result.winner} cost=${result.cost_usd:.4f}", err=True
        )
    if stopped:
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.status != "ok":
        raise typer.Exit(EXIT_FAILED)


async def _race(race: BanditRace, text: str, token: CancelToken) -> BanditRaceResult:
    await race.load()
    try:
        return await race.run(text, cancel=token)
    finally:
        await flush_router_updates(race)


def _features(name: str, embedding_model: str | None) -> Literal["hashed", "embedding"]:
    key = name.strip().lower()
    if key == "length":
        warn(
            "--bandit-features length uses phi-core's hashed features, which include the seed's "
            "length features (characters / threshold, words) plus word n-grams and intent signals."
        )
        key = "hashed"
    if key not in ("hashed", "embedding"):
        raise UserError(
            f"--bandit-features {name!r} is not a feature set; use hashed (or the seed's "
            "`length`, which maps to it) or embedding."
        )
    if embedding_model is not None:
        if key != "embedding":
            warn(
                f"--embedding-model {embedding_model!r} (EMBEDDING_MODEL) has no effect without "
                "--bandit-features embedding; ignored."
            )
        elif embedding_model.strip().lower() not in MINILM:
            raise UserError(
                f"--embedding-model {embedding_model!r} is not available: phi-core embeds queries "
                "locally with all-MiniLM-L6-v2 (pip install 'phi-core[embed]', no network). Drop "
                "the flag (and EMBEDDING_MODEL) or pass all-MiniLM-L6-v2."
            )
    return "embedding" if key == "embedding" else "hashed"


def _refuse_unsupported(strategy: str, latency_bias: float | None) -> None:
    if strategy not in ("bandit", "baseline"):
        raise UserError(f"--strategy {strategy!r} is not a strategy; use bandit or baseline.")
    if latency_bias:
        raise UserError(
            f"--latency-bias-scale {latency_bias:g} (LATENCY_BIAS_SCALE) is not supported: "
            "phi-core does not bias the ranking by P95 latency, it puts latency into the reward. "
            "Use --bandit-speed-weight to weigh speed, and drop the flag (0 is accepted)."
        )


def _preview_width(top_k: int | None, speculative_top_k: int | None) -> int | None:
    """The seed's speculative top-k is how many full answers race at once for a long query; here
    that is the number of previewed arms, so it sets ``--top-k`` (and must agree with it)."""
    if speculative_top_k is None or top_k == speculative_top_k:
        return top_k
    if top_k is not None:
        raise UserError(
            f"--speculative-top-k {speculative_top_k} and --top-k {top_k} disagree: a long "
            "query's full answers race between the previewed arms; give one of the two."
        )
    return speculative_top_k


def _plan(
    agent_models: str,
    judge_model: str | None,
    options: BanditOptions,
    prices: dict[str, float],
    providers: Mapping[str, Provider],
) -> RacePlan:
    names = split_branch_list(agent_models)
    if not names:
        raise UserError(
            "--agent-models is empty; give comma-separated models, e.g. "
            "--agent-models gpt-4o,gpt-4o-mini (or provider:model names)."
        )
    branches = flag_branches(names)
    judge = flag_branch(judge_model) if judge_model else None
    plan = plan_race(
        models=branches, judge=judge, strategy="bandit", bandit=options, providers=providers
    )
    if prices:
        plan.configs = [
            _priced(config, branch, name, prices)
            for config, branch, name in zip(plan.configs, branches, names, strict=True)
        ]
        if plan.judge is not None and plan.judge_config is not None and judge_model:
            plan.judge_config = _priced(plan.judge_config, plan.judge, judge_model, prices)
    return plan


def _prices(raw: str | None) -> dict[str, float]:
    if raw is None or not raw.strip():
        return {}
    try:
        data = json.loads(raw)
        prices = {str(k): float(v) for k, v in data.items()}
    except (ValueError, TypeError, AttributeError):
        raise UserError(
            f"MODEL_PRICE_USD_PER_TOKEN_JSON must be a JSON object of dollars per token, e.g. "
            f'{{"gpt-4o": 0.00001}}; got {raw!r}.'
        ) from None
    if any(v < 0 for v in prices.values()):
        raise UserError(f"MODEL_PRICE_USD_PER_TOKEN_JSON has a negative price: {raw!r}.")
    return prices


def _priced(config: Any, branch: BranchSpec, written: str, prices: dict[str, float]) -> Any:
    bare = written.split("@", 1)[0].strip()
    per_token = prices.get(bare, prices.get(branch.model))
    if per_token is None:
        return config
    per_million = per_token * 1_000_000
    pricing = Pricing(
        input=per_million, output=per_million, cache_read=per_million, cache_write=per_million
    )
    return dataclasses.replace(config, model=resolve_model(branch.model, pricing=pricing))


def _state_location(state: str | None, redis_url: str | None, key: str | None) -> str | None:
    """Where the router state (with its preview cache and latency history) lives: the state the
    seed's flags name, else ``REDIS_URL``, else the default."""
    if state is None and redis_url is not None:  # a Redis URL option: never a file path
        try:
            check_redis_url(redis_url)
        except UserError as exc:
            raise UserError(f"--redis-url (or REDIS_URL): {exc}") from None
    location = state or redis_url
    if location is not None and not is_redis(location):
        os.makedirs(os.path.dirname(os.path.abspath(location)), exist_ok=True)
    warn_key_without_redis(key, location)
    return location


def main() -> None:
    """Console entry point ``parallel-agents`` (reads ``./.env`` first, as the seed did)."""
    from dotenv import find_dotenv, load_dotenv

    load_dotenv(find_dotenv(usecwd=True), override=False)
    guard_process_streams()
    try:
        parallel_agents_app(prog_name="parallel-agents", args=sys.argv[1:])
    except SystemExit:
        if output_closed():
            raise SystemExit(EXIT_PIPE) from None
        raise
