"""``phi route show|reset|export`` and the seed-compatible ``parallel-agents`` command.

``app`` is the ``route`` sub-app (mounted by the main CLI). ``parallel_agents_app`` is a one-command
app accepting the seed's ``parallel-agents`` flags; :func:`parallel_agents_main` is its console
entry point. Both use :mod:`phi_core.race.entry`, so flags map to the library one to one.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import PhiError, UserError
from ..race.entry import BanditOptions, route_state_summary, run_bandit_race
from ..routing.state import state_location
from ..routing.stores import RouterStateStore, open_state_store

__all__ = ["app", "parallel_agents_app", "parallel_agents_main"]

StateOpt = Annotated[
    str | None,
    typer.Option(
        "--state",
        envvar="PHI_ROUTER_STATE",
        help="Router state: a .sqlite/.db file, a JSON file, or redis://host:port/db "
        "(default: router_state.sqlite in $PHI_HOME, ~/.phi).",
    ),
]

app = typer.Typer(
    name="route",
    help="Inspect, reset or export the learned router state.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _open(state: str | None) -> RouterStateStore:
    state = state_location(state)
    if not state.startswith(("redis://", "rediss://", "unix://")) and not Path(state).exists():
        raise typer.BadParameter(
            f"No router state at {state!r}; race with --strategy bandit first, or pass --state.",
            param_hint="--state",
        )
    return open_state_store(state)


@app.command("show")
def show(
    state: StateOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show each arm's observation count and mean reward, per feature namespace."""
    summary = route_state_summary(_open(state))
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    if not summary:
        typer.echo(f"{state_location(state)}: no router statistics yet.")
        return
    for namespace, arms in summary.items():
        typer.echo(f"{namespace}")
        for arm, info in arms.items():
            mean = "-" if info["mean_reward"] is None else f"{info['mean_reward']:.3f}"
            typer.echo(f"  {arm:40s} n={info['n']:<8g} mean reward={mean}")


@app.command("reset")
def reset(
    state: StateOpt = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="Only this feature namespace.")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Forget the learned statistics (all namespaces, or one)."""
    store = _open(state)
    state = state_location(state)
    what = f"namespace {namespace!r}" if namespace else "every namespace"
    if not yes and not typer.confirm(f"Reset {what} in {state}?"):
        raise typer.Exit(1)
    store.reset(namespace)
    typer.echo(f"Reset {what} in {state}.")


@app.command("export")
def export(
    state: StateOpt = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Export the full sufficient statistics (A, b, counts) as JSON."""
    store = _open(state)
    data: dict[str, Any] = {"version": 1, "namespaces": {}}
    for namespace in store.namespaces():
        data["namespaces"][namespace] = {
            arm: stats.to_json() for arm, stats in sorted(store.load(namespace).items())
        }
    text = json.dumps(data)
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n", encoding="utf-8")
        typer.echo(f"Wrote {output}.")


# ---------------------------------------------------------------------------- parallel-agents

parallel_agents_app = typer.Typer(
    name="parallel-agents",
    help="Race agent models with a learned router (seed-compatible flags).",
    add_completion=False,
    rich_markup_mode=None,
)


