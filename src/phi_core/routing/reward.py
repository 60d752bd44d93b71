"""What a routing decision earned: quality, latency and cost blended into one reward per arm.

``reward = w_q·Q + w_l·L + w_c·C − fallback_penalty·[the arm failed]`` where

- ``Q`` is the quality in [0, 1] (a judge's score, a verifier's pass, recorded correctness);
- ``L = 1 − min(1, latency / allowance)`` with ``allowance = P95 · (1 + min(1, chars/τ))``: the
  observed latency of *this* call relative to the rolling P95 of every model's recent calls
  (pooled, so a model that is slow in general scores lower), scaled up for long queries. When a
  call has no latency (a cache hit), the model's own rolling P95 stands in;
- ``C = 1 − cost_usd / cost_scale_usd`` is linear in real dollars (never a ratio in which the
  price cancels), so a call costing ``cost_scale_usd`` loses one unit of ``w_c``.

Scores arrive keyed by **arm name** (see :class:`ArmOutcome`), never by list position.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import UserError

__all__ = ["ArmOutcome", "ArmReward", "LatencyTracker", "RewardPolicy"]


@dataclass(frozen=True)
class ArmOutcome:
    """What one arm did on one query."""

    arm: str
    quality: float
    latency_s: float | None = None
    cost_usd: float = 0.0
    failed: bool = False


@dataclass(frozen=True)
class ArmReward:
    """The reward of one arm and its parts (for logs and explanations)."""

    arm: str
    reward: float
    quality: float
    latency_term: float
    cost_term: float
    penalty: float


class LatencyTracker:
    """Rolling latency samples per model (last ``window``), with per-model and pooled P95."""

    def __init__(self, window: int = 200) -> None:
        if window < 1:
            raise UserError(f"window must be >= 1, got {window!r}.")
        self.window = window
        self._samples: dict[str, deque[float]] = {}

    def record(self, model: str, latency_s: float) -> None:
        if latency_s < 0 or not math.isfinite(latency_s):
            raise UserError(f"latency must be a finite number >= 0, got {latency_s!r}.")
        self._samples.setdefault(model, deque(maxlen=self.window)).append(latency_s)

    def p95(self, model: str | None = None) -> float | None:
        """P95 of one model, or of all models pooled when ``model`` is None."""
        if model is not None:
            samples = list(self._samples.get(model, ()))
        else:
            samples = [s for d in self._samples.values() for s in d]
        if not samples:
            return None
        return float(np.percentile(samples, 95))

    def snapshot(self) -> dict[str, list[float]]:
        return {k: list(v) for k, v in self._samples.items()}


@dataclass(frozen=True)
class RewardPolicy:
    """Blend quality, latency and cost (defaults 0.8 / 0.2 / 0.0 as in the seed)."""

    quality_weight: float = 0.8
    latency_weight: float = 0.2
    cost_weight: float = 0.0
    fallback_penalty: float = 0.05
    cost_scale_usd: float = 0.01
    length_threshold: int = 2000

    def __post_init__(self) -> None:
        for name in ("quality_weight", "latency_weight", "cost_weight", "fallback_penalty"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise UserError(f"RewardPolicy.{name} must be a finite number >= 0, got {value!r}.")
        if not self.cost_scale_usd > 0:
            raise UserError(f"cost_scale_usd must be > 0 dollars, got {self.cost_scale_usd!r}.")
        if self.length_threshold <= 0:
            raise UserError(f"length_threshold must be > 0, got {self.length_threshold!r}.")

    def latency_term(
        self, arm: str, latency_s: float | None, query_chars: int, tracker: LatencyTracker | None
    ) -> float:
        reference = tracker.p95() if tracker is not None else None
        if latency_s is None:
            latency_s = tracker.p95(arm) if tracker is not None else None
        if latency_s is None or reference is None or reference <= 0:
            return 0.5  # nothing known: neutral
        allowance = reference * (1.0 + min(1.0, query_chars / self.length_threshold))
        return 1.0 - min(1.0, latency_s / allowance)

    def cost_term(self, cost_usd: float) -> float:
        return 1.0 - cost_usd / self.cost_scale_usd

    def reward(
        self,
        outcome: ArmOutcome,
        *,
        query_chars: int = 0,
        tracker: LatencyTracker | None = None,
    ) -> ArmReward:
        if not 0.0 <= outcome.quality <= 1.0:
            raise UserError(
                f"quality of arm {outcome.arm!r} must be in [0, 1], got {outcome.quality!r}."
            )
        lat = self.latency_term(outcome.arm, outcome.latency_s, query_chars, tracker)
        cost = self.cost_term(outcome.cost_usd)
        penalty = self.fallback_penalty if outcome.failed else 0.0
        value = (
            self.quality_weight * outcome.quality
            + self.latency_weight * lat
            + self.cost_weight * cost
            - penalty
        )
        return ArmReward(outcome.arm, value, outcome.quality, lat, cost, penalty)

    def rewards(
        self,
        outcomes: list[ArmOutcome],
        *,
        query_chars: int = 0,
        tracker: LatencyTracker | None = None,
    ) -> dict[str, ArmReward]:
        """Rewards keyed by arm name; duplicate arms are an error (scores would be ambiguous)."""
        out: dict[str, ArmReward] = {}
        for outcome in outcomes:
            if outcome.arm in out:
                raise UserError(f"Two outcomes for arm {outcome.arm!r}; give one per arm.")
            out[outcome.arm] = self.reward(outcome, query_chars=query_chars, tracker=tracker)
        return out
