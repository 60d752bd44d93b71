"""An interrupted selection resumes from its journal: finished cells are not run again and the
result is the uninterrupted run's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from phi_core.errors import StateStoreError, UserError
from phi_core.select import ModelSelector
from tests.select.agents import Counting
from tests.select.llm_server import SKILL as SERVER_SKILL
from tests.select.llm_server import answer
from tests.select.test_cache import set_aside

DATASET = [(i, "right") for i in range(40)]
MODELS = {"solver": ["m1", "m2", "m3", "m4"]}
SERVER_SKILL.update({"m1": 0.55, "m2": 0.65, "m3": 0.7, "m4": 0.72})


def counting(stop_after: int | None = None) -> Counting:
    """The server's skill table as an agent (see ``llm_server.answer``)."""
    return Counting(lambda solver, q: answer(solver, str(q)), stop_after)


def exact(expected: str, actual: str) -> float:
    return float(expected == actual)


def selector(agent: Any, journal: Path | bool, seed: int = 3) -> ModelSelector:
    return ModelSelector(
        agent,
        MODELS,
        DATASET,
        exact,
        algorithm="arm_elimination",
        max_concurrent=4,
        seed=seed,
        cache=False,
        model_handles=False,
        journal=journal,
    )


async def test_an_interrupted_run_resumes_where_it_stopped(
    tmp_path: Path, strict_loop: Any
) -> None:
    journal = tmp_path / "runs.sqlite"
    reference_agent = counting()
    reference = await selector(reference_agent, journal=False).select_best()

    assert len(reference_agent.runs) >= 60  # long enough to interrupt in the middle
    first = counting(stop_after=len(reference_agent.runs) // 2)
    task = asyncio.create_task(selector(first, journal).select_best())
    await first.reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(first.runs) < len(reference_agent.runs)

    second = counting()
    resumed = await selector(second, journal).select_best(resume=True)
    # cells finished before the interruption were not run again
    assert resumed.resumed >= len(reference_agent.runs) // 2 - 4
    assert len(set(second.runs) & set(first.runs)) <= 4  # at most those in flight at the cut
    assert len(second.runs) + resumed.resumed == len(reference_agent.runs)
    assert resumed.best.name == reference.best.name
    assert resumed.evaluations == reference.evaluations
    assert [(c.name, c.accuracy, c.evaluations) for c in resumed.combinations] == [
        (c.name, c.accuracy, c.evaluations) for c in reference.combinations
    ]


async def test_a_finished_run_resumes_for_free_and_other_settings_start_over(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "runs.sqlite"
    await selector(counting(), journal).select_best()
    again = counting()
    replayed = await selector(again, journal).select_best(resume=True)
    assert again.runs == [] and replayed.resumed == replayed.evaluations
    assert not [w for w in replayed.warnings if "Nothing was resumed" in w]
    other_seed = counting()
    fresh = await selector(other_seed, journal, seed=4).select_best(resume=True)
    assert fresh.resumed == 0 and len(other_seed.runs) == fresh.evaluations
    # a resume that finds nothing says so (a changed setting starts over)
    (warning,) = [w for w in fresh.warnings if "Nothing was resumed" in w]
    assert "same combinations (the same models and endpoints behind their names)" in warning
    assert "agent and scorer (code and prompts included), seed" in warning


async def test_resume_needs_the_journal() -> None:
    with pytest.raises(UserError, match="resume=True needs the run journal"):
        await selector(counting(), journal=False).select_best(resume=True)


async def test_an_unwritable_journal_is_a_warning_not_a_failed_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = await selector(counting(), journal=blocker / "runs.sqlite").select_best()
    assert result.evaluations > 0
    assert any("cannot be resumed" in r.message for r in caplog.records)


async def test_a_damaged_journal_is_moved_aside_and_the_next_run_can_resume(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "runs.sqlite"
    journal.write_bytes(b"\x00garbage" * 500)
    first = await selector(counting(), journal).select_best()
    assert set_aside(tmp_path, "runs.sqlite") == [b"\x00garbage" * 500]
    (warning,) = [w for w in first.warnings if "was not a database" in w]
    assert warning.startswith(f"The run journal {journal} was not a database: it was moved to ")
    again = counting()
    replayed = await selector(again, journal).select_best(resume=True)
    assert again.runs == [] and replayed.resumed == first.evaluations


async def test_resuming_from_a_journal_that_cannot_be_read_stops_before_running_anything(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")
    agent = counting()
    with pytest.raises(StateStoreError, match=r"Cannot resume: the run journal .*runs\.sqlite"):
        await selector(agent, journal=blocker / "runs.sqlite").select_best(resume=True)
    assert agent.runs == []


def run_id(agent: Any, models: dict[str, list[Any]], journal: Path) -> str:
    """The identity a selection's journal keeps its cells under."""
    from phi_core.select import make_algorithm

    chosen = ModelSelector(agent, models, DATASET, exact, seed=3, cache=False, journal=journal)
    opened = chosen._journal(make_algorithm("brute_force"))
    assert opened is not None
    return opened.run


def test_a_run_is_another_run_when_its_prompts_or_a_models_endpoint_change(
    tmp_path: Path,
) -> None:
    from phi_core.config import prompt_chain
    from phi_core.select import MeteredModel

    journal = tmp_path / "runs.sqlite"
    ask = prompt_chain({"solver": "Answer: {input}"})
    models = {"solver": ["openai-compat:m@http://127.0.0.1:9/v1"]}
    same = run_id(prompt_chain({"solver": "Answer: {input}"}), models, journal)
    assert run_id(ask, models, journal) == same  # the same spec resumes
    assert run_id(prompt_chain({"solver": "Reply: {input}"}), models, journal) != same
    # one name ("fast", as an alias gives) for a model at another endpoint
    here = MeteredModel("openai-compat:m@http://127.0.0.1:9/v1", name="fast")
    there = MeteredModel("openai-compat:m@http://127.0.0.1:8/v1", name="fast")
    assert run_id(ask, {"solver": [here]}, journal) != run_id(ask, {"solver": [there]}, journal)
    cooler = MeteredModel("openai-compat:m@http://127.0.0.1:9/v1", name="fast", temperature=0.1)
    assert run_id(ask, {"solver": [here]}, journal) != run_id(ask, {"solver": [cooler]}, journal)
