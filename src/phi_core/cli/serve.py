"""``phi serve``: the OpenAI-compatible gateway (a thin adapter over :mod:`phi_core.gateway`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import StateStoreError, UserError
from ._common import EXIT_FAILED, usage_error

__all__ = ["command"]


def command(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Gateway file ([gateway] settings, [profiles.NAME] race files) or one race "
            "file (a profile named after the file). Default: passthrough only.",
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on (keep 127.0.0.1 unless keys are set).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: a free one).")] = 8000,
    workers: Annotated[
        int,
        typer.Option(min=1, help="Worker processes (share state through a redis:// state)."),
    ] = 1,
    log_level: Annotated[
        str,
        typer.Option(
            "--log-level",
            help="uvicorn's log level: info says where it listens; prompts are never logged.",
        ),
    ] = "info",
) -> None:
    """Serve race:PROFILE, route:PROFILE and provider:model over the OpenAI Chat API.

    Example: phi serve --config gateway.toml --port 8000, then
    curl http://127.0.0.1:8000/v1/models
    """
    from ..gateway._app import LOG_LEVELS, serve

    if log_level.lower() not in LOG_LEVELS:
        raise usage_error(
            UserError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}.")
        )
    try:
        serve(config, host=host, port=port, workers=workers, log_level=log_level)
    except UserError as exc:
        raise usage_error(exc) from None
    except StateStoreError as exc:  # the router state cannot be opened: named, with why
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
