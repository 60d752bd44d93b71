"""The ``phi`` command line: ``phi race``, ``phi run`` and ``phi models`` (typer + rich).

Owns argument parsing, race config files (TOML/YAML/JSON), the live side-by-side view and the
``--json`` output. It sits on top of every other layer and is imported by nothing in the library.
"""

from ._app import app, main

__all__ = ["app", "main"]
