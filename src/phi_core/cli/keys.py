"""``phi keys``: API keys kept in the user directory, as ``llm keys``.

``phi keys set openai`` reads the key from a hidden prompt (or from stdin when it is piped) and
stores it in ``$PHI_HOME/keys.json`` with mode 0600; ``phi keys`` lists which providers have a
key — stored or in the environment — and never prints a value. A key in the environment wins
over a stored one.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..errors import UserError
from ..providers.keys import keys_path, remove_key, set_key, stored_keys
from ..providers.registry import known_providers
from ._common import usage_error
from ._output import print_table

__all__ = ["app"]

app = typer.Typer(
    help="API keys stored in $PHI_HOME/keys.json (mode 0600); the environment wins.",
    add_completion=False,
    rich_markup_mode=None,
)


def _rows() -> list[dict[str, object]]:
    stored = stored_keys()
    # A stored key also serves another API of the vendor that reads the same variable.
    shared = {s.key_env for s in known_providers() if s.name in stored}
    rows = []
    for spec in known_providers():
        if not spec.key_env:
            continue
        in_env = bool(os.environ.get(spec.key_env))
        kept = spec.name in stored or spec.key_env in shared
        rows.append(
            {
                "provider": spec.name,
                "key_env": spec.key_env,
                "env": in_env,
                "stored": kept,
                "used": "environment" if in_env else ("stored" if kept else None),
            }
        )
    return rows


def _show(as_json: bool) -> None:
    try:
        rows = _rows()
    except UserError as exc:
        raise usage_error(exc) from None
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    table = Table(title="API keys (values are never shown)")
    for column in ("provider", "variable", "in environment", "stored", "used"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row["provider"]),
            str(row["key_env"]),
            "yes" if row["env"] else "",
            "yes" if row["stored"] else "",
            str(row["used"] or "—"),
        )
    print_table(Console(highlight=False), table)


def keys(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines instead.")] = False,
) -> None:
    """List which providers have a key (`phi keys set NAME` stores one)."""
    if ctx.invoked_subcommand is None:
        _show(as_json)


app.callback(invoke_without_command=True)(keys)
app.command("list")(keys)


@app.command("set")
def set_(
    name: Annotated[str, typer.Argument(help="The provider (openai, anthropic, google, …).")],
) -> None:
    """Store the key of a provider, read from a hidden prompt or from stdin."""
    try:
        if sys.stdin.isatty():
            value = typer.prompt(f"Key for {name}", hide_input=True, prompt_suffix=": ")
        else:
            value = sys.stdin.readline()
        stored = set_key(name, value)
    except UserError as exc:
        raise usage_error(exc) from None
    except OSError as exc:
        raise usage_error(UserError(f"Cannot store the key in {keys_path()}: {exc}.")) from None
    typer.echo(f"Stored the {stored} key in {keys_path()} (mode 0600).")
    spec = next(s for s in known_providers() if s.name == stored)
    if spec.key_env and os.environ.get(spec.key_env):
        typer.echo(f"Note: {spec.key_env} is set in the environment and wins over the stored key.")


@app.command()
def remove(name: Annotated[str, typer.Argument(help="The provider whose key to forget.")]) -> None:
    """Forget a stored key."""
    try:
        removed = remove_key(name)
    except UserError as exc:
        raise usage_error(exc) from None
    if not removed:
        raise usage_error(UserError(f"No stored key for {name!r}; `phi keys` lists them."))
    typer.echo(f"Removed the stored {name.strip().lower()} key.")


@app.command()
def path() -> None:
    """Print where the keys are kept."""
    typer.echo(str(keys_path()))
