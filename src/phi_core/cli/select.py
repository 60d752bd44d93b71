"""``phi select SPEC.toml``: find the best model per step of an agent on a JSONL dataset.

A spec names the steps and their candidate models, the dataset, the scorer, the agent and the
algorithm::

    dataset = "questions.jsonl"            # one {"input": ..., "expected": ...} per line
    scorer = "contains"                    # "exact", "contains", or "module:function" / "file.py:function"
    agent = "my_agent.py:PlannerSolver"    # optional: class(models) with run(input), or function(models, input)
    algorithm = "auto"                     # auto (= regret_race), paired_race, arm_elimination, ...
    max_concurrent = 20
    seed = 0
    cache = true                           # or a path to the SQLite cache file

    [steps]
    planner = ["openai:gpt-4o-mini", "local:smollm2"]
    solver = ["openai:gpt-4o", "openai:gpt-4o-mini"]

    [prompts]                              # used when there is no `agent`: steps run in order
    planner = "Write a short plan to answer: {input}"
    solver = "Question: {input}\\nPlan: {planner}\\nAnswer in a few words."

    [budget]                               # optional
    max_evaluations = 400
    max_cost = 2.0

    [algorithm_params]                     # optional, e.g. delta = 0.1
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import ConfigError, PhiError
from ..select import Arena, Budget, MeteredModel, ModelSelector, SelectionResult

__all__ = ["command", "load_spec", "result_table"]

_KNOWN_KEYS = {
    "dataset",
    "scorer",
    "agent",
    "algorithm",
    "max_concurrent",
    "seed",
    "cache",
    "steps",
    "prompts",
    "budget",
    "algorithm_params",
}


def _exact(expected: Any, actual: Any) -> float:
    return float(str(actual).strip().lower() == str(expected).strip().lower())


def _contains(expected: Any, actual: Any) -> float:
    return float(str(expected).strip().lower() in str(actual).lower())


BUILTIN_SCORERS: dict[str, Callable[[Any, Any], float]] = {"exact": _exact, "contains": _contains}


def _import(ref: str, base: Path, what: str, file: str) -> Any:
    module_name, sep, attr = ref.rpartition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"{what} must be `module:name` or `file.py:name`, got {ref!r}.", file=file, key=what
        )
    try:
        if module_name.endswith(".py"):
            path = (base / module_name).resolve()
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None or not path.exists():
                raise ConfigError(f"No Python file at {str(path)!r}.", file=file, key=what)
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, module)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(
            f"Cannot import {module_name!r}: {error}.", file=file, key=what
        ) from error
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(
            f"{module_name!r} has no attribute {attr!r}.", file=file, key=what
        ) from None


def _prompt_chain(prompts: Mapping[str, str]) -> Callable[..., Any]:
    """An agent that runs the steps in order, each prompt formatted with the input and earlier replies."""

    async def chain(models: Mapping[str, MeteredModel], inputs: Any) -> str:
        values: dict[str, Any] = {"input": inputs}
        reply = ""
        for step, template in prompts.items():
            reply = await models[step].complete(template.format(**values))
            values[step] = reply
        return reply

    return chain


def _read_dataset(path: Path, file: str) -> list[tuple[Any, Any]]:
    if not path.exists():
        raise ConfigError(f"No dataset file at {str(path)!r}.", file=file, key="dataset")
    items: list[tuple[Any, Any]] = []
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            items.append((row["input"], row["expected"]))
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ConfigError(
                f'each line must be a JSON object with "input" and "expected" ({error})',
                file=str(path),
                line=line_no,
            ) from error
    if not items:
        raise ConfigError("The dataset has no items.", file=str(path), key="dataset")
    return items


def load_spec(path: Path, **overrides: Any) -> ModelSelector:
    """Build a :class:`ModelSelector` from a TOML spec (``overrides`` replace top-level keys)."""
    file = str(path)
    try:
        spec = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"No spec file at {file!r}.", file=file) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"Not valid TOML: {error}.", file=file) from error
    spec.update({k: v for k, v in overrides.items() if v is not None})
    unknown = set(spec) - _KNOWN_KEYS
    if unknown:
        raise ConfigError(
            f"Unknown keys {sorted(unknown)!r}; known: {sorted(_KNOWN_KEYS)!r}.", file=file
        )
    base = path.parent
    steps = spec.get("steps")
    if (
        not isinstance(steps, dict)
        or not steps
        or not all(isinstance(v, list) and v for v in steps.values())
    ):
        raise ConfigError(
            'Give [steps] with a list of candidate models per step, e.g. solver = ["openai:gpt-4o-mini"].',
            file=file,
            key="steps",
        )
    if "dataset" not in spec:
        raise ConfigError(
            "Missing `dataset` (a JSONL file of {input, expected}).", file=file, key="dataset"
        )
    dataset = _read_dataset(base / str(spec["dataset"]), file)
    scorer_ref = str(spec.get("scorer", "exact"))
    scorer = BUILTIN_SCORERS.get(scorer_ref) or _import(scorer_ref, base, "scorer", file)
    if "agent" in spec:
        agent = _import(str(spec["agent"]), base, "agent", file)
    else:
        prompts = spec.get("prompts")
        if not isinstance(prompts, dict) or set(prompts) != set(steps):
            raise ConfigError(
                "Without `agent`, give [prompts] with one template per step (same names as [steps]).",
                file=file,
                key="prompts",
            )
        agent = _prompt_chain({s: str(prompts[s]) for s in steps})
    budget_spec = spec.get("budget")
    budget = None
    max_evaluations = None
    if budget_spec is not None:
        if not isinstance(budget_spec, dict):
            raise ConfigError(
                "[budget] must be a table with max_evaluations and/or max_cost.",
                file=file,
                key="budget",
            )
        max_cost = budget_spec.get("max_cost")
        budget = Budget(max_cost_usd=max_cost) if max_cost is not None else None
        max_evaluations = budget_spec.get("max_evaluations")
    cache = spec.get("cache", True)
    if isinstance(cache, str):
        cache = str(base / cache)
    try:
        return ModelSelector(
            agent,
            steps,
            dataset,
            scorer,
            algorithm=str(spec.get("algorithm", "auto")),
            max_concurrent=int(spec.get("max_concurrent", 20)),
            seed=spec.get("seed"),
            budget=budget,
            max_evaluations=max_evaluations,
            cache=cache,
            algorithm_params=spec.get("algorithm_params"),
        )
    except ConfigError:
        raise
    except PhiError as error:
        raise ConfigError(str(error), file=file) from error


def result_table(result: SelectionResult, limit: int | None = 20) -> Table:
    """The ranked combinations as a rich table (best first; Pareto-optimal ones marked)."""
    pareto = {c.name for c in result.pareto_front()}
    table = Table(
        title=(
            f"{result.algorithm}: {result.evaluations}/{result.grid_evaluations} evaluations, "
            f"${result.cost_usd:.4f} spent, {result.wall_time_s:.1f}s"
        )
    )
    for column in (
        "#",
        "combination",
        "accuracy",
        "95% CI",
        "$/item",
        "p50 s",
        "p95 s",
        "tokens",
        "evals",
        "fails",
        "",
    ):
        table.add_column(column, justify="right" if column not in ("combination", "") else "left")
    rows = result.combinations if limit is None else result.combinations[:limit]
    for rank, c in enumerate(rows, 1):
        if c.accuracy is None:
            table.add_row(str(rank), c.name, "—", "", "", "", "", "", "0", "", "not evaluated")
            continue
        marks = [
            m
            for m, on in (
                ("best", c.is_best),
                ("pareto", c.name in pareto),
                ("eliminated", not c.in_contention),
            )
            if on
        ]
        table.add_row(
            str(rank),
            c.name,
            f"{100 * c.accuracy:.1f}%",
            f"{100 * (c.ci_low or 0):.0f}–{100 * (c.ci_high or 0):.0f}",
            f"{c.cost_per_datapoint or 0:.5f}",
            f"{c.latency_p50 or 0:.2f}",
            f"{c.latency_p95 or 0:.2f}",
            str(c.input_tokens + c.output_tokens),
            str(c.evaluations),
            str(c.failures),
            " ".join(marks),
        )
    return table


def command(
    spec: Annotated[Path, typer.Argument(help="Selection spec (TOML).", show_default=False)],
    algorithm: Annotated[
        str | None, typer.Option("--algorithm", "-a", help="Override the spec's algorithm.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Shuffle/algorithm seed (reproducible runs).")
    ] = None,
    max_concurrent: Annotated[
        int | None, typer.Option("--max-concurrent", help="Agent runs in flight.")
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the response cache.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the full result as JSON.")] = False,
    csv_path: Annotated[
        Path | None, typer.Option("--csv", help="Write per-combination results as CSV.")
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--out-json", help="Write the full result as JSON.")
    ] = None,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", help="Write the Pareto plot (PNG).")
    ] = None,
) -> None:
    """Find the best model per agent step on a dataset, with a fraction of a grid search."""
    console = Console(stderr=True)
    try:
        selector = load_spec(
            spec,
            algorithm=algorithm,
            seed=seed,
            max_concurrent=max_concurrent,
            cache=False if no_cache else None,
        )
    except PhiError as error:
        console.print(f"[red]error:[/red] {error}", highlight=False)
        raise typer.Exit(2) from None
    grid = len(selector.space) * len(selector.dataset)
    try:
        with Progress(
            TextColumn("[bold]selecting"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("evaluations (grid {task.total})"),
            TextColumn("${task.fields[cost]:.4f}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=as_json,
        ) as progress:
            task = progress.add_task("select", total=grid, cost=0.0)

            def on_batch(arena: Arena) -> None:
                progress.update(task, completed=arena.evaluations, cost=arena.cost_spent)

            result = asyncio.run(selector.select_best(on_progress=on_batch))
    except PhiError as error:
        console.print(f"[red]error:[/red] {error}", highlight=False)
        raise typer.Exit(1) from None
    if csv_path is not None:
        result.to_csv(csv_path)
    if json_path is not None:
        result.to_json(json_path)
    if plot_path is not None:
        result.plot_pareto(plot_path)
    if as_json:
        typer.echo(result.to_json())
        return
    out = Console()
    out.print(result_table(result))
    out.print(f"best: [bold]{result.best.name}[/bold]", highlight=False)
    if result.failures:
        out.print(
            f"[yellow]{len(result.failures)} failed evaluations (scored 0), e.g. "
            f"{result.failures[0].combination} on item {result.failures[0].datapoint}: {result.failures[0].error}"
        )
