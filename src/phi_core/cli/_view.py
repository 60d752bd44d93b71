"""How a race looks in the terminal: a live side-by-side view, a plain log, or JSON lines.

:class:`RaceView` is the event sink of a race. It keeps one :class:`BranchState` per branch (text
so far, status, tokens) and draws them with ``rich.live.Live`` when stdout is a terminal: panels
side by side when they fit (at least ``MIN_PANEL_WIDTH`` columns each), stacked otherwise. When
stdout is not a terminal it prints each branch's answer once, as the branch ends. Either way it
finishes with the verdict (winner and why) and a table of latency, tokens and cost.

A branch reads ``queued`` until its model produces something (it may be waiting for a
concurrency slot, a local model instance or the first token), ``running`` while output streams,
then ``done`` / ``error`` / … the moment it ends. Once every branch has ended, a judging line
shows the judge (or the strategy) at work with its elapsed time, then how long the verdict took
and who won. The frame redraws itself a few times a second, so timers keep moving while no
event arrives (a judge that does not stream, say).

:class:`JsonLines` writes every event as one JSON object per line, then the result object.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..errors import redact
from ..events import (
    AgentEnd,
    AgentStart,
    MessageUpdate,
    ParallelLoopEnd,
    ParallelLoopStart,
    ToolExecutionStart,
    TurnEnd,
    Warning,
)
from ..types import TextDelta, Usage
from ._output import print_table, trust_line

__all__ = ["MIN_PANEL_WIDTH", "BranchState", "JsonLines", "RaceView", "format_cost"]

MIN_PANEL_WIDTH = 38
_REFRESH_S = 1 / 12
_TICKS_PER_S = 4

_STATUS_STYLE = {
    "queued": "dim",
    "idle": "dim",
    "unverified": "red",
    "over_budget": "red",
    "running": "yellow",
    "done": "green",
    "ok": "green",
    "error": "red",
    "cancelled": "magenta",
    "timeout": "red",
    "rejected": "red",
}
_STATUS_OF_REASON = {
    "completed": "done",
    "error": "error",
    "cancelled": "cancelled",
    "limit": "error",
    "vetoed": "rejected",
    "rejected": "rejected",
}


def format_cost(dollars: float) -> str:
    if dollars == 0:
        return "$0"
    return f"${dollars:.6f}" if dollars < 0.01 else f"${dollars:.4f}"


@dataclass
class BranchState:
    """What the view knows about one branch (or the judge) while the race runs."""

    label: str
    model: str
    loop_id: str = ""
    text: str = ""
    status: str = "queued"
    error: str | None = None
    deltas: int = 0
    usage: Usage = field(default_factory=Usage)
    started: float | None = None
    ended: float | None = None

    @property
    def tokens_out(self) -> int:
        """Output tokens: the provider's count once known, else the streamed deltas so far."""
        return self.usage.output or self.deltas

    def seconds(self, now: float) -> float:
        if self.started is None:
            return 0.0
        return (self.ended or now) - self.started


