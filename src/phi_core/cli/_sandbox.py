"""The command line's side of the sandbox: ``--unsafe-exec`` and the one-line notice on stderr
the first time a run executes model-written code (``exec-vote``, ``--verify python``, a race
file with ``strategy = "exec-vote"``): what runs where.
"""

from __future__ import annotations

import logging
import sys

import typer

from .._logging import get_logger
from ..sandbox import default_sandbox, set_default_sandbox

__all__ = ["UNSAFE_EXEC_HELP", "use_sandbox"]

UNSAFE_EXEC_HELP = (
    "Where no sandbox can be made (no bubblewrap, no user namespaces), run model-written code "
    "(exec-vote, --verify python) directly on this machine anyway. Only on a throw-away machine."
)


class _Notice(logging.Handler):
    """Writes the sandbox's notices to the current stderr, prefixed like the CLI's messages."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(f"phi: {record.getMessage()}\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr closed (a pipe reader went away): nothing to say
            pass


def use_sandbox(ctx: typer.Context, unsafe_exec: bool) -> None:
    """Show the sandbox's notices on stderr, and with ``unsafe_exec`` allow running without a
    sandbox for the rest of this command (the previous default comes back when it ends)."""
    logger = get_logger("phi_core.sandbox")
    if not any(isinstance(h, _Notice) for h in logger.handlers):
        logger.addHandler(_Notice(logging.INFO))
        logger.setLevel(logging.INFO)
    if unsafe_exec:
        previous = default_sandbox()
        set_default_sandbox(previous.replace(allow_unsafe_exec=True))
        ctx.call_on_close(lambda: set_default_sandbox(previous))
