"""With content capture off, no model-written text reaches a span; a race span's status is
the race's own.

Defects covered: a judge whose reply was unusable left a ``phi.warning`` span event quoting the
reply verbatim (and with it, possibly, a branch's answer) although content capture was off; and
the race span guessed ``all_failed`` for every race without a winner: a strategy that raised
over two successful branches, or a race whose every branch was over budget.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from phi_core.errors import ServerError
from phi_core.events import Emitter, ParallelLoopEnd, ParallelLoopStart, Warning
from phi_core.loop import AgentContext
from phi_core.metering import Budget
from phi_core.parallel import (
    EvaluationDecision,
    LlmJudgeEvaluation,
    PickFirstEvaluation,
    RubricJudgeEvaluation,
    agent_loop_parallel,
)
from phi_core.testing import Fail, Reply

from ..parallel.helpers import Recorder, answer, branch
from .conftest import Spans

SECRET = "TOPSECRET-ANSWER-CONTENT"
KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"


def judges() -> list[Any]:
    garbage = f"JUDGE-GARBAGE {SECRET}"
    return [
        LlmJudgeEvaluation(branch(default=Reply(garbage), name="judge")),
        RubricJudgeEvaluation(branch(default=Reply(garbage), name="judge")),
    ]


async def race_with_garbage_judge(strategy: Any, recorder: Recorder) -> None:
    result = await agent_loop_parallel(
        "Which one?",
        AgentContext(session_id="ses"),
        [branch(answer(f"{SECRET} one"), name="a"), branch(answer(f"{SECRET} two"), name="b")],
        strategy,
        events=recorder,
    )
    assert result.decision.fallback and result.selected_index == 0


def warnings_on(span: ReadableSpan) -> list[str]:
    return [
        str((e.attributes or {}).get("phi.message")) for e in span.events if e.name == "phi.warning"
    ]


@pytest.mark.parametrize("strategy", judges(), ids=["judge", "rubric"])
async def test_a_judge_reply_quoted_by_a_warning_stays_off_spans(
    spans: Spans, strategy: Any
) -> None:
    recorder = Recorder()
    await race_with_garbage_judge(strategy, recorder)
    assert SECRET not in spans.everything_said()
    assert "JUDGE-GARBAGE" not in spans.everything_said()
    (said,) = warnings_on(spans.one("invoke_workflow race"))
    assert said.startswith(f"{strategy.name} strategy fell back: ")
    assert "the judge's reply" in said and "fell back to the first successful branch" in said
    # the caller (the CLI) still reads the reply in the warning itself
    (warning,) = recorder.of_type("warning")
    assert isinstance(warning, Warning)
    assert f"JUDGE-GARBAGE {SECRET}" in warning.message
    assert warning.message_without_content == said


@pytest.mark.parametrize("strategy", judges(), ids=["judge", "rubric"])
async def test_with_content_capture_the_warning_quotes_the_reply(
    spans_with_content: Spans, strategy: Any
) -> None:
    await race_with_garbage_judge(strategy, Recorder())
    (said,) = warnings_on(spans_with_content.one("invoke_workflow race"))
    assert f"JUDGE-GARBAGE {SECRET}" in said


async def test_a_warning_quoting_nothing_is_recorded_as_it_is(spans: Spans) -> None:
    """A judge run that failed is an error description, not content: said as before."""
    recorder = Recorder()
    await agent_loop_parallel(
        "Which one?",
        AgentContext(session_id="ses"),
        [branch(answer("A"), name="a"), branch(answer("B"), name="b")],
        LlmJudgeEvaluation(branch(default=Fail(ServerError("judge down", status=503)))),
        events=recorder,
    )
    (warning,) = recorder.of_type("warning")
    assert warning.message_without_content is None
    (said,) = warnings_on(spans.one("invoke_workflow race"))
    assert said == warning.message and "judge down" in said


class Raises:
    name = "raises"

    async def evaluate(self, *args: Any, **kwargs: Any) -> EvaluationDecision:
        raise RuntimeError(f"strategy exploded with {KEY}")


async def test_a_strategy_that_raises_falls_back_and_its_text_stays_off_spans(
    spans: Spans,
) -> None:
    """A strategy that raises (a parser bug on a hostile reply) no longer ends the race: it
    falls back to the first successful branch with a warning, whose exception text (it may
    quote content, here a key) stays off the spans when content capture is off."""
    recorder = Recorder()
    result = await agent_loop_parallel(
        "Hi",
        AgentContext(session_id="ses"),
        [branch(answer("A"), name="a"), branch(answer("B"), name="b")],
        Raises(),
        events=recorder,
    )
    assert result.status == "ok" and result.decision is not None and result.decision.fallback
    (warning,) = recorder.of_type("warning")
    assert "RuntimeError" in warning.message and KEY not in warning.message  # redacted
    assert warning.message_without_content is not None
    assert "strategy exploded" not in warning.message_without_content
    race = spans.one("invoke_workflow race")
    assert dict(race.attributes or {})["phi.race.status"] == "ok"
    (said,) = warnings_on(race)
    assert said == warning.message_without_content and KEY not in spans.everything_said()


async def test_a_race_every_branch_of_which_was_over_budget_says_over_budget(
    spans: Spans,
) -> None:
    result = await agent_loop_parallel(
        "Hi",
        AgentContext(session_id="ses"),
        [branch(answer("A"), name="a", max_tokens=5)],
        PickFirstEvaluation(),
        budget=Budget(max_tokens=3),
    )
    assert result.status == "over_budget"
    attributes = dict(spans.one("invoke_workflow race").attributes or {})
    assert attributes["phi.race.status"] == attributes["error.type"] == "over_budget"


async def test_a_race_with_a_winner_is_ok(spans: Spans) -> None:
    await agent_loop_parallel(
        "Hi",
        AgentContext(session_id="ses"),
        [branch(answer("A"), name="a"), branch(answer("B"), name="b")],
        PickFirstEvaluation(),
    )
    race = spans.one("invoke_workflow race")
    attributes = dict(race.attributes or {})
    assert attributes["phi.race.status"] == "ok" and "error.type" not in attributes


async def test_an_end_without_a_status_from_an_older_record_is_still_read(spans: Spans) -> None:
    """A ParallelLoopEnd written before it carried a status: the span infers one, as before."""
    emitter = Emitter(None)
    emitter.emit(ParallelLoopStart(loop_id="old", session_id="old", loop_ids=["old.a.1"]))
    emitter.emit(
        ParallelLoopEnd(session_id="old", selected_loop_id=None, selected_config_index=None)
    )
    attributes = dict(spans.one("invoke_workflow race").attributes or {})
    assert attributes["phi.race.status"] == attributes["error.type"] == "all_failed"
