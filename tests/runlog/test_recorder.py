"""The run log as a sink of the one event stream plus the final result: races, bandit races,
single runs and selections are recorded whole, and a broken log never breaks a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from phi_core.config import plan_race
from phi_core.errors import AuthError
from phi_core.events import Warning, tee
from phi_core.loop import AgentContext, AgentLoopConfig, LoopResult, agent_loop
from phi_core.race import BanditOptions
from phi_core.runlog import RunLog, RunRecorder
from phi_core.testing import Fail, Reply, ScriptedProvider
from phi_core.types import AssistantMessage, TextContent, Usage, UserMessage

from ..select.agents import good_and_bad_selector

RUBRIC = json.dumps(
    {
        "scores": [
            {"answer": 1, "reason": "r", "relevance": 0.9, "coverage": 0.9, "faithfulness": 0.9},
            {"answer": 2, "reason": "r", "relevance": 0.2, "coverage": 0.2, "faithfulness": 0.2},
        ]
    }
)


def providers(**replies: Any) -> dict[str, ScriptedProvider]:
    return {
        f"scripted:{name}": ScriptedProvider(name=name, default=reply)
        for name, reply in replies.items()
    }


@pytest.fixture
def log(tmp_path: Path) -> RunLog:
    with RunLog(tmp_path / "logs.db") as opened:
        yield opened


async def test_a_judged_race_is_recorded_with_branches_verdict_and_the_winners_history(
    log: RunLog,
) -> None:
    plan = plan_race(
        models=["scripted:a", "scripted:b@temperature=0.3"],
        judge="scripted:judge",
        providers=providers(
            a=Reply("A: short.", usage=Usage(input=10, output=3)),
            b=Reply("B: the better answer.", usage=Usage(input=10, output=5)),
            judge=Reply("2"),
        ),
    )
    recorder = RunRecorder(log, prompt="Explain entanglement.", plan=plan, conversation_id="c1")
    result = await plan.run("Explain entanglement.", events=recorder)
    written = recorder.finish(result)
    record = log.get_run(written.id)

    assert record.kind == "race" and record.strategy == "judge" and record.status == "ok"
    assert record.conversation_id == "c1"
    assert record.winner == "scripted:b@temperature=0.3" and record.winner_model == "scripted:b"
    assert record.text == "B: the better answer."
    assert [(b.label, b.status, b.text, b.winner) for b in record.branches] == [
        ("scripted:a", "ok", "A: short.", False),
        ("scripted:b@temperature=0.3", "ok", "B: the better answer.", True),
    ]
    assert record.branches[1].score == 1.0 and record.branches[0].output_tokens == 3
    assert record.verdict is not None
    assert record.verdict["judge"] == "scripted:judge" and record.verdict["rationale"]
    # The branch specs are what a continuation races again.
    assert record.plan is not None and record.plan["branches"][1] == {
        "model": "scripted:b",
        "temperature": 0.3,
    }
    history = record.history()
    assert [m.role for m in history] == ["user", "assistant"]
    assert isinstance(history[1], AssistantMessage) and history[1].text == record.text
    assert record.input_tokens == result.total_usage.input  # the judge's tokens included


async def test_a_failed_branch_keeps_its_error_and_its_kind(log: RunLog) -> None:
    plan = plan_race(
        models=["scripted:a", "scripted:b"],
        strategy="pick-first",
        providers={
            "scripted:a": ScriptedProvider(
                [Fail(AuthError("bad credentials", status=401))], name="a"
            ),
            "scripted:b": ScriptedProvider(name="b", default=Reply("fine")),
        },
    )
    recorder = RunRecorder(log, prompt="Q", plan=plan)
    record = recorder.finish(await plan.run("Q", events=recorder))
    failed = record.branches[0]
    assert failed.status == "error" and failed.error_kind == "auth"
    assert failed.error is not None and "bad credentials" in failed.error
    assert (
        record.winner == "scripted:b" and log.get_run(record.id).branches[0].error == failed.error
    )


async def test_a_bandit_race_records_router_decisions_updates_and_phases(
    log: RunLog, tmp_path: Path
) -> None:
    plan = plan_race(
        models=["scripted:a", "scripted:b"],
        judge="scripted:judge",
        strategy="bandit",
        bandit=BanditOptions(state=str(tmp_path / "router.sqlite"), top_k=2),
        providers=providers(a=Reply("Answer A."), b=Reply("Answer B."), judge=Reply(RUBRIC)),
    )
    recorder = RunRecorder(log, prompt="Which?", plan=plan)
    result = await plan.run("Which?", events=recorder)
    record = log.get_run(recorder.finish(result).id)

    assert record.kind == "bandit" and record.status == "ok"
    assert [e.type for e in record.route_events] == ["route_decision", "route_update"]
    decision = record.route_events[0]
    assert decision.action == "race" and decision.payload["ranking"]
    assert {b.phase for b in record.branches} == {"preview", "answer"}
    assert sum(b.winner for b in record.branches) == 1
    assert record.verdict is not None and set(record.verdict["rewards"]) == {
        "scripted:a",
        "scripted:b",
    }
    assert [e.namespace for e in log.route_events()] == [decision.namespace] * 2
    # What a continuation starts from: the question and the whole answer, nothing internal.
    assert [m.role for m in record.history()] == ["user", "assistant"]


async def test_a_single_run_records_its_whole_conversation(log: RunLog) -> None:
    provider = ScriptedProvider(name="a", default=Reply("Paris."))
    config = AgentLoopConfig(model="scripted:a", provider=provider, system_prompt="Be brief.")
    earlier = [
        UserMessage.text("Hi"),
        AssistantMessage(content=[TextContent(text="Hello!")]),
    ]
    context = AgentContext(messages=list(earlier))
    recorder = RunRecorder(
        log, prompt="Capital of France?", system="Be brief.", branches=[{"model": "scripted:a"}]
    )
    result = await agent_loop("Capital of France?", context, config, events=recorder)
    record = log.get_run(recorder.finish(result, context=context).id)
    assert record.kind == "run" and record.status == "ok" and record.system == "Be brief."
    assert [m.role for m in record.history()] == ["user", "assistant", "user", "assistant"]
    assert record.branches[0].model == "scripted:a" and record.branches[0].winner


async def test_a_selection_is_recorded_with_every_combination(log: RunLog) -> None:
    result = await good_and_bad_selector().select_best()
    recorder = RunRecorder(log, prompt="phi select spec.toml")
    record = log.get_run(recorder.finish(result).id)
    assert record.kind == "select" and record.strategy == "brute_force"
    assert record.winner == result.best.name
    assert {b.label: b.score for b in record.branches} == {
        c.name: c.accuracy for c in result.combinations
    }
    assert record.verdict is not None and record.verdict["evaluations"] == 8
    assert record.status == "ok"
    # a selection its budget stopped is recorded in the races' word for it
    stopped = await good_and_bad_selector(max_evaluations=3).select_best()
    assert stopped.status == "over_budget"
    again = RunRecorder(log, prompt="phi select spec.toml")
    assert log.get_run(again.finish(stopped).id).status == "over_budget"


async def test_a_log_that_cannot_be_written_never_fails_the_finished_run(tmp_path: Path) -> None:
    log = RunLog(tmp_path / "logs.db")
    plan = plan_race(
        models=["scripted:a"], strategy="pick-first", providers=providers(a=Reply("ok"))
    )
    recorder = RunRecorder(log, prompt="Q", plan=plan)
    result = await plan.run("Q", events=recorder)
    log.close()  # the database went away under the run
    record = recorder.finish(result)
    assert record.text == "ok" and recorder.error is not None


async def test_a_sink_that_raises_beside_the_recorder_does_not_stop_it(log: RunLog) -> None:
    plan = plan_race(
        models=["scripted:a"], strategy="pick-first", providers=providers(a=Reply("ok"))
    )
    recorder = RunRecorder(log, prompt="Q", plan=plan)

    def broken(event: Any) -> None:
        raise RuntimeError("view crashed")

    result = await plan.run("Q", events=tee(broken, recorder))
    record = recorder.finish(result)
    assert record.text == "ok"
    assert set(recorder.ends) == set(result.loop_ids)  # every branch's end reached it


def test_warnings_in_the_stream_are_kept_with_the_run(log: RunLog) -> None:
    recorder = RunRecorder(log, prompt="Q", branches=[{"model": "scripted:a"}])
    recorder(Warning(loop_id="x", message="compaction failed; continuing uncompacted"))
    record = recorder.finish(LoopResult(loop_id="x", reason="error", error="boom"))
    assert log.get_run(record.id).warnings == ["compaction failed; continuing uncompacted"]
    assert record.messages is None  # a failed run leaves nothing to continue from
