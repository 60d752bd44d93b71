"""``phi logs``: list, show and manage the run log (``$PHI_HOME/logs.db``), as ``llm logs``.

``phi logs`` lists the newest runs (``-n``, ``--json``, filters by model, strategy, kind,
status, conversation, date and text); ``phi logs show [ID]`` shows one run whole (the newest
without an id; an id prefix is enough); ``phi logs path``, ``status``, ``on`` and ``off`` manage
the log.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from .._paths import check_user_dir
from ..errors import UserError
from ..providers.aliases import lookup_alias
from ..runlog import (
    RunLog,
    RunQuery,
    RunRecord,
    check_count,
    check_text,
    default_log_path,
    end_of_day,
    log_status,
    open_run_log,
    parse_when,
    set_logging_enabled,
    why_logging_disabled,
)
from ._common import streams, usage_error
from ._output import console_for, print_table
from ._report import print_record, record_markdown, runs_table

__all__ = ["app"]

app = typer.Typer(
    help="The run log: every race, run and selection, kept in $PHI_HOME/logs.db.",
    add_completion=False,
    rich_markup_mode=None,
)

CountOption = Annotated[int, typer.Option("-n", "--count", min=0, help="How many runs (0: all).")]
JsonOption = Annotated[bool, typer.Option("--json", help="JSON lines: one run record each.")]
ModelOption = Annotated[
    str | None,
    typer.Option("-m", "--model", help="Runs where a branch used this model, alias or name."),
]
StrategyOption = Annotated[str | None, typer.Option("-s", "--strategy", help="Only this strategy.")]
KindOption = Annotated[
    str | None, typer.Option("--kind", help="Only runs of this kind: run, race, bandit, select.")
]
StatusOption = Annotated[str | None, typer.Option("--status", help="Only this status (ok, …).")]
SinceOption = Annotated[
    str | None,
    typer.Option("--since", help="Runs since a date (2026-01-02), a time or an age (2h, 7d)."),
]
UntilOption = Annotated[
    str | None, typer.Option("--until", help="Runs until a date (inclusive), a time or an age.")
]
QueryOption = Annotated[
    str | None,
    typer.Option("-q", "--query", help="Words that must appear in the prompt, answers or models."),
]
CidOption = Annotated[str | None, typer.Option("--cid", help="Only this conversation.")]


def _open() -> RunLog | None:
    """The run log, or ``None`` (after saying so) when nothing was logged yet.

    Raises:
        typer.Exit: (code 2, after saying what is wrong and what to do) ``PHI_HOME`` is a
            file, or the log is not a readable run log (garbage, truncated).
    """
    try:
        check_user_dir()
        if not default_log_path().exists():
            typer.echo(
                f"No runs logged yet ({default_log_path()} does not exist); run `phi race` or "
                "`phi run` first.",
                err=True,
            )
            return None
        return open_run_log()
    except UserError as exc:
        raise usage_error(exc) from None


def _checked(value: str | None, name: str) -> str | None:
    """An option's text, refused (:func:`check_text`) when it is not valid UTF-8 or holds a
    NUL, as a prompt that is not UTF-8 is."""
    return None if value is None else check_text(value, name)


def _list(
    count: int,
    as_json: bool,
    model: str | None,
    strategy: str | None,
    kind: str | None,
    status: str | None,
    since: str | None,
    until: str | None,
    query: str | None,
    cid: str | None,
) -> None:
    try:
        model, strategy, kind, status = (
            _checked(model, "-m/--model"), _checked(strategy, "-s/--strategy"),
            _checked(kind, "--kind"), _checked(status, "--status"),
        )  # fmt: skip
        since, until, query, cid = (
            _checked(since, "--since"), _checked(until, "--until"),
            _checked(query, "-q/--query"), _checked(cid, "--cid"),
        )  # fmt: skip
        if kind is not None and kind not in ("run", "race", "bandit", "select"):
            raise UserError(f"Unknown kind {kind!r}; use run, race, bandit or select.")
        if model is not None:
            model = lookup_alias(model.strip()) or model
        run_query = RunQuery(
            limit=check_count(count, "-n/--count") or None, model=model, strategy=strategy,
            kind=kind, status=status,
            since=parse_when(since) if since else None,
            until=end_of_day(until) if until else None,
            text=query, conversation_id=cid,
        )  # fmt: skip
    except UserError as exc:
        raise usage_error(exc) from None
    log = _open()
    if log is None:
        return
    with log, streams() as (out, err):
        try:
            records = log.list_runs(run_query)
        except UserError as exc:  # damage further in the file
            raise usage_error(exc, err) from None
        if as_json:
            for record in records:
                out.write(record.model_dump_json(exclude={"messages"}) + "\n")
            return
        if not records:
            out.write("No runs match.\n")
            return
        print_table(console_for(out), runs_table(records))


def logs(
    ctx: typer.Context,
    count: CountOption = 20,
    as_json: JsonOption = False,
    model: ModelOption = None,
    strategy: StrategyOption = None,
    kind: KindOption = None,
    status: StatusOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    query: QueryOption = None,
    cid: CidOption = None,
) -> None:
    """List the newest logged runs (`phi logs show ID` shows one whole)."""
    if ctx.invoked_subcommand is None:
        _list(count, as_json, model, strategy, kind, status, since, until, query, cid)


app.callback(invoke_without_command=True)(logs)
app.command("list")(logs)


@app.command()
def show(
    run_id: Annotated[
        str | None, typer.Argument(help="A run id or a unique prefix (default: the newest run).")
    ] = None,
    as_json: JsonOption = False,
    output: Annotated[str, typer.Option("-o", "--output", help="text, json or markdown.")] = "text",
) -> None:
    """Show one run whole: prompt, every branch's answer, the verdict, router decisions, costs."""
    mode = "json" if as_json else output.strip().lower()
    if mode not in ("text", "json", "markdown", "md"):
        raise usage_error(UserError(f"Unknown output {output!r}; use text, json or markdown."))
    try:
        _checked(run_id, "The run id")
    except UserError as exc:
        raise usage_error(exc) from None
    log = _open()
    if log is None:
        raise typer.Exit(1)
    with log, streams() as (out, err):
        try:
            record: RunRecord | None = log.get_run(run_id) if run_id else log.last_run()
        except UserError as exc:
            raise usage_error(exc, err) from None
        if record is None:
            out.write("No runs logged yet.\n")
            return
        if mode == "json":
            out.write(record.model_dump_json(indent=2) + "\n")
        elif mode in ("markdown", "md"):
            out.write(record_markdown(record))
        else:
            print_record(console_for(out), record)


