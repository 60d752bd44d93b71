"""``phi select SPEC``: find the best model per step of an agent on a JSONL dataset.

The spec (TOML, YAML or JSON) is read and checked by :func:`phi_core.config.load_select_spec`
before any model is called; see :mod:`phi_core.config._select` for its keys. Ctrl-C stops the run
and prints what was evaluated so far and where it was saved: ``--resume`` continues the run where
it stopped (every finished evaluation is taken from the run journal, not run again), and any
re-run answers the calls already made from the response cache (free and instant).

``--json`` prints the result as one line of JSON on stdout, as ``phi race --json`` prints its
result: ``{"type": "selection_result", "session_id": ..., "status": ..., "usage": {...}, ...,
"run_id": ..., "conversation_id": ...}`` (``--out-json FILE`` writes it indented, for people).
The budget options (``--max-cost``, ``--max-total-tokens``, ``--max-calls``, ``--deadline``,
``--max-evaluations``) replace the spec's ``[budget]`` keys of the same names.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .._files import check_export_target
from .._logging import get_logger
from ..config import SelectSpec, load_select_spec
from ..config._select import check_budget_limit
from ..errors import PhiError, UserError, redact
from ..runlog import RunRecord
from ..select import Evaluation, ModelSelector, SelectionResult
from ._common import EXIT_FAILED, EXIT_INTERRUPTED, usage_error, warn
from ._conversation import open_session
from ._options import finite_at_least
from ._output import print_table

__all__ = ["command", "result_table"]


def result_table(result: SelectionResult, limit: int | None = 20) -> Table:
    """The ranked combinations as a rich table (best first; Pareto-optimal ones marked)."""
    pareto = {c.name for c in result.pareto_front()}
    table = Table(title=result.totals())
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
            f"{c.cost_per_datapoint or 0:.5f}" if c.cost_known else "n/a",
            f"{c.latency_p50 or 0:.2f}",
            f"{c.latency_p95 or 0:.2f}",
            str(c.input_tokens + c.output_tokens),
            str(c.evaluations),
            str(c.failures),
            " ".join(marks),
        )
    return table


def command(
    spec: Annotated[
        Path, typer.Argument(help="Selection spec (TOML, YAML or JSON).", show_default=False)
    ],
    algorithm: Annotated[
        str | None, typer.Option("--algorithm", "-a", help="Override the spec's algorithm.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Shuffle/algorithm seed (reproducible runs).")
    ] = None,
    max_concurrent: Annotated[
        int | None, typer.Option("--max-concurrent", min=1, help="Agent runs in flight.")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.001,
            help="Seconds one agent run may take (then it stops and scores 0); overrides the spec.",
        ),
    ] = None,
    cost_weight: Annotated[
        float | None,
        typer.Option(
            "--cost-weight",
            min=0.0,
            help="Rank by score minus this times the normalised cost, during the search.",
        ),
    ] = None,
    latency_weight: Annotated[
        float | None,
        typer.Option(
            "--latency-weight",
            min=0.0,
            help="Rank by score minus this times the normalised latency, during the search.",
        ),
    ] = None,
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            callback=finite_at_least(0.000001, "dollars"),
            help="Dollar budget of the whole run: a call that may not fit is refused unsent "
            "(overrides the spec's [budget] max_cost).",
        ),
    ] = None,
    max_total_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-total-tokens",
            min=1,
            help="Token budget of the whole run, every call's input and output (overrides "
            "[budget] max_total_tokens).",
        ),
    ] = None,
    max_calls: Annotated[
        int | None,
        typer.Option(
            "--max-calls",
            min=1,
            help="Model calls the whole run may send; cache hits are free (overrides "
            "[budget] max_calls).",
        ),
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option(
            "--deadline",
            callback=finite_at_least(0.001, "seconds"),
            help="Seconds the whole run may take; no call runs past it, and the best so far is "
            "reported (overrides [budget] deadline).",
        ),
    ] = None,
    max_evaluations: Annotated[
        int | None,
        typer.Option(
            "--max-evaluations",
            min=1,
            help="(combination, datapoint) evaluations the run may make (overrides [budget] "
            "max_evaluations).",
        ),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the response cache.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the full result as one line of JSON (type selection_result), as "
            "`phi race --json` prints its result; --out-json writes it indented.",
        ),
    ] = False,
    csv_path: Annotated[
        Path | None, typer.Option("--csv", help="Write per-combination results as CSV.")
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--out-json", help="Write the full result as JSON.")
    ] = None,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", help="Write the Pareto plot (PNG).")
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue an interrupted run of the same spec: finished evaluations are not run again.",
        ),
    ] = False,
    no_log: Annotated[
        bool, typer.Option("-n", "--no-log", help="Do not record this selection in `phi logs`.")
    ] = False,
) -> None:
    """Find the best model per agent step on a dataset, with a fraction of a grid search."""
    console = Console(stderr=True, highlight=False)
    # the run's warnings are printed below from the result, once: not by Python's last-resort
    # log handler as well
    quiet = get_logger("phi_core.select")
    if not any(isinstance(h, logging.NullHandler) for h in quiet.handlers):
        quiet.addHandler(logging.NullHandler())
    limits = {
        "max_cost": max_cost,
        "max_total_tokens": max_total_tokens,
        "max_calls": max_calls,
        "deadline": deadline,
        "max_evaluations": max_evaluations,
    }
    try:
        for key, value in limits.items():  # as Budget checks them, named as they were given
            check_budget_limit(key, value, "--" + key.replace("_", "-"))
        loaded = load_select_spec(
            spec,
            algorithm=algorithm,
            seed=seed,
            max_concurrent=max_concurrent,
            timeout=timeout,
            cost_weight=cost_weight,
            latency_weight=latency_weight,
            cache=False if no_cache else None,
            budget=limits,
        )
        selector = loaded.selector()
        for path in (csv_path, json_path, plot_path):  # before any evaluation is paid for
            if path is not None:
                check_export_target(path)
        _distinct_exports({"--csv": csv_path, "--out-json": json_path, "--plot": plot_path})
    except UserError as error:
        raise usage_error(error) from None
    grid = len(selector.space) * len(selector.dataset)
    most = min(grid, selector.max_evaluations or grid)
    started = time.perf_counter()
    try:
        with Progress(
            TextColumn("[bold]selecting"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("evaluations (at most {task.total}, grid " + str(grid) + ")"),
            TextColumn("${task.fields[cost]:.4f}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=console,
            transient=True,
            disable=as_json,
        ) as progress:
            task = progress.add_task("select", total=most, cost=0.0, eta="")
            tally = _Tally(most)

            def on_evaluation(k: int, i: int, evaluation: Evaluation) -> None:
                tally.add(evaluation, time.perf_counter() - started)
                progress.update(task, completed=tally.done, cost=tally.spent, eta=tally.eta())

            result = asyncio.run(selector.select_best(on_evaluation=on_evaluation, resume=resume))
    except KeyboardInterrupt:
        _interrupted(console, loaded, selector, time.perf_counter() - started, spec, no_log)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except UserError as error:
        raise usage_error(error) from None
    except PhiError as error:
        _error(console, str(error))
        raise typer.Exit(EXIT_FAILED) from None
    ids = _log(spec, loaded, result, no_log)
    failed = _export(result, csv_path, json_path, plot_path)
    if result.resumed:
        console.print(
            f"{result.resumed} evaluations were resumed from the run journal (not run again).",
            soft_wrap=True,
        )
    for warning in result.warnings:
        console.print(Text("Warning: ", style="yellow") + Text(warning), soft_wrap=True)
    if selector.cache is not None and selector.cache.hits:
        console.print(
            f"{selector.cache.hits} model calls were answered from the cache at "
            f"{loaded.cache_path} (resumed or repeated; they cost nothing).",
            highlight=False,
            soft_wrap=True,
        )
    # nothing measured: the "best" would be a name tie-break among zeros
    nothing = bool(result.evaluations) and len(result.failures) >= result.evaluations
    if as_json:
        typer.echo(_json_line(result, **ids))
    else:
        out = Console()
        print_table(out, result_table(result))
        if not nothing:
            out.print(f"best: [bold]{result.best.name}[/bold]", highlight=False)
    if nothing:
        # as a race whose every branch failed has no winner
        first = result.failures[0].error
        _error(
            console,
            f"Every evaluation failed ({len(result.failures)} of {result.evaluations}), so no "
            f"combination can be recommended. The first error: {first}",
        )
        raise typer.Exit(EXIT_FAILED)
    if failed:
        raise usage_error(UserError(f"{'; '.join(failed)} (The selection itself finished.)"))


class _Tally:
    """Evaluations done, dollars paid, and the time left at the current pace (an upper bound:
    the algorithm usually stops well before the grid)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.done = 0
        self.spent = 0.0
        self.elapsed = 0.0

    def add(self, evaluation: Evaluation, elapsed: float) -> None:
        self.done += 1
        self.spent += evaluation.paid
        self.elapsed = elapsed

    def eta(self) -> str:
        if not self.done or self.done >= self.most:
            return ""
        seconds = int(self.elapsed / self.done * (self.most - self.done))
        return f"≤ {seconds // 60}:{seconds % 60:02d} left"


