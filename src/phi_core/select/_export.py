"""What a selection result turns into: a text summary, a LiteLLM config, a ``phi race`` config."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import UserError
from ..providers.catalog import VENDORS
from ..providers.registry import qualify_model_name, split_model_settings

if TYPE_CHECKING:
    from ._results import CombinationResult, SelectionResult

__all__ = ["litellm_config", "qualified_model", "race_config", "summary_text", "totals_text"]

# phi-core provider -> LiteLLM's provider prefix, where they differ.
_LITELLM = {"google": "gemini", "vertex": "vertex_ai", "llamacpp": "openai", "vllm": "hosted_vllm"}
_KEYS = {v.name: v.key_env for v in VENDORS if v.key_env}
_SETTINGS = ("temperature", "top_p", "seed", "max_tokens")


def qualified_model(label: str) -> tuple[str, dict[str, str]]:
    """``(provider:model, settings)`` of a candidate label; a bare model name is looked up in the
    catalog (``gpt-4o-mini`` -> ``openai:gpt-4o-mini``), an OpenRouter-style ``vendor/model``
    goes to OpenRouter.

    Raises:
        UserError: a bare name no provider (or several) offers, naming the fix.
    """
    model, settings = split_model_settings(label)
    try:
        return qualify_model_name(model), settings
    except UserError:
        if "/" in model and ":" not in model:
            return f"openrouter:{model}", settings
        raise


def litellm_config(result: SelectionResult, api_key_env_vars: dict[str, str] | None = None) -> str:
    """A LiteLLM proxy ``model_list`` with the winner's model for each step, named after it."""
    entries: list[dict[str, Any]] = []
    for step, label in result.best.models.items():
        spec, settings = qualified_model(label)
        provider, _, model = spec.partition(":")
        params: dict[str, Any] = {"model": f"{_LITELLM.get(provider, provider)}/{model}"}
        env = (api_key_env_vars or {}).get(provider) or _KEYS.get(provider)
        if env:
            params["api_key"] = f"os.environ/{env}"
        for key in _SETTINGS:
            if key in settings:
                params[key] = _number(settings[key])
        entries.append({"model_name": step, "litellm_params": params})
    header = (
        f"# Selected by phi-core ({result.algorithm}, seed {result.seed}): {result.best.name}\n"
        f"# accuracy {_pct(result.best.accuracy)} on {result.best.evaluations} datapoints\n"
    )
    return header + yaml.safe_dump({"model_list": entries}, sort_keys=False)


def race_config(result: SelectionResult, step: str | None = None) -> str:
    """A ``phi race --config`` file racing the models ``step`` uses on the Pareto front (the
    winner's first): the configurations worth racing live, once each."""
    steps = list(result.best.models)
    if step is None:
        if len(steps) != 1:
            raise UserError(
                f"This agent has several steps {steps!r}; say which one to race: "
                "export_config(path, 'phi-race', step='...')."
            )
        step = steps[0]
    if step not in result.best.models:
        raise UserError(f"No step {step!r} in this selection; steps: {steps!r}.")
    lines = [
        f"# phi race --config <this file>: the Pareto front of step {step!r}, selected by",
        f"# phi-core ({result.algorithm}, seed {result.seed}); winner: {result.best.name}",
        "",
    ]
    seen: set[str] = set()
    for combination in result.pareto_front():
        label = combination.models[step]
        if label in seen:
            continue
        seen.add(label)
        spec, settings = qualified_model(label)
        lines += ["[[branches]]", f"name = {json.dumps(label)}", f"model = {json.dumps(spec)}"]
        lines += [f"{k} = {_number(settings[k])}" for k in _SETTINGS if k in settings]
        lines.append("")
    return "\n".join(lines)


def _number(value: str) -> int | float:
    try:
        return int(value)
    except ValueError:
        return float(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.5f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def totals_text(result: SelectionResult) -> str:
    """One line: the algorithm, evaluations of the grid, dollars (the scorer's share), time."""
    return (
        f"{result.algorithm}: {result.evaluations}/{result.grid_evaluations} evaluations, "
        f"${result.cost_usd:.4f} spent"
        + (f" (${result.scoring_cost_usd:.4f} of it scoring)" if result.scoring_cost_usd else "")
        + f", {result.wall_time_s:.1f}s"
        + (f", {result.resumed} resumed" if result.resumed else "")
    )


def summary_text(result: SelectionResult, limit: int | None = 20) -> str:
    """The ranking as plain text: best first, the Pareto front marked, then totals and warnings."""
    shown: list[CombinationResult] = result.evaluated()[:limit] if limit else result.evaluated()
    failed = any(c.failures for c in shown)  # the column only when something failed
    rows = [["#", "combination", "accuracy", "n", *(["failed"] if failed else []), "$/item"]]
    rows[0] += ["latency", ""]
    for rank, c in enumerate(shown, 1):
        marks = " ".join(
            m
            for m, on in (("best", c.is_best), ("pareto", c.pareto), ("out", not c.in_contention))
            if on
        )
        rows.append(
            [
                str(rank),
                c.name,
                _pct(c.accuracy),
                str(c.evaluations),
                *([str(c.failures)] if failed else []),
                _money(c.cost_per_datapoint),
                _secs(c.latency_mean),
                marks,
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 1 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    hidden = len(result.evaluated()) - len(shown)
    if hidden > 0:
        lines.append(f"... and {hidden} more")
    lines.append(totals_text(result))
    lines.append(f"best: {result.best.name}")
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)
