"""The console scripts ``phi`` and ``parallel-agents``, outside the ``phi_core`` package so that
Ctrl-C while phi-core is still loading (most of a second) exits with 130 and no traceback, as it
does once the command runs."""

from __future__ import annotations

import sys

__all__ = ["parallel_agents", "phi"]

EXIT_INTERRUPTED = 130


def phi() -> None:
    """``phi``: :func:`phi_core.cli.main` once it has loaded."""
    try:
        from phi_core.cli import main
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    main()


def parallel_agents() -> None:
    """``parallel-agents``: :func:`phi_core.cli.parallel_agents_main` once it has loaded."""
    try:
        from phi_core.cli import parallel_agents_main
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    parallel_agents_main()
