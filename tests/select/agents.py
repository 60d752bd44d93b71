"""Pure-Python agents for selection tests: no model call, so every run is counted and cheap."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


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
