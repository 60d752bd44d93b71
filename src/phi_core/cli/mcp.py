"""``phi mcp serve``: phi's racing as MCP tools (``race``, ``route``, ``models``) for other agents.

``app`` is the ``mcp`` sub-app (mounted by the main CLI); the tools live in
:mod:`phi_core.mcp_server`, this module only parses flags.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..gateway._config import exposure_warning
from ..mcp_server import KeyLimits, RaceTools, load_config, mcp_server, serve_http
from ..runlog import RunLog, default_log_path, logging_enabled
from ._common import usage_error, warn
from ._options import ScriptOption, finite_at_least
from ._script import scripted_providers

__all__ = ["app"]

app = typer.Typer(
    name="mcp",
    help="Serve phi's racing to MCP clients (desktop assistants, IDE agents, other agents).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@app.command("serve")
def serve(
    ctx: typer.Context,
    config: Annotated[
        list[Path] | None,
        typer.Option(
            "--config",
            help="Gateway file ([profiles.NAME] race files, [gateway] state and keys), as for "
            "`phi serve`, "
            "or one race file (a profile named after the file). Repeatable. The profile "
            "`default` races the default configurations of the embedded model unless a file "
            "names it.",
        ),
    ] = None,
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; with keys "
            "([[gateway.keys]] or $PHI_GATEWAY_KEYS) every request needs `Authorization: "
            "Bearer <key>`.",
        ),
    ] = False,
    host: Annotated[
        str, typer.Option(help="Address to listen on with --http (loopback by default).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port with --http (0: any free one).")
    ] = 8000,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            envvar="PHI_ROUTER_STATE",
            help="Router state of the `route` tool: .sqlite/.json file or redis://… (default: "
            "the config's [gateway] state, else router_state.sqlite in $PHI_HOME, ~/.phi).",
        ),
    ] = None,
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            callback=finite_at_least(0.000001, "dollars"),
            help="Dollar cap on every tool call; a caller may ask for less, never more.",
        ),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="With --http on a non-loopback --host and no keys, also answer requests for "
            "this Host name (repeatable; loopback names, this machine's names and IP addresses "
            "are answered anyway).",
        ),
    ] = None,
    no_log: Annotated[
        bool, typer.Option("-n", "--no-log", help="Do not record the races in the run log.")
    ] = False,
    script: ScriptOption = None,
) -> None:
    """Serve the tools `race`, `route` and `models` over MCP (stdio, or --http).

    For a desktop assistant, add a server whose command is `phi mcp serve --config race.toml`.
    The tools spend money on the providers your race files name: set --max-cost.
    """
    try:
        loaded = load_config(config or [])
        source = ctx.get_parameter_source("state")
        if loaded.state and (source is None or source.name != "COMMANDLINE"):
            state = loaded.state  # the config file's beats the environment's, as for phi serve
        limits = KeyLimits(loaded.api_keys, state) if http and loaded.keys else None
        tools = RaceTools(
            loaded.profiles,
            state=state,
            providers=scripted_providers(script),
            max_cost_usd=max_cost,
            run_log=None if no_log or not loaded.run_log else _run_log(),
            models=loaded.models,
            passthrough=loaded.passthrough,
            limits=limits,
            log_content=loaded.log_content,
            retries=loaded.retries,
        )
        server = mcp_server(tools)
        if not http:
            server.run("stdio")
            return
        warning = exposure_warning(bool(loaded.keys), host, "the providers your races use")
        if warning is not None:
            warn(warning)
        serve_http(
            server, host=host, port=port, keys=loaded.keys, on_ready=_announce,
            allow_hosts=allow_host or (), max_body_bytes=loaded.max_body_bytes,
        )  # fmt: skip
    except UserError as exc:
        raise usage_error(exc) from None


def _run_log() -> RunLog | None:
    """The user's run log, unless `phi logs off`; one that cannot open is a warning."""
    if not logging_enabled():
        return None
    try:
        return RunLog()
    except (sqlite3.Error, OSError) as exc:
        warn(
            f"the run log {str(default_log_path())!r} cannot be opened ({exc}); races go unlogged."
        )
        return None


def _announce(url: str) -> None:
    print(f"phi MCP server listening on {url}", file=sys.stderr, flush=True)