class RaceView:
    """The sink of a race's events, drawing live (terminal) or plain (pipe) output."""

    def __init__(
        self,
        console: Console,
        branches: list[tuple[str, str]],
        *,
        judge: str | None = None,
        strategy: str | None = None,
        live: bool | None = None,
    ) -> None:
        self.console = console
        self.branches = [BranchState(label, model) for label, model in branches]
        self.by_loop: dict[str, BranchState] = {}
        self.judge = BranchState("judge", judge) if judge else None
        self.strategy = strategy
        self.warnings: list[str] = []
        self.live_mode = console.is_terminal if live is None else live
        self._live: Live | None = None
        self._last_draw = 0.0
        self.evaluating_since: float | None = None
        """When the evaluation began (every branch ended, or the judge started)."""
        self.decided_at: float | None = None
        self.decided_winner: str | None = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> RaceView:
        if self.live_mode:
            self._live = Live(
                console=self.console,
                get_renderable=self.render,
                auto_refresh=True,
                refresh_per_second=_TICKS_PER_S,
                transient=False,
                vertical_overflow="crop",
            )
            self._live.__enter__()
        else:
            names = ", ".join(f"{b.label} ({b.model})" for b in self.branches)
            count = len(self.branches)
            racing = f"{count} branches" if count != 1 else "1 branch"
            self.console.print(f"Racing {racing}: {names}", markup=False, soft_wrap=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(None, None, None)
            self._live = None

    # ------------------------------------------------------------------ events

    def __call__(self, event: Any) -> None:
        now = time.perf_counter()
        if isinstance(event, ParallelLoopStart):
            self.race_started()
            for state, loop_id in zip(self.branches, event.loop_ids, strict=False):
                state.loop_id = loop_id
                self.by_loop[loop_id] = state
        elif isinstance(event, Warning):
            self.warnings.append(event.message)
        elif isinstance(event, ParallelLoopEnd):
            self._decided(event, now)
        else:
            target = self._state_for(event.loop_id)
            if target is not None:
                self._apply(target, event, now)
        self._draw(now, force=not isinstance(event, MessageUpdate))

    def race_started(self) -> None:
        """A (new) race begins: no evaluation yet."""
        self.evaluating_since = self.decided_at = None
        self.decided_winner = None

    def _decided(self, event: ParallelLoopEnd, now: float) -> None:
        if self.evaluating_since is None:
            self.evaluating_since = now
        self.decided_at = now
        chosen = self.by_loop.get(event.selected_loop_id or "")
        self.decided_winner = chosen.label if chosen is not None else None

    def _state_for(self, loop_id: str) -> BranchState | None:
        state = self.by_loop.get(loop_id)
        if state is None and loop_id and self.judge is not None:
            # Any loop that is not a branch is the evaluation (judge calls).
            return self.judge
        return state

    def _apply(self, state: BranchState, event: Any, now: float) -> None:
        if isinstance(event, AgentStart):
            if state.started is None:
                state.started = now
            if state is self.judge:
                state.status = "running"
                state.text = ""
                if self.evaluating_since is None:
                    self.evaluating_since = now
        elif isinstance(event, MessageUpdate | ToolExecutionStart | TurnEnd):
            if state.status == "queued":
                state.status = "running"  # the model answers: no longer waiting for it
            if isinstance(event, MessageUpdate) and isinstance(event.delta, TextDelta):
                state.text += event.delta.text
                state.deltas += 1
            elif isinstance(event, TurnEnd):
                state.usage = state.usage + event.usage
        elif isinstance(event, AgentEnd):
            state.ended = now
            state.status = _STATUS_OF_REASON.get(event.reason, event.reason)
            state.error = event.error
            if event.reason == "cancelled" and event.error:
                why = event.error.removeprefix("cancelled: ")  # the status says "cancelled"
                state.error = why
                # a branch timeout or the race's wall clock: a timeout, as the table and the
                # JSON say
                if why == "timeout":
                    state.status, state.error = "timeout", "it ran past its timeout"
                elif why == "wall-clock budget":
                    state.status = "timeout"
                    state.error = "the race's wall-clock budget (--deadline) ran out"
            if state is not self.judge:
                if not self.live_mode:
                    self._print_branch(state)
                racing = [b for b in self.by_loop.values() if b is not self.judge]
                if self.evaluating_since is None and all(b.ended for b in racing):
                    self.evaluating_since = now

    # ------------------------------------------------------------------ drawing

    def _draw(self, now: float, *, force: bool = False) -> None:
        """Redraw at once on a change of state, at most every ``_REFRESH_S`` for streamed text
        (the frame also redraws itself ``_TICKS_PER_S`` times a second)."""
        if self._live is None or (not force and now - self._last_draw < _REFRESH_S):
            return
        self._last_draw = now
        self._live.refresh()

    def render(self) -> RenderableType:
        """The live frame: branch panels (side by side or stacked) and the judge's status."""
        now = time.perf_counter()
        width = self.console.width
        count = max(1, len(self.branches))
        side_by_side = width // count >= MIN_PANEL_WIDTH
        available = max(6, self.console.height - 8)
        if not side_by_side:
            available = max(4, (self.console.height - 6) // count)
        panel_width = width // count if side_by_side else width
        # Grow with the longest answer so far, up to the room the terminal has.
        needed = max(_wrapped_lines(b.text, panel_width - 4) for b in self.branches) + 3
        height = max(5, min(available, needed))
        panels = [self._panel(b, now, height, panel_width) for b in self.branches]
        parts: list[RenderableType] = []
        if side_by_side:
            grid = Table.grid(expand=True, padding=0)
            for _ in panels:
                grid.add_column(ratio=1)
            grid.add_row(*panels)
            parts.append(grid)
        else:
            parts.extend(panels)
        line = self.evaluation_line(now)
        if line is not None:
            parts.append(line)
        return Group(*parts)

    def evaluation_line(self, now: float) -> Text | None:
        """``judging local:smollm2 · 41 tok · 3.2s`` while the verdict is being reached, then
        ``judged in 5.0s · winner: teacher`` (``None`` while the branches still run)."""
        since = self.evaluating_since
        if since is None:
            return None
        judge = self.judge
        who = judge.model if judge is not None else (self.strategy or "strategy")
        tokens = f" · {judge.tokens_out} tok" if judge is not None and judge.started else ""
        if self.decided_at is None:
            verb = "judging " if judge is not None else "evaluating "
            return Text.assemble(
                (verb, "bold yellow"), (who, "dim"), (f"{tokens} · {now - since:.1f}s", "dim")
            )
        verb = "judged" if judge is not None and judge.started else "decided"
        outcome = (
            (f"winner: {self.decided_winner}", "bold green")
            if self.decided_winner
            else ("no winner", "bold red")
        )
        return Text.assemble(
            (f"{verb} ", "bold"),
            (f"in {self.decided_at - since:.1f}s", ""),
            (f" ({who}{tokens})", "dim"),
            " · ",
            outcome,
        )

    def _panel(self, state: BranchState, now: float, height: int, width: int) -> Panel:
        lines = height - 2
        text = state.text
        if state.error and state.status != "done":
            text = (text + "\n" if text else "") + f"[{state.status}] {state.error}"
        budget = max(1, (width - 4)) * lines
        if len(text) > budget:
            text = "…" + text[-budget:]
        model = f" {state.model}" if state.model != state.label else ""
        title = Text.assemble((state.label, "bold"), (model, "dim"))
        subtitle = Text.assemble(
            (state.status, _STATUS_STYLE.get(state.status, "")),
            (f" · {state.tokens_out} tok · {state.seconds(now):.1f}s", "dim"),
        )
        return Panel(
            Text(text, overflow="fold"),
            title=title,
            subtitle=subtitle,
            height=height,
            border_style=_STATUS_STYLE.get(state.status, ""),
        )

    def _print_branch(self, state: BranchState) -> None:
        header = f"--- {state.label} ({state.model}): {state.status}"
        if state.error and state.status != "done":
            header += f": {state.error}"
        self.console.print(header, markup=False, highlight=False, soft_wrap=True)
        if state.text:
            self.console.print(state.text.strip(), markup=False, highlight=False, soft_wrap=True)

    # ------------------------------------------------------------------ after the race

    def print_interrupted(self) -> None:
        """What had arrived when the race was interrupted (plain mode printed ended branches)."""
        pending = [b for b in self.branches if self.live_mode or b.ended is None]
        for state in pending:
            if state.status in ("queued", "running"):
                state.status = "cancelled"
            if not self.live_mode:
                self._print_branch(state)
        done = [b.label for b in self.branches if b.status == "done"]
        if done:
            cut = sum(b.status == "cancelled" for b in self.branches)
            said = (
                f"Interrupted before the verdict: {cut} of {len(self.branches)} branches were "
                f"cancelled; {', '.join(done)} had finished (no winner was chosen)."
            )
        else:
            said = "Interrupted: every branch was cancelled."
        if self.live_mode:
            self.console.print(f"{said} What had arrived:", markup=False, highlight=False)
            for state in pending:
                self._print_branch(state)
        else:
            self.console.print(said, markup=False, highlight=False, soft_wrap=True)

    def print_verdict(self, result: Any, labels: list[str]) -> None:
        """The winner and why (from the decision object), then the cost table."""
        decision = result.decision
        winner = result.selected
        console = self.console
        console.print()
        if winner is not None:
            console.print(
                Text.assemble(
                    ("Winner: ", "bold"),
                    (labels[winner.config_index], "bold green"),
                    f" (strategy {decision.strategy})",
                )
            )
        else:
            console.print(Text.assemble(("No winner", "bold red"), f" ({decision.strategy})"))
        why = redact(_why(decision, labels))
        # a terminal gets word-wrapped lines; piped output keeps each line whole
        soft = not self.live_mode
        if why:
            console.print(Text("Why: " + why), soft_wrap=soft)
        if winner is not None:
            console.print(Text("Trust: " + trust_line(decision.trust())), soft_wrap=soft)
        for message in self.warnings:
            console.print(Text("warning: " + redact(message), style="yellow"))
        if winner is not None and self.live_mode:
            console.print(Panel(Text(winner.text.strip()), title=f"{labels[winner.config_index]}"))
        print_table(console, cost_table(result, labels))


def _wrapped_lines(text: str, width: int) -> int:
    width = max(1, width)
    return sum(max(1, -(-len(line) // width)) for line in text.split("\n")) if text else 1


def _why(decision: Any, labels: list[str]) -> str:
    parts: list[str] = []
    if decision.scores:
        shown = ", ".join(
            f"{_label(labels, index)} {score:g}" for index, score in sorted(decision.scores.items())
        )
        parts.append(f"scores: {shown}")
    if decision.votes:
        shown = ", ".join(f"{answer!r} ×{count}" for answer, count in decision.votes.items())
        parts.append(f"votes: {shown}")
    if decision.rationale:
        parts.append(decision.rationale.strip())
    if decision.tie:
        parts.append("(a tie, broken by cost, then tokens, then branch order)")
    if decision.fallback:
        parts.append("(the strategy fell back to its default rule)")
    return "; ".join(parts)


def _label(labels: list[str], index: Any) -> str:
    try:
        return labels[int(index)]
    except (ValueError, IndexError):
        return str(index)


def cost_table(result: Any, labels: list[str]) -> Table:
    """Latency, tokens and cost per branch, for the evaluation, and in total."""
    selected = result.decision.index
    rows = [
        (
            ("★ " if o.config_index == selected else "  ") + labels[o.config_index],
            o.config.model_config().spec,
            o,
        )
        for o in result.outcomes
    ]
    decision = result.decision
    judging = (
        (decision.strategy, decision.usage, decision.cost_usd)
        if decision.usage.total or decision.cost_usd
        else None
    )
    return outcome_table(("branch", "model"), rows, judging, result)


def outcome_table(
    columns: tuple[str, str],
    rows: list[tuple[str, str, Any]],
    judging: tuple[str, Any, float] | None,
    result: Any,
) -> Table:
    """The cost table of a race of any kind: one row per outcome (label, second column,
    :class:`~phi_core.outcome.Outcome`), a judging row (what judged, its usage, its cost) and the
    total of ``result`` (its ``status``, ``wall_time_s``, ``total_usage`` or ``usage``, and
    ``cost_usd``)."""
    table = Table(title=None, show_footer=False, expand=False)
    for name, justify in (
        (columns[0], "left"),
        (columns[1], "left"),
        ("status", "left"),
        ("latency", "right"),
        ("tokens in", "right"),
        ("tokens out", "right"),
        ("cost", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for label, second, outcome in rows:
        table.add_row(
            label,
            second,
            Text(outcome.status, style=_STATUS_STYLE.get(outcome.status, "")),
            f"{outcome.latency_s:.2f}s",
            str(outcome.usage.input),
            str(outcome.usage.output),
            format_cost(outcome.cost_usd),
        )
    if judging is not None:
        what, usage, cost = judging
        table.add_row(
            "  judging", what, "", "", str(usage.input), str(usage.output), format_cost(cost)
        )
    total = result.total_usage if hasattr(result, "total_usage") else result.usage
    table.add_section()
    table.add_row(
        "  total",
        "",
        result.status,
        f"{result.wall_time_s:.2f}s",
        str(total.input),
        str(total.output),
        format_cost(result.cost_usd),
        style="bold",
    )
    return table


class JsonLines:
    """Writes each event as one JSON line (``--json``); :meth:`result` writes the last line.
    Secrets are redacted, as in the run log (an endpoint's ``?api_key=``, say)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def __call__(self, event: Any) -> None:
        self.stream.write(redact(event.model_dump_json()) + "\n")
        self.stream.flush()

    def result(self, payload: dict[str, Any]) -> None:
        self.stream.write(redact(json.dumps(payload, ensure_ascii=False)) + "\n")
        self.stream.flush()
