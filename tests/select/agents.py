"""Pure-Python agents for selection tests: no model call, so every run is counted and cheap;
and the smallest selection over scripted model handles."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from phi_core.providers.base import ModelConfig
from phi_core.select import MeteredModel, ModelSelector
from phi_core.testing import Reply, ScriptedProvider


class Counting:
    """An async agent answering ``answer(solver, question)``; logs every run and sets
    :attr:`reached` after ``stop_after`` of them (a test cancels the selection there)."""

    def __init__(self, answer: Callable[[str, int], str], stop_after: int | None = None) -> None:
        self.answer = answer
        self.runs: list[tuple[str, int]] = []
        self.stop_after = stop_after
        self.reached = asyncio.Event()

    async def __call__(self, models: dict[str, str], question: int) -> str:
        self.runs.append((models["solver"], question))
        if self.stop_after is not None and len(self.runs) >= self.stop_after:
            self.reached.set()
        await asyncio.sleep(0.001)
        return self.answer(models["solver"], question)


def good_and_bad_selector(questions: int = 4, **options: Any) -> ModelSelector:
    """Brute force over two scripted solvers, ``good`` (always right) and ``bad`` (always
    wrong), on ``questions`` questions whose answer is "yes"; no cache. ``options`` go to
    :class:`ModelSelector` (``max_evaluations=3``…)."""

    def handle(name: str, answer: str) -> MeteredModel:
        config = ModelConfig(provider="scripted", id=name, api="scripted")
        return MeteredModel(config, provider=ScriptedProvider(name=name, default=Reply(answer)))

    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        return await models["solver"].complete(question)

    return ModelSelector(
        agent,
        {"solver": [handle("good", "yes"), handle("bad", "no")]},
        [(f"q{i}", "yes") for i in range(questions)],
        lambda expected, actual: expected == actual,
        algorithm="brute_force",
        cache=False,
        **options,
    )
