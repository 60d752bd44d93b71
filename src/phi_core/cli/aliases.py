"""``phi aliases``: short names for models (``phi aliases set fast openai:gpt-4o-mini``).

An alias works wherever a model name does (``-m fast``, ``--judge fast``, race and select files);
they are kept in ``$PHI_HOME/aliases.json``.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..errors import UserError
from ..providers.aliases import aliases_path, load_aliases, remove_alias, set_alias
from ._common import usage_error
from ._output import print_table

__all__ = ["app"]

app = typer.Typer(
    help="Short names for models, usable wherever a model name is (-m fast).",
    add_completion=False,
    rich_markup_mode=None,
)


def _show(as_json: bool) -> None:
    try:
        aliases = load_aliases()
    except UserError as exc:
        raise usage_error(exc) from None
    if as_json:
        typer.echo(json.dumps(aliases, indent=2, sort_keys=True))
        return
    if not aliases:
        typer.echo("No aliases yet; add one with `phi aliases set fast openai:gpt-4o-mini`.")
        return
    table = Table()
    table.add_column("alias")
    table.add_column("model")
    for name, model in sorted(aliases.items()):
        table.add_row(name, model)
    print_table(Console(highlight=False), table)


def aliases(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead.")] = False,
) -> None:
    """List the aliases (`phi aliases set NAME MODEL` adds one)."""
    if ctx.invoked_subcommand is None:
        _show(as_json)


app.callback(invoke_without_command=True)(aliases)
app.command("list")(aliases)


@app.command("set")
def set_(
    name: Annotated[str, typer.Argument(help="The alias (letters, digits, '_', '.', '-').")],
    model: Annotated[
        str, typer.Argument(help="`provider:model`, a bare catalog name or another alias.")
    ],
) -> None:
    """Make NAME stand for MODEL."""
    try:
        stored = set_alias(name, model)
    except UserError as exc:
        raise usage_error(exc) from None
    typer.echo(f"{name.strip()} → {stored}")


@app.command()
def remove(name: Annotated[str, typer.Argument(help="The alias to forget.")]) -> None:
    """Forget an alias."""
    try:
        removed = remove_alias(name)
    except UserError as exc:
        raise usage_error(exc) from None
    if not removed:
        known = ", ".join(sorted(load_aliases())) or "none"
        raise usage_error(UserError(f"No alias {name!r} (aliases: {known})."))
    typer.echo(f"Removed alias {name.strip()}.")


@app.command()
def path() -> None:
    """Print where the aliases are kept."""
    typer.echo(str(aliases_path()))