@parallel_agents_app.command()
def parallel_agents(
    query: Annotated[str, typer.Argument(help="The question to answer.")],
    agent_models: Annotated[
        str, typer.Option("--agent-models", help="Comma-separated provider:model names.")
    ],
    judge_model: Annotated[
        str | None, typer.Option("--judge-model", help="Model that scores the previews.")
    ] = None,
    min_preview_tokens: Annotated[int, typer.Option("--min-preview-tokens")] = 120,
    strategy: Annotated[str, typer.Option("--strategy", help="bandit or baseline.")] = "bandit",
    bandit_alpha: Annotated[float, typer.Option("--bandit-alpha")] = 1.0,
    bandit_ridge: Annotated[float, typer.Option("--bandit-ridge")] = 1.0,
    bandit_state: Annotated[
        str | None, typer.Option("--bandit-state", envvar="PHI_ROUTER_STATE")
    ] = None,
    bandit_length_threshold: Annotated[int, typer.Option("--bandit-length-threshold")] = 2000,
    bandit_quality_weight: Annotated[float, typer.Option("--bandit-quality-weight")] = 0.8,
    bandit_speed_weight: Annotated[float, typer.Option("--bandit-speed-weight")] = 0.2,
    bandit_cost_weight: Annotated[float, typer.Option("--bandit-cost-weight")] = 0.0,
    bandit_fallback_penalty: Annotated[float, typer.Option("--bandit-fallback-penalty")] = 0.05,
    adaptive_min_scale: Annotated[float, typer.Option("--adaptive-min-scale")] = 0.75,
    adaptive_max_scale: Annotated[float, typer.Option("--adaptive-max-scale")] = 1.5,
    speculative_min_query_length: Annotated[
        int, typer.Option("--speculative-min-query-length")
    ] = 2000,
    speculative_top_k: Annotated[
        int, typer.Option("--speculative-top-k", help="Only 2 is supported.")
    ] = 2,
    preview_timeout_s: Annotated[float, typer.Option("--preview-timeout-s", help="0 = off")] = 0,
    full_timeout_s: Annotated[float, typer.Option("--full-timeout-s", help="0 = off")] = 0,
    total_timeout_s: Annotated[float, typer.Option("--total-timeout-s", help="0 = off")] = 0,
    max_total_tokens: Annotated[int, typer.Option("--max-total-tokens", help="0 = off")] = 0,
    max_total_cost_usd: Annotated[float, typer.Option("--max-total-cost-usd", help="0 = off")] = 0,
    bandit_features: Annotated[
        str, typer.Option("--bandit-features", help="hashed (default) or embedding.")
    ] = "hashed",
    embedding_dim: Annotated[int, typer.Option("--embedding-dim")] = 64,
    top_k: Annotated[int, typer.Option("--top-k", help="Arms to preview.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Race the agent models on QUERY and learn which one to trust."""
    if strategy not in ("bandit", "baseline"):
        raise typer.BadParameter(
            f"{strategy!r} is not a strategy; use bandit or baseline.", param_hint="--strategy"
        )
    if speculative_top_k != 2:
        raise typer.BadParameter(
            f"only speculative top-2 is implemented, got {speculative_top_k}.",
            param_hint="--speculative-top-k",
        )
    if bandit_features not in ("hashed", "embedding"):
        raise typer.BadParameter(
            f"{bandit_features!r}: use hashed or embedding.", param_hint="--bandit-features"
        )
    options = BanditOptions(
        judge_model=judge_model,
        alpha=bandit_alpha,
        ridge=bandit_ridge,
        state=bandit_state,
        length_threshold=bandit_length_threshold,
        quality_weight=bandit_quality_weight,
        speed_weight=bandit_speed_weight,
        cost_weight=bandit_cost_weight,
        fallback_penalty=bandit_fallback_penalty,
        min_preview_tokens=min_preview_tokens,
        adaptive_min_scale=adaptive_min_scale,
        adaptive_max_scale=adaptive_max_scale,
        speculative_min_query_length=speculative_min_query_length,
        top_k=top_k,
        preview_timeout_s=preview_timeout_s or None,
        full_timeout_s=full_timeout_s or None,
        total_timeout_s=total_timeout_s or None,
        max_total_tokens=max_total_tokens or None,
        max_cost_usd=max_total_cost_usd or None,
        features="embedding" if bandit_features == "embedding" else "hashed",
        dim=embedding_dim,
        # "baseline" keeps the given order and never skips previews: the router only learns.
        race_only_when_unsure=strategy == "bandit",
    )
    try:
        result = asyncio.run(run_bandit_race(query, agent_models.split(","), options))
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except PhiError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    if as_json:
        typer.echo(json.dumps(result_payload(result), indent=2))
    else:
        typer.echo(result.text)
        note = f"[{result.status}] winner={result.winner} cost=${result.cost_usd:.4f}"
        typer.echo(note, err=True)
    if result.status != "ok":
        raise typer.Exit(1)


def result_payload(result: Any) -> dict[str, Any]:
    """A JSON-ready view of a :class:`~phi_core.race.BanditRaceResult`."""
    return {
        "status": result.status,
        "winner": result.winner,
        "text": result.text,
        "error": result.error,
        "order": result.order,
        "previews_skipped": result.previews_skipped,
        "ranking": result.ranking.explain() if result.ranking is not None else [],
        "scores": result.scores,
        "attempts": [list(a) for a in result.attempts],
        "verified": result.verified,
        "rewards": {k: v.reward for k, v in result.rewards.items()},
        "usage": result.usage.model_dump(),
        "cost_usd": result.cost_usd,
    }


def parallel_agents_main() -> None:
    """Console entry point ``parallel-agents``."""
    parallel_agents_app(prog_name="parallel-agents", args=sys.argv[1:])
