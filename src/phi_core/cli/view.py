"""``phi view``: serve the web view of the run log, the router state and selections on
127.0.0.1 (see :mod:`phi_core.view`); Ctrl-C stops it."""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..routing.state import state_location
from ..view import DEFAULT_PORT, ViewData, is_loopback, serve
from ._common import EXIT_INTERRUPTED, usage_error, warn
from ._options import RouterStateKeyOption, warn_key_without_redis

__all__ = ["command"]


def command(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (loopback by default).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", "-p", min=0, max=65535, help="Port (0: any free port).")
    ] = DEFAULT_PORT,
    open_browser: Annotated[
        bool, typer.Option("--open/--no-open", help="Open the page in a web browser.")
    ] = False,
    log: Annotated[
        Path | None,
        typer.Option("--log", help="The run log to show (default: logs.db in $PHI_HOME)."),
    ] = None,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            envvar="PHI_ROUTER_STATE",
            help="Router state: a .sqlite/.db or JSON file, or redis://host:port/db.",
        ),
    ] = None,
    state_key: RouterStateKeyOption = None,
) -> None:
    """Serve the web view of past runs, the router state and selections (read-only)."""
    if not is_loopback(host):
        warn(
            f"--host {host} serves every logged prompt and answer to the network, without "
            "authentication; use 127.0.0.1 unless that is what you want."
        )
    warn_key_without_redis(state_key, state_location(state))
    data = ViewData(log, state, state_key)

    def ready(url: str) -> None:
        typer.echo(f"phi view: {url}  (read-only; Ctrl-C stops it)", err=True)
        if open_browser:
            webbrowser.open(url)

    try:
        serve(data, host=host, port=port, on_ready=ready)
    except UserError as exc:
        raise usage_error(exc) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