def _json_line(
    result: SelectionResult, *, run_id: str | None = None, conversation_id: str | None = None
) -> str:
    """The result as ``--json`` prints it: one line, secrets redacted, with the ids a race's
    result has (``run_id``: its record in ``phi logs``, ``None`` when it was not logged)."""
    payload = result.model_dump(mode="json")
    payload.update(run_id=run_id, conversation_id=conversation_id)
    return redact(json.dumps(payload, ensure_ascii=False))


def _log(
    path: Path, spec: SelectSpec, result: SelectionResult, no_log: bool
) -> dict[str, str | None]:
    """Record the selection in the run log (a failed write is a warning); the ids of the
    record: ``run_id`` (``None`` when it was not logged) and ``conversation_id``."""
    with open_session(no_log=no_log, resume=False, cid=None) as session:
        if not session.logged:
            return {"run_id": None, "conversation_id": session.conversation_id}
        extra = {"spec": str(path), "cache": str(spec.cache_path) if spec.cache_path else None}
        record: RunRecord = session.finish(
            session.recorder(f"phi select {path}", extra=extra), result
        )
        return {"run_id": record.id, "conversation_id": session.conversation_id}


def _error(console: Console, message: str) -> None:
    console.print(Text("Error: ", style="bold red") + Text(message), soft_wrap=True)


