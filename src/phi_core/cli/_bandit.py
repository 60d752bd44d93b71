"""``phi race --strategy bandit``: the bandit race behind the ``race`` command.

The plan (:func:`phi_core.config.plan_race`) becomes a bandit race through the one seam,
:func:`phi_core.config.bandit_race_from_plan`. Each branch is an arm named by its label (so three
configurations of one model are three arms); the router state, preview cache and latency history persist between runs (``--state``, default
``router_state.sqlite`` in the user directory). The terminal shows the same live side-by-side view
as ``phi race`` — each arm's preview, then its answer, the router's decision, a judging line — and
ends with the verdict and the cost table; ``--json`` streams every event, then the result.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..events import ParallelLoopStart, RouteDecision, RouteUpdate
from ..race.pipeline import BanditRace, BanditRaceResult
from ..types import Usage
from ._common import warn
from ._output import print_table
from ._view import BranchState, RaceView, outcome_table

__all__ = ["BanditView", "bandit_exit_code", "flush_router_updates"]


class _ArmState(BranchState):
    """An arm's panel: its preview, then its answer."""

    phase: str = ""
    preview: str = ""


class BanditView(RaceView):
    """The live (or plain) view of a bandit race; see the module docstring."""

    def __init__(self, console: Console, race: BanditRace, *, live: bool | None = None) -> None:
        arms = [(name, arm.config.model_config().spec) for name, arm in race.arms.items()]
        judge = race.judge.model_config().spec if race.judge is not None else None
        super().__init__(console, arms, judge=judge, live=live)
        self.branches = [_ArmState(label, model) for label, model in arms]
        self.by_id = {race.config_ids[b.label]: b for b in self.branches}
        self.decision: RouteDecision | None = None
        self.update: RouteUpdate | None = None

    def __call__(self, event: Any) -> None:
        if isinstance(event, RouteDecision):
            self.decision = event
            for state in self.branches:
                if state.label not in event.contenders and state.status == "queued":
                    state.status = "idle"
            if not self.live_mode:
                self.console.print(_route_line(event), soft_wrap=True)
        elif isinstance(event, RouteUpdate):
            self.update = event
        elif isinstance(event, ParallelLoopStart):
            self.race_started()
            for loop_id, config_id in zip(event.loop_ids, event.config_ids, strict=False):
                arm = self.by_id.get(config_id)
                if not isinstance(arm, _ArmState):
                    continue
                if event.label == "answer" and arm.phase == "preview":
                    arm.preview, arm.text = arm.text, ""
                    arm.usage = type(arm.usage)()
                    arm.deltas, arm.started, arm.ended = 0, None, None
                arm.phase = event.label or ""
                arm.status = "queued"
                arm.loop_id = loop_id
                self.by_loop[loop_id] = arm
            self._draw(time.perf_counter())
            return
        super().__call__(event)

    def render(self) -> RenderableType:
        group = super().render()
        if self.decision is not None and self.live_mode:
            return Group(_route_line(self.decision), group)
        return group

    def _panel(self, state: BranchState, now: float, height: int, width: int) -> Any:
        panel = super()._panel(state, now, height, width)
        phase = getattr(state, "phase", "")
        if phase:
            panel.title = Text.assemble(panel.title or "", (f" · {phase}", "dim"))
        return panel

    def _print_branch(self, state: BranchState) -> None:
        phase = getattr(state, "phase", "")
        label = f"{state.label} {phase}" if phase else state.label
        header = f"--- {label} ({state.model}): {state.status}"
        if state.error and state.status != "done":
            header += f": {state.error}"
        self.console.print(header, markup=False, highlight=False, soft_wrap=True)
        if state.text:
            self.console.print(state.text.strip(), markup=False, highlight=False, soft_wrap=True)

    def print_bandit_verdict(self, result: BanditRaceResult) -> None:
        console = self.console
        console.print()
        if result.winner is not None:
            checked = {True: " · verified", False: " · NOT verified", None: ""}[result.verified]
            quality = f" · quality {result.quality:.2f}" if result.quality is not None else ""
            console.print(
                Text.assemble(
                    ("Winner: ", "bold"),
                    (result.winner, "bold green"),
                    f" ({_ACTIONS[result.action]}){quality}{checked}",
                )
            )
        else:
            console.print(Text.assemble(("No answer", "bold red"), f" ({result.status})"))
        if result.error:
            console.print(Text("Why: " + result.error), soft_wrap=True)
        elif result.scores:
            shown = ", ".join(f"{a} {s:.2f}" for a, s in result.scores.items())
            console.print(Text(f"Why: preview scores {shown}; order {', '.join(result.order)}"))
        if result.verified is False:
            console.print(Text("No answer passed --verify; showing the first one.", style="yellow"))
        for message in self.warnings:
            console.print(Text("warning: " + message, style="yellow"))
        if result.rewards:
            learned = ", ".join(f"{a} {r.reward:+.3f}" for a, r in result.rewards.items())
            console.print(Text(f"Learned: {learned}", style="dim"))
        if result.winner is not None and self.live_mode:
            from rich.panel import Panel

            console.print(Panel(Text(result.text.strip()), title=result.winner))
        print_table(console, bandit_cost_table(result))


_ACTIONS = {
    "race": "previews judged, the best answered",
    "sure": "the router was sure: no race",
    "single": "the router's choice",
    "baseline": "baseline order, previews judged",
}


def _route_line(event: RouteDecision) -> Text:
    top = ", ".join(
        f"{row['arm']} {row['mean']:.2f}±{row['width']:.2f}" for row in event.ranking[:4]
    )
    return Text.assemble(
        ("route ", "bold"),
        (f"{event.action}: ", "cyan"),
        (event.reason, ""),
        (f"  [{top}]", "dim"),
    )


def bandit_cost_table(result: BanditRaceResult) -> Table:
    """Latency, tokens and cost per preview and answer, for the judge, and in total."""
    phases = [("preview", o) for o in (result.previews.outcomes if result.previews else [])]
    phases += [("answer", o) for o in result.answers]
    rows = [
        (
            ("★ " if o is result.answer else "  ") + str(o.config.extra.get("arm", o.config_id)),
            phase,
            o,
        )
        for phase, o in phases
    ]
    judged = [d for d in (result.previews.decision if result.previews else None, result.grade) if d]
    judging = (
        ("rubric", sum((d.usage for d in judged), Usage()), sum(d.cost_usd for d in judged))
        if judged
        else None
    )
    return outcome_table(("arm", "call"), rows, judging, result)


def bandit_exit_code(result: BanditRaceResult, interrupted: bool) -> int:
    """0 for a (verified, when checked) answer; 1 for no answer or an unverified one; 130 when
    interrupted."""
    if interrupted or result.status == "cancelled":
        return 130
    if result.status != "ok" or result.verified is False:
        return 1
    return 0


async def flush_router_updates(race: BanditRace) -> None:
    """Push the updates a Redis state kept while unreachable; warn about any still waiting
    (where they are kept, if the store spools them)."""
    waiting = await race.flush_state()
    if not waiting:
        return
    spool = getattr(race.store, "spool_path", None)
    if spool is not None:
        warn(
            f"{waiting} router update(s) could not be stored yet: the router state is "
            f"unreachable. They are kept in {spool}, and the next run with this state pushes "
            "them once it answers."
        )
    else:
        warn(
            f"{waiting} router update(s) could not be stored: the router state is unreachable, "
            "and they are lost when this command exits."
        )