@app.command()
def path() -> None:
    """Print where the run log is."""
    typer.echo(str(default_log_path()))


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead.")] = False,
) -> None:
    """Whether runs are logged, where, and how many there are."""
    try:
        info = log_status()
    except UserError as exc:  # PHI_HOME is a file, or the log is not a readable run log
        raise usage_error(exc) from None
    if as_json:
        typer.echo(json.dumps(info.__dict__, indent=2))
        return
    console = Console(highlight=False)
    state = "on" if info.enabled else f"off: {info.why_disabled}"
    console.print(f"Logging is {state}.", soft_wrap=True)
    console.print(f"Run log: {info.path}", soft_wrap=True)
    if not info.exists:
        console.print("Nothing logged yet.")
        return
    console.print(f"Runs: {info.runs} in {info.conversations} conversations")
    console.print(f"Size: {info.size_bytes / 1024:.1f} KiB")
    search = "FTS5 full-text index" if info.full_text_search else "LIKE (no FTS5 in this SQLite)"
    console.print(f"Search: {search}")
    console.print(f"Schema: {len(info.migrations)} migrations ({', '.join(info.migrations)})")


@app.command()
def on() -> None:
    """Log every run from now on (the default)."""
    try:
        set_logging_enabled(True)
    except UserError as exc:  # PHI_HOME is a file
        raise usage_error(exc) from None
    still_off = why_logging_disabled()
    if still_off is not None:  # PHI_NO_LOG outranks the setting
        typer.echo(
            f"Logging is turned on, but runs are still not recorded here: {still_off} "
            "(unset it to record them)."
        )
        return
    typer.echo("Logging is on: every race, run and selection is recorded.")


@app.command()
def off() -> None:
    """Stop logging runs (`phi logs on` turns it back on; PHI_NO_LOG=1 does it per shell)."""
    try:
        set_logging_enabled(False)
    except UserError as exc:  # PHI_HOME is a file
        raise usage_error(exc) from None
    typer.echo("Logging is off: runs are not recorded until `phi logs on`.")
