"""Logged runs as people read them: the ``phi logs`` table, ``phi logs show`` and Markdown.

Every renderer here takes a :class:`~phi_core.runlog.RunRecord`, so a race printed with
``-o markdown`` right after it ran and the same race shown later by ``phi logs show ID -o
markdown`` read the same.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..errors import redact
from ..runlog import RunRecord
from ._output import markdown_table, print_table, trust_line
from ._view import _STATUS_STYLE, format_cost

__all__ = ["print_record", "record_markdown", "runs_table", "verdict_lines"]


def verdict_lines(record: RunRecord) -> list[str]:
    """Why the winner won, as short lines (rationale, scores, votes, judge figures)."""
    verdict = record.verdict or {}
    labels = {str(b.index): b.label for b in record.branches if not b.phase}
    lines: list[str] = []
    if record.kind == "bandit":
        lines.append(
            f"action: {verdict.get('action')}; order: {', '.join(verdict.get('order') or [])}"
        )
        if verdict.get("scores"):
            lines.append("preview scores: " + _pairs(verdict["scores"]))
        if verdict.get("quality") is not None:
            lines.append(f"quality: {verdict['quality']:.2f}")
        if verdict.get("verified") is not None:
            lines.append(f"verified: {verdict['verified']}")
        if verdict.get("rewards"):
            lines.append("rewards: " + _pairs(verdict["rewards"], signed=True))
        if verdict.get("error"):
            lines.append(f"error: {verdict['error']}")
        return lines
    if record.kind == "select":
        lines.append(
            f"{verdict.get('evaluations')} of {verdict.get('grid_evaluations')} evaluations"
        )
        if verdict.get("accuracy") is not None:
            low, high = (verdict.get("ci") or [None, None])[:2]
            ci = f" (95% CI {100 * low:.0f}–{100 * high:.0f}%)" if low is not None else ""
            lines.append(f"accuracy of the best: {100 * verdict['accuracy']:.1f}%{ci}")
        if verdict.get("pareto"):
            lines.append("Pareto front: " + ", ".join(verdict["pareto"]))
        return lines
    if verdict.get("judge"):
        lines.append(f"judge: {verdict['judge']}")
    if verdict.get("scores"):
        named = {labels.get(str(k), str(k)): v for k, v in verdict["scores"].items()}
        lines.append("scores: " + _pairs(named))
    if verdict.get("votes"):
        lines.append("votes: " + ", ".join(f"{a!r} ×{n}" for a, n in verdict["votes"].items()))
    if verdict.get("rationale"):
        lines.append(str(verdict["rationale"]).strip())
    if verdict.get("tie"):
        lines.append("(a tie, broken by cost, then tokens, then branch order)")
    if verdict.get("fallback"):
        lines.append("(the strategy fell back to its default rule)")
    if verdict.get("trust"):
        lines.append("trust: " + trust_line(verdict["trust"]))
    figures = {  # the judge's numbers: flip rate, position consistency, agreement, …
        k: v
        for k, v in (verdict.get("details") or {}).items()
        if isinstance(v, int | float) and not k.endswith("_id")
    }
    if figures:
        lines.append("figures: " + ", ".join(f"{k} {_figure(v)}" for k, v in figures.items()))
    return lines


def _figure(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _pairs(values: dict[str, Any], *, signed: bool = False) -> str:
    form = "{:+.3f}" if signed else "{:.3g}"
    return ", ".join(
        f"{k} {form.format(v) if isinstance(v, int | float) else v}" for k, v in values.items()
    )


def _tokens(record: RunRecord) -> str:
    return f"{record.input_tokens} in / {record.output_tokens} out"


def _heading(record: RunRecord) -> str:
    if record.kind == "run":
        return record.winner_model or (record.branches[0].model if record.branches else "run")
    if record.winner:
        model = f" ({record.winner_model})" if record.winner_model else ""
        return f"Winner: {record.winner}{model}"
    return f"No winner ({record.status})"


def _branch_row(record: RunRecord, b: Any) -> list[str]:
    return [
        ("★ " if b.winner else "") + b.label + (f" · {b.phase}" if b.phase else ""),
        b.model,
        b.status,
        "" if b.score is None else f"{b.score:.3g}",
        "" if b.latency_s is None else f"{b.latency_s:.2f}s",
        str(b.input_tokens),
        str(b.output_tokens),
        format_cost(b.cost_usd),
    ]


_BRANCH_HEADER = (
    "branch",
    "model",
    "status",
    "score",
    "latency",
    "tokens in",
    "tokens out",
    "cost",
)


def record_markdown(record: RunRecord) -> str:
    """The run as Markdown: heading, the winner's answer, why, every branch, the others'
    answers. The answers are the models' own; everything else is redacted (a token in an
    endpoint URL is part of a branch's name)."""
    parts = [f"## {redact(_heading(record))}", ""]
    winner = record.winning_branch
    if record.text:
        parts += [record.text.strip(), ""]
    elif winner is None and record.kind == "run" and record.branches and record.branches[0].error:
        parts += [f"**Error:** {redact(record.branches[0].error)}", ""]
    why = verdict_lines(record)
    if why and record.kind != "run":
        parts += ["**Why:** " + redact("; ".join(why)), ""]
    if record.kind != "run":
        rows = [[redact(cell) for cell in _branch_row(record, b)] for b in record.branches]
        parts += [markdown_table(_BRANCH_HEADER, rows), ""]
    total = f"{record.status} · {_tokens(record)} · {format_cost(record.cost_usd)}"
    if record.duration_s is not None:
        total += f" · {record.duration_s:.2f}s"
    parts += [f"_{total} · run {record.id}_", ""]
    for warning in record.warnings:
        parts += [f"> warning: {redact(warning)}", ""]
    if record.kind in ("race", "bandit"):
        for b in record.branches:
            if b.winner or not (b.text or b.error):
                continue
            title = f"### {b.label}{' · ' + b.phase if b.phase else ''} ({b.model}) — {b.status}"
            body = b.text.strip() if b.text else f"**Error:** {redact(b.error or '')}"
            parts += [redact(title), "", body, ""]
    return "\n".join(parts).rstrip() + "\n"


