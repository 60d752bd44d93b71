"""A selection run is one ``invoke_workflow select`` span with an ``invoke_agent`` span per
evaluation; observers see exactly one ``SelectionEnd`` whatever ends the run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from phi_core.events import (
    SelectionEnd,
    SelectionEvaluation,
    SelectionStart,
    Warning,
    add_observer,
)
from phi_core.providers.base import ModelConfig
from phi_core.select import MeteredModel, ModelSelector
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Pricing, Usage

from .conftest import Spans

DATASET = [(f"q{i}", "right") for i in range(3)]


def scripted(name: str, answer: str, *, delay: float = 0.0) -> MeteredModel:
    provider = ScriptedProvider(
        name=name, default=Reply(answer, usage=Usage(input=100, output=50), delay=delay)
    )
    config = ModelConfig(
        provider="scripted", id=name, api="scripted", pricing=Pricing(input=1.0, output=2.0)
    )
    return MeteredModel(config, provider=provider)


async def solver(models: dict[str, MeteredModel], question: str) -> str:
    return await models["solver"].complete(question)


def exact(expected: str, actual: str) -> float:
    return float(expected == actual)


def selector(*models: MeteredModel, scorer: Any = exact, agent: Any = solver) -> ModelSelector:
    return ModelSelector(
        agent,
        {"solver": list(models)},
        DATASET,
        scorer,
        algorithm="brute_force",
        cache=False,
        journal=False,
    )


async def test_a_selection_span_parents_one_span_per_evaluation(spans: Spans) -> None:
    result = await selector(scripted("good", "right"), scripted("bad", "wrong")).select_best()

    root = spans.one("invoke_workflow select")
    attributes = dict(root.attributes or {})
    assert attributes["phi.select.algorithm"] == "brute_force"
    assert attributes["phi.select.best"] == result.best.name
    assert attributes["phi.select.evaluations"] == 6
    assert attributes["gen_ai.usage.input_tokens"] == 6 * 100
    assert attributes["gen_ai.usage.output_tokens"] == 6 * 50

    children = spans.children(root)
    assert len(children) == 6
    scores = {
        (c.name, c.attributes["phi.select.datapoint"]): c.attributes["phi.select.score"]  # type: ignore[index]
        for c in children
    }
    good = next(n for n, _ in scores if "good" in n)
    bad = next(n for n, _ in scores if "bad" in n)
    assert all(scores[(good, i)] == 1.0 for i in range(3))
    assert all(scores[(bad, i)] == 0.0 for i in range(3))
    for child in children:
        assert child.attributes["gen_ai.usage.input_tokens"] == 100  # type: ignore[index]
        assert child.attributes["phi.calls"] == 1  # type: ignore[index]
        assert child.start_time is not None and child.end_time is not None
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time  # type: ignore[operator]


async def test_a_failing_scorer_ends_the_selection_span_as_an_error(spans: Spans) -> None:
    def broken(expected: str, actual: str) -> float:
        return 7.0  # outside [0, 1]: a usage error that stops the run

    with pytest.raises(Exception, match="scores must be in"):
        await selector(scripted("good", "right"), scorer=broken).select_best()
    root = spans.one("invoke_workflow select")
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes["phi.select.status"] == "error"  # type: ignore[index]


async def test_observers_see_one_start_and_one_end_even_when_cancelled() -> None:
    seen: list[Any] = []
    remove = add_observer(seen.append)
    try:
        task = asyncio.create_task(
            selector(scripted("slow", "right", delay=30.0), scripted("b", "x")).select_best()
        )
        for _ in range(200):
            await asyncio.sleep(0.01)
            if any(isinstance(e, SelectionStart) for e in seen):
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        remove()
    ends = [e for e in seen if isinstance(e, SelectionEnd)]
    assert [type(e) for e in seen if isinstance(e, SelectionStart | SelectionEnd)] == [
        SelectionStart,
        SelectionEnd,
    ]
    assert ends[0].status == "cancelled"
    assert not [e for e in seen if isinstance(e, SelectionEvaluation) and "slow" in e.combination]


async def test_a_ctrl_c_inside_an_agent_is_one_cancelled_end() -> None:
    seen: list[Any] = []

    async def interrupted(models: dict[str, MeteredModel], question: str) -> str:
        if question == "q1":
            raise KeyboardInterrupt
        return await models["solver"].complete(question)

    remove = add_observer(seen.append)
    try:
        with pytest.raises(KeyboardInterrupt):
            await selector(scripted("a", "right"), agent=interrupted).select_best()
    finally:
        remove()
    ends = [e for e in seen if isinstance(e, SelectionEnd)]
    assert [e.status for e in ends] == ["cancelled"]


async def test_a_selection_warning_reaches_observers_before_the_end() -> None:
    """A warning of the run (here: no call was metered) is a Warning event, then the end."""
    seen: list[Any] = []

    async def offline(models: dict[str, MeteredModel], question: str) -> str:
        return "right"  # never calls a model: the run warns that nothing was metered

    remove = add_observer(seen.append)
    try:
        result = await selector(scripted("a", "right"), agent=offline).select_best()
    finally:
        remove()
    assert result.warnings
    warnings = [e.message for e in seen if isinstance(e, Warning)]
    assert warnings == result.warnings
    assert isinstance(seen[-1], SelectionEnd)
