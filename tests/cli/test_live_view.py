"""The live race view tells the truth at every moment: queued, running and done branches, a
judging line with elapsed time while the verdict is reached, then who won."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from phi_core.cli._bandit import BanditView
from phi_core.cli._view import RaceView
from phi_core.config import bandit_race_from_plan, plan_race
from phi_core.events import AgentEnd, AgentStart, ParallelLoopEnd, ParallelLoopStart, tee
from phi_core.race import BanditOptions
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Usage


def frame_text(view: RaceView, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, height=40, force_terminal=True, color_system=None).print(
        view.render()
    )
    return out.getvalue()


class Frames:
    """Renders the view after every event (what the terminal would show at that moment)."""

    def __init__(self, view: RaceView, width: int) -> None:
        self.view = view
        self.width = width
        self.frames: list[tuple[str, str]] = []

    def __call__(self, event: Any) -> None:
        self.frames.append((event.type, frame_text(self.view, self.width)))

    def after(self, kind: str) -> list[str]:
        return [text for t, text in self.frames if t == kind]


def scripted(name: str, text: str, delay: float = 0.0) -> ScriptedProvider:
    return ScriptedProvider(
        name=name,
        default=Reply(text, chunks=2, delay=delay, usage=Usage(input=5, output=7)),
    )


@pytest.mark.parametrize("width", [80, 160])
async def test_a_race_reads_queued_running_done_then_judging_then_the_winner(width: int) -> None:
    plan = plan_race(
        models=["scripted:a", "scripted:b"],
        judge="scripted:judge",
        max_concurrency=1,  # b waits for a's slot: it must read queued, not running
        providers={
            "scripted:a": scripted("a", "Answer from A."),
            "scripted:b": scripted("b", "Answer from B."),
            "scripted:judge": scripted("judge", "2", delay=0.05),
        },
    )
    console = Console(file=io.StringIO(), width=width, force_terminal=True)
    view = RaceView(
        console,
        [(b.label, b.model) for b in plan.branches],
        judge="scripted:judge",
        strategy=plan.strategy,
        live=False,
    )
    frames = Frames(view, width)
    await plan.run("Which?", events=tee(view, frames))

    first_delta = frames.after("message_update")[0]
    assert "running" in first_delta and "queued" in first_delta  # a streams, b waits
    a_done = frames.after("agent_end")[0]
    assert "done" in a_done and "queued" in a_done and "running" not in a_done
    assert "judging" not in a_done  # b has not run yet
    judging = [f for f in frames.after("agent_start") if "judging" in f]
    assert judging, "a judging line appears once the judge starts"
    assert "judging scripted:judge" in judging[0] and "s" in judging[0].split("judging")[1]
    assert judging[0].count("done") == 2  # both branches read done while the judge runs
    final = frames.after("parallel_loop_end")[-1]
    assert "judged in" in final and "winner: scripted:b" in final
    assert "running" not in final and "queued" not in final
    assert all(max(map(len, text.splitlines())) <= width for _, text in frames.frames)


def test_the_judging_line_counts_up_while_no_event_arrives() -> None:
    view = RaceView(
        Console(file=io.StringIO(), force_terminal=True),
        [("a", "m:a")],
        judge="m:judge",
        live=False,
    )
    view(ParallelLoopStart(loop_id="s", session_id="s", loop_ids=["s.a.1"]))
    view(AgentStart(loop_id="s.a.1", agent_id="x", session_id="s"))
    view(AgentEnd(loop_id="s.a.1"))
    since = view.evaluating_since
    assert since is not None
    first = view.evaluation_line(since + 1.0)
    later = view.evaluation_line(since + 4.5)
    assert first is not None and later is not None
    assert "evaluating" not in first.plain and "judging m:judge" in first.plain
    assert first.plain.endswith("1.0s") and later.plain.endswith("4.5s")


def test_a_strategy_without_a_judge_reads_evaluating_then_decided() -> None:
    view = RaceView(
        Console(file=io.StringIO(), force_terminal=True),
        [("a", "m:a")],
        strategy="exec-vote",
        live=False,
    )
    view(ParallelLoopStart(loop_id="s", session_id="s", loop_ids=["s.a.1"]))
    view(AgentEnd(loop_id="s.a.1"))
    assert view.evaluating_since is not None
    line = view.evaluation_line(view.evaluating_since + 2)
    assert line is not None and line.plain.startswith("evaluating exec-vote")
    view(ParallelLoopEnd(session_id="s", selected_loop_id="s.a.1", selected_config_index=0))
    done = view.evaluation_line(0)
    assert done is not None and done.plain.startswith("decided in") and "winner: a" in done.plain


def test_the_bandit_view_starts_each_race_without_a_stale_verdict(tmp_path: Path) -> None:
    plan = plan_race(
        models=["scripted:a", "scripted:b"],
        strategy="bandit",
        bandit=BanditOptions(state=str(tmp_path / "router.sqlite")),
        providers={"scripted:a": scripted("a", "A"), "scripted:b": scripted("b", "B")},
    )
    view = BanditView(
        Console(file=io.StringIO(), force_terminal=True), bandit_race_from_plan(plan), live=False
    )
    view(ParallelLoopStart(loop_id="s", session_id="s", loop_ids=["s.a.1"], label="preview"))
    view(ParallelLoopEnd(session_id="s", selected_loop_id="s.a.1", selected_config_index=0))
    assert view.evaluation_line(3.0) is not None  # the preview race was decided
    view(ParallelLoopStart(loop_id="s", session_id="s", loop_ids=["s.a.2"], label="answer"))
    assert view.evaluation_line(3.0) is None  # the answer race has no verdict yet


@pytest.mark.parametrize("live", [True, False])
async def test_the_verdict_wraps_at_words_on_a_terminal_and_stays_whole_when_piped(
    live: bool,
) -> None:
    plan = plan_race(
        models=["scripted:a", "scripted:b"],
        judge="scripted:judge",
        providers={
            "scripted:a": scripted("a", "Answer from A."),
            "scripted:b": scripted("b", "Answer from B."),
            "scripted:judge": scripted("judge", "2"),
        },
    )
    result = await plan.run("Which?")
    out = io.StringIO()
    width = 40
    view = RaceView(
        Console(file=out, width=width, force_terminal=live, color_system=None),
        [(b.label, b.model) for b in plan.branches],
        judge="scripted:judge",
        strategy=plan.strategy,
        live=live,
    )
    view.print_verdict(result, [b.label for b in plan.branches])
    lines = out.getvalue().splitlines()
    why_at = next(i for i, line in enumerate(lines) if line.startswith("Why: "))
    trust_at = next(i for i, line in enumerate(lines) if line.startswith("Trust: "))
    why = " ".join(line.strip() for line in lines[why_at:trust_at])
    assert len(why) > width  # long enough to need wrapping
    if live:
        assert trust_at - why_at > 1 and all(len(line) <= width for line in lines[why_at:trust_at])
        # wrapped between words: every line ends on a whole word of the one-line text
        piped = io.StringIO()
        RaceView(Console(file=piped, width=width), [], live=False).print_verdict(
            result, [b.label for b in plan.branches]
        )
        whole = next(line for line in piped.getvalue().splitlines() if line.startswith("Why: "))
        assert why == whole
    else:
        assert trust_at - why_at == 1  # one line, however wide