def runs_table(records: list[RunRecord], *, title: str | None = None) -> Table:
    """The ``phi logs`` table: newest first, one row per run."""
    table = Table(title=title)
    for name, justify in (
        ("id", "left"),
        ("time (UTC)", "left"),
        ("kind", "left"),
        ("strategy", "left"),
        ("models", "left"),
        ("winner", "left"),
        ("status", "left"),
        ("cost", "right"),
        ("prompt", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in records:
        table.add_row(
            r.id,
            r.created_at[:19].replace("T", " "),
            r.kind,
            r.strategy or "",
            ", ".join(r.models),
            r.winner or "",
            Text(r.status, style=_STATUS_STYLE.get(r.status, "")),
            format_cost(r.cost_usd),
            _shortened(r.prompt, PROMPT_SHOWN),
        )
    return table


PROMPT_SHOWN = 80
"""The characters of a prompt the ``phi logs`` list shows (``phi logs show ID`` prints it
whole): one long prompt must not widen every row of a piped list to its length."""


def _shortened(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with ``…`` (only its head is read)."""
    head = text[: limit * 8]
    flat = " ".join(head.split())
    if len(flat) <= limit and len(head) == len(text):
        return flat
    return flat[: limit - 1].rstrip() + "…"


def print_record(console: Console, record: RunRecord) -> None:
    """``phi logs show``: the run whole — header, prompt, every branch, the verdict, router
    decisions, warnings, the cost table."""
    header = Text.assemble(
        ("run ", "bold"), (record.id, "bold cyan"), f"  {record.kind}",
        f" · {record.strategy}" if record.strategy else "",
        f" · {record.created_at.replace('T', ' ')}",
        f" · conversation {record.conversation_id}" if record.conversation_id else "",
        f" · from {record.source}",
    )  # fmt: skip
    console.print(header, soft_wrap=True)
    if record.system:
        console.print(Panel(Text(record.system), title="system", title_align="left"))
    console.print(Panel(Text(record.prompt), title="prompt", title_align="left"))
    for b in record.branches:
        console.print(_branch_panel(b))
    console.print(Text.assemble(("Result: ", "bold"), (_heading(record), "bold green")))
    for line in verdict_lines(record):
        console.print(Text("  " + line), soft_wrap=True)
    for event in record.route_events:
        payload = event.payload
        if event.type == "route_decision":
            what = f"{payload.get('action')}: {payload.get('reason', '')}"
        else:
            rewards = payload.get("rewards") or []
            what = ", ".join(
                f"{r.get('arm')} {r.get('reward', 0):+.3f}" for r in rewards if isinstance(r, dict)
            )
        console.print(
            Text.assemble(("router ", "bold"), (f"{event.type.removeprefix('route_')} ", "cyan"),
                          f"[{event.namespace}] ", what),
            soft_wrap=True,
        )  # fmt: skip
    for warning in record.warnings:
        console.print(Text("warning: " + warning, style="yellow"), soft_wrap=True)
    table = Table(show_header=True)
    for name in _BRANCH_HEADER:
        table.add_column(name, justify="left" if name in ("branch", "model", "status") else "right")
    for b in record.branches:
        table.add_row(*_branch_row(record, b))
    table.add_section()
    table.add_row(
        "total", "", record.status, "",
        "" if record.duration_s is None else f"{record.duration_s:.2f}s",
        str(record.input_tokens), str(record.output_tokens), format_cost(record.cost_usd),
        style="bold",
    )  # fmt: skip
    print_table(console, table)


def _branch_panel(b: Any) -> RenderableType:
    body: list[RenderableType] = []
    if b.text:
        body.append(Text(b.text.strip()))
    if b.error:
        body.append(Text(f"[{b.error_kind or b.status}] {b.error}", style="red"))
    title = Text.assemble(
        ("★ " if b.winner else "", "bold green"), (b.label, "bold"),
        (f" · {b.phase}" if b.phase else "", "dim"),
        (f" {b.model}" if b.model != b.label else "", "dim"),
    )  # fmt: skip
    subtitle = Text.assemble(
        (b.status, _STATUS_STYLE.get(b.status, "")),
        (f" · {b.output_tokens} tok · {format_cost(b.cost_usd)}", "dim"),
        (f" · {b.latency_s:.2f}s" if b.latency_s is not None else "", "dim"),
    )
    return Panel(
        Group(*body) if body else Text(""),
        title=title,
        subtitle=subtitle,
        title_align="left",
        border_style=_STATUS_STYLE.get(b.status, ""),
    )
