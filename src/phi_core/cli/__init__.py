"""The ``phi`` command line: ``phi race``, ``run``, ``models``, ``route``, ``select`` (typer + rich),
and the seed-compatible ``parallel-agents`` command.

Owns argument parsing, the live side-by-side view and the ``--json`` output; what a race runs is
planned by :mod:`phi_core.config`. It sits on top of every other layer and is imported by nothing
in the library.
"""

from ._app import app, main
from ._parallel_agents import main as parallel_agents_main

__all__ = ["app", "main", "parallel_agents_main"]
