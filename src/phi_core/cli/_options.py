"""Options that several commands share (``race``, ``run``, ``chat``), defined once."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from ..routing.state import is_redis
from ._common import warn
from ._output import OUTPUT_MODES

__all__ = [
    "AnswerOnlyOption",
    "CidOption",
    "ContinueOption",
    "MaxConcurrencyOption",
    "NoLogOption",
    "OutputOption",
    "RouterStateKeyOption",
    "ScriptOption",
    "TimeoutOption",
    "finite_at_least",
    "warn_key_without_redis",
]


def finite_at_least(minimum: float, unit: str) -> Callable[[float | None], float | None]:
    """An option callback refusing a number that is not finite (``nan``, ``inf``) or is below
    ``minimum`` (a click ``min=`` range would call ``nan`` merely too small)."""

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value):
            raise typer.BadParameter(
                f"must be a finite number of {unit} (at least {minimum:g}), got {value}."
            )
        if value < minimum:
            raise typer.BadParameter(f"must be at least {minimum:g} {unit}, got {value:g}.")
        return value

    return check


OUTPUT_HELP = (
    f"What to print: {', '.join(OUTPUT_MODES)} (answer: only the winner's text). Default: text."
)
ContinueOption = Annotated[
    bool,
    typer.Option(
        "-c", "--continue", help="Continue the last conversation from the winner's answer."
    ),
]
CidOption = Annotated[
    str | None,
    typer.Option(
        "--cid",
        help="Continue this conversation: its id (`phi logs --json`), or the id of any run in "
        "it as `phi logs` lists them (a prefix is enough).",
    ),
]
NoLogOption = Annotated[
    bool,
    typer.Option("-n", "--no-log", help="Do not record this run in the run log (`phi logs`)."),
]
OutputOption = Annotated[str | None, typer.Option("-o", "--output", help=OUTPUT_HELP)]
AnswerOnlyOption = Annotated[
    bool, typer.Option("-a", "--answer-only", help="Print only the winner's text (-o answer).")
]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        callback=finite_at_least(0.001, "seconds"),
        help="Seconds after which a branch times out.",
    ),
]
MaxConcurrencyOption = Annotated[
    int | None, typer.Option(min=1, help="At most this many branches run at once.")
]
ScriptOption = Annotated[
    Path | None, typer.Option(hidden=True, envvar="PHI_SCRIPT", help="Scripted replies.")
]

RouterStateKeyOption = Annotated[
    str | None,
    typer.Option(
        "--router-state-key",
        envvar="ROUTER_STATE_KEY",
        help="Key prefix of a router state in Redis (default phi:router:v1), as "
        "`parallel-agents --router-state-key` writes it.",
    ),
]


def warn_key_without_redis(key: str | None, location: str | None) -> None:
    """Warn that ``--router-state-key`` was given for router state that is not in Redis (a key
    prefix means nothing to a SQLite or JSON file), so the user knows it had no effect."""
    if key is not None and not (location is not None and is_redis(location)):
        warn("--router-state-key (ROUTER_STATE_KEY) only applies to state in Redis; ignored.")
