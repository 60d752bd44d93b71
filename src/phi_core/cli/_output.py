"""How results leave the command: output modes, tables that fit, Markdown.

``-o/--output`` chooses what ``phi race`` and ``phi run`` print on stdout:

* ``text`` (default): the live side-by-side view in a terminal, a plain log when piped, then the
  verdict and the cost table;
* ``jsonl`` (also ``--json``): every event as one JSON line, then the result object;
* ``json``: only the result object (indented);
* ``markdown``: the verdict, the winner's answer and a table of branches, as Markdown;
* ``answer`` (also ``-a/--answer-only``): the winner's text and nothing else.

Tables fit the terminal (long values wrap, never ``…``) and, when piped, print every value whole
on one line: :func:`print_table` measures the table and prints it as wide as it needs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal, TextIO

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from ..errors import UserError

__all__ = [
    "OUTPUT_MODES",
    "OutputMode",
    "console_for",
    "markdown_table",
    "output_mode",
    "print_table",
]

OutputMode = Literal["text", "json", "jsonl", "markdown", "answer"]
OUTPUT_MODES: tuple[str, ...] = ("text", "json", "jsonl", "markdown", "answer")
_PIPE_WIDTH = 120


def output_mode(
    output: str | None, *, json_lines: bool = False, answer_only: bool = False
) -> OutputMode:
    """The one mode ``-o``, ``--json`` and ``-a`` ask for; two different ones are a mistake."""
    asked: list[str] = []
    if output is not None:
        key = output.strip().lower()
        key = {"md": "markdown", "txt": "text", "ndjson": "jsonl"}.get(key, key)
        if key not in OUTPUT_MODES:
            raise UserError(
                f"Unknown output mode {output!r}; use one of: {', '.join(OUTPUT_MODES)}."
            )
        asked.append(key)
    if json_lines:
        asked.append("jsonl")
    if answer_only:
        asked.append("answer")
    if len(set(asked)) > 1:
        raise UserError(
            f"Choose one output: {' and '.join(sorted(set(asked)))} were both asked for "
            "(-o, --json and -a/--answer-only each choose one)."
        )
    return asked[0] if asked else "text"  # type: ignore[return-value]


def console_for(out: TextIO) -> Console:
    """A terminal-width console, or a plain 120-column one for pipes (``COLUMNS`` wins)."""
    console = Console(file=out, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(file=out, highlight=False, width=_PIPE_WIDTH)
    return console


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` fitting a terminal (values wrap instead of being cut with ``…``) or, when
    the output is not a terminal, as wide as its longest values need."""
    for column in table.columns:
        column.overflow = "fold"
    needed = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    if console.is_terminal:
        if needed > console.width:
            # Headers give way first ("tokens in" over two lines), so values fold only when
            # the terminal is narrower still.
            for column in table.columns:
                if isinstance(column.header, str):
                    column.header = column.header.replace(" ", "\n")
        console.print(table)
        return
    wide = Console(
        file=console.file,
        width=max(needed, 20),
        highlight=False,
        no_color=console.no_color,
        color_system=None,
    )
    wide.print(table)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (``|`` and newlines in values escaped)."""

    def cell(value: Any) -> str:
        return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def trust_line(trust: dict[str, Any] | None) -> str:
    """One line saying how a race's decision was reached and how much to trust it (the
    figures of :meth:`~phi_core.parallel.EvaluationDecision.trust`)."""
    if not trust:
        return ""
    parts = [f"decided by {trust.get('how') or 'the strategy'}"]
    consistency = trust.get("position_consistency")
    if consistency is not None:
        orders = trust.get("orders")
        over = f" over {orders} answer orders" if orders else ""
        parts.append(f"position consistency {consistency:.0%}{over}")
    if trust.get("agreement_share") is not None:
        parts.append(f"agreement share {trust['agreement_share']:.0%}")
    if trust.get("flip_rate") is not None:
        parts.append(f"judge flip rate {trust['flip_rate']:.0%}")
    if len(parts) == 1:
        parts.append("no consistency or agreement figure measured")
    if trust.get("fallback"):
        parts.append("it fell back to its default rule: low trust")
    elif trust.get("tie"):
        parts.append("a tie: the evidence did not separate the top answers")
    return "; ".join(parts)