def _distinct_exports(paths: dict[str, Path | None]) -> None:
    """Two exports to one file would leave only the last one written: refused before the
    selection runs."""
    seen: dict[Path, str] = {}
    for flag, path in paths.items():
        if path is None:
            continue
        where = path.expanduser().resolve()
        if where in seen:
            raise UserError(
                f"{seen[where]} and {flag} both name {str(path)!r}; the second would overwrite "
                "the first. Give each export its own file."
            )
        seen[where] = flag


def _export(
    result: SelectionResult, csv_path: Path | None, json_path: Path | None, plot_path: Path | None
) -> list[str]:
    """Write each export asked for; the messages of those that failed (an unwritable path,
    the plot's optional dependency missing), each failure leaving the others written."""
    failed: list[str] = []
    writers = (
        (csv_path, result.to_csv),
        (json_path, result.to_json),
        (plot_path, result.plot_pareto),
    )
    for path, write in writers:
        if path is None:
            continue
        try:
            write(path)
        except UserError as error:
            failed.append(str(error))
    return failed


def _interrupted(
    console: Console,
    spec: SelectSpec,
    selector: ModelSelector,
    wall_time: float,
    path: Path,
    no_log: bool,
) -> None:
    """Ctrl-C (or SIGTERM): what was evaluated (per combination), what it cost, where it was
    saved; the run is logged as cancelled."""
    evaluator = selector.last_evaluator
    done = list(evaluator.completed) if evaluator is not None else []
    spent = evaluator.spent if evaluator is not None else 0.0
    grid = len(selector.space) * len(selector.dataset)
    rows: list[tuple[str, int, float, float]] = []  # name, evaluated, mean score, dollars
    failures: list[int] = []
    for k in sorted({k for k, _, _ in done}):
        mine = [e for kk, _, e in done if kk == k]
        score = sum(e.score for e in mine) / len(mine)
        rows.append((selector.space.name(k), len(mine), score, sum(e.cost_usd for e in mine)))
        failures.append(sum(1 for e in mine if e.error is not None))
    with open_session(no_log=no_log, resume=False, cid=None) as session:
        if session.logged:
            extra = {"spec": str(path), "cache": str(spec.cache_path) if spec.cache_path else None}
            recorder = session.recorder(f"phi select {path}", extra=extra)
            recorder.finish_interrupted_selection(spec.algorithm, rows, spent)
            if recorder.error is not None:
                warn(f"this run was not logged: {recorder.error}")
    console.print(
        f"Interrupted after {len(done)} of {grid} evaluations (${spent:.4f} spent, "
        f"{wall_time:.1f}s).",
        highlight=False,
        soft_wrap=True,
    )
    if done:
        table = Table(title="evaluated so far")
        for column in ("combination", "evaluated", "mean score", "failures", "cost"):
            table.add_column(column, justify="left" if column == "combination" else "right")
        for (name, evaluated, score, cost), failed in zip(rows, failures, strict=True):
            table.add_row(name, str(evaluated), f"{score:.3f}", str(failed), f"${cost:.4f}")
        print_table(console, table)  # whole values when piped, as every other table
    journal = selector.journal_path
    console.print(
        "Run the same command with --resume to continue where it stopped: the finished "
        "evaluations are taken from the run journal"
        + (f" ({journal.resolve()})" if journal is not None else "")
        + ", not run again.",
        highlight=False,
        soft_wrap=True,
    )
    cache = spec.cache_path
    if cache is None:
        console.print("No response was cached (cache = false / --no-cache).", soft_wrap=True)
    else:
        console.print(
            f"Every model response so far is saved in {cache.resolve()}; run the same command "
            "again and answered calls come from the cache, free and instant.",
            highlight=False,
            soft_wrap=True,
        )
