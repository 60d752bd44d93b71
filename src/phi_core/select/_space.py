"""The search space: steps of an agent, candidate models per step, and their combinations."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from ..errors import UserError

__all__ = ["SearchSpace"]


class SearchSpace:
    """Every combination of one candidate per step, in ``itertools.product`` order.

    A combination is addressed by its index ``k`` (``0 <= k < len(space)``) and named
    ``"planner=a + solver=b"``. Candidates are labels (strings); the selector maps them back to
    whatever the user passed.
    """

    def __init__(self, steps: Mapping[str, Sequence[str]]) -> None:
        if not steps:
            raise UserError(
                "`models` must name at least one step, e.g. {'solver': ['openai:gpt-4o-mini']}."
            )
        for step, candidates in steps.items():
            if not candidates:
                raise UserError(f"Step {step!r} has no candidate models; give it at least one.")
            if len(set(candidates)) != len(candidates):
                raise UserError(f"Step {step!r} lists a candidate twice: {list(candidates)!r}.")
        self.steps: list[str] = list(steps)
        self.candidates: list[list[str]] = [list(steps[s]) for s in self.steps]
        self._coords: list[tuple[int, ...]] = list(
            itertools.product(*(range(len(c)) for c in self.candidates))
        )
        self._index = {c: k for k, c in enumerate(self._coords)}

    def __len__(self) -> int:
        return len(self._coords)

    def coords(self, k: int) -> tuple[int, ...]:
        """Candidate index per step of combination ``k``."""
        return self._coords[k]

    def index(self, coords: Sequence[int]) -> int:
        return self._index[tuple(coords)]

    def labels(self, k: int) -> dict[str, str]:
        """``{step: candidate label}`` of combination ``k``."""
        return {
            s: self.candidates[i][c]
            for i, (s, c) in enumerate(zip(self.steps, self._coords[k], strict=True))
        }

    def name(self, k: int) -> str:
        return " + ".join(f"{s}={m}" for s, m in self.labels(k).items())

    def find(self, labels: Mapping[str, str]) -> int:
        """The index of the combination with these labels."""
        try:
            return self.index(
                [self.candidates[i].index(labels[s]) for i, s in enumerate(self.steps)]
            )
        except (KeyError, ValueError) as error:
            raise UserError(f"No combination {dict(labels)!r} in this search space.") from error

    def neighbours(self, k: int) -> list[int]:
        """Combinations that differ from ``k`` in exactly one step."""
        base = self._coords[k]
        out: list[int] = []
        for i, candidates in enumerate(self.candidates):
            for c in range(len(candidates)):
                if c != base[i]:
                    out.append(self._index[(*base[:i], c, *base[i + 1 :])])
        return out
