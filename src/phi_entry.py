"""The console scripts ``phi`` and ``parallel-agents``, outside the ``phi_core`` package so that
Ctrl-C while phi-core is still loading or building its command (most of a second) exits with 130
and no traceback, as it does once the command runs."""

from __future__ import annotations

import sys

__all__ = ["parallel_agents", "phi"]

EXIT_INTERRUPTED = 130
"""As ``phi_core.cli``'s, which cannot be imported before the handler is in place."""


def phi() -> None:
    """``phi``: :func:`phi_core.cli.main` once it has loaded."""
    _run("main")


def parallel_agents() -> None:
    """``parallel-agents``: :func:`phi_core.cli.parallel_agents_main` once it has loaded."""
    _run("parallel_agents_main")


def _run(entry: str) -> None:
    try:
        import phi_core.cli as cli

        # Building the command (typer reads every option's signature) takes a moment too, before
        # the command's own Ctrl-C handling is in place.
        getattr(cli, entry)()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
