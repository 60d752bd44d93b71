"""What a routing decision earned: quality, latency and cost blended into one bounded reward.

An answer that succeeded (status ``ok``) earns ``reward = w_q·Q + w_l·L + w_c·C``, where
every term lies in [0, 1]. An arm that failed — any other status: an error, an ``unverified``
answer (it failed the check), a rejection, a timeout — earns **the failure's reward**,
``−fallback_penalty``, whatever its quality, latency or cost: speed and cheapness are bonuses
for answers that succeeded, so a fast failure (or one whose latency is unknown) is never paid
for failing, and a failure always earns less than any answer that succeeded (which earns at
least 0) as long as ``fallback_penalty`` > 0. The reward is **bounded**: it lies in
``[−fallback_penalty, w_q + w_l + w_c]`` (``[−0.05, 1]`` with the defaults) whatever a
call costs or however long it takes:

- ``Q`` is the quality in [0, 1] (a judge's score of the full answer, a verifier's pass,
  recorded correctness);
- ``L = 1 − min(1, latency / allowance)`` with ``allowance = P95 · (1 + min(1, chars/τ))``: the
  observed latency of *this* call relative to the rolling P95 of every model's recent calls
  (pooled, so a model that is slow in general scores lower), scaled up for long queries. When a
  call has no latency (a cache hit, reported as 0), the model's own rolling P95 stands in;
- ``C = s / (s + cost_usd)`` with ``s = cost_scale_usd``: 1 for a free call, ½ for a call
  costing ``s``, falling towards 0 for dearer ones — monotone in real dollars (never a ratio in
  which the price cancels) and nearly linear (``≈ 1 − cost/s``) for calls much cheaper than ``s``.

Rewards are keyed by **arm name** (an outcome's ``config_id``), never by list position.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._logging import get_logger
from ..errors import UserError
from ..outcome import Outcome

if TYPE_CHECKING:
    from .history import LatencyHistory

__all__ = ["ArmReward", "LatencyTracker", "RewardPolicy"]

logger = get_logger("phi_core.routing")


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

    def __init__(
        self, window: int = 200, *, history: LatencyHistory | None = None, namespace: str = ""
    ) -> None:
        if window < 1:
            raise UserError(f"window must be >= 1, got {window!r}.")
        self.window = window
        self.history = history
        self.namespace = namespace
        self._samples: dict[str, deque[float]] = {}

    def load(self) -> None:
        """Start from the stored samples of :attr:`history` (a broken store is skipped)."""
        if self.history is None:
            return
        try:
            stored = self.history.load(self.namespace, self.window)
        except Exception as exc:  # a refinement of the reward, never a reason to fail
            logger.warning(
                "latency history unreadable (%s: %s); starting empty", type(exc).__name__, exc
            )
            return
        for model, samples in stored.items():
            queue = self._samples.setdefault(model, deque(maxlen=self.window))
            queue.extend(s for s in samples if math.isfinite(s) and s >= 0)

    def record(self, model: str, latency_s: float) -> None:
        if latency_s < 0 or not math.isfinite(latency_s):
            raise UserError(f"latency must be a finite number >= 0, got {latency_s!r}.")
        self._samples.setdefault(model, deque(maxlen=self.window)).append(latency_s)
        if self.history is not None:
            try:
                self.history.add(self.namespace, model, latency_s, self.window)
            except Exception as exc:
                logger.warning(
                    "latency history not written (%s: %s); kept in memory", type(exc).__name__, exc
                )

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
    """Blend quality, latency and cost (defaults 0.8 / 0.2 / 0.0 as in the seed).

    The weights apply to answers that succeeded; an arm that failed earns
    ``−fallback_penalty`` (its only term), so a failure never outranks a success.
    """

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
        if not (math.isfinite(self.cost_scale_usd) and self.cost_scale_usd > 0):
            raise UserError(
                f"cost_scale_usd must be > 0 dollars and finite, got {self.cost_scale_usd!r}."
            )
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

    def cost_term(self, cost_usd: float | np.ndarray) -> float | np.ndarray:
        """``s / (s + cost)``: 1 for a free call, ½ at ``cost_scale_usd``, towards 0 beyond."""
        cost = np.maximum(cost_usd, 0.0)
        value = self.cost_scale_usd / (self.cost_scale_usd + cost)
        return float(value) if np.ndim(value) == 0 else value

    @property
    def bounds(self) -> tuple[float, float]:
        """The lowest and highest reward this policy can give."""
        return (
            -self.fallback_penalty,
            self.quality_weight + self.latency_weight + self.cost_weight,
        )

    def reward(
        self,
        outcome: Outcome,
        quality: float,
        *,
        query_chars: int = 0,
        tracker: LatencyTracker | None = None,
    ) -> ArmReward:
        """The reward of ``outcome`` (its ``config_id`` is the arm) given its ``quality``.

        An outcome that did not succeed (any status but ``ok``, ``unverified`` included) earns
        ``−fallback_penalty`` and nothing else, whatever its quality, latency and cost.
        """
        arm = outcome.config_id
        if not (isinstance(quality, int | float) and 0.0 <= quality <= 1.0):
            raise UserError(f"quality of arm {arm!r} must be in [0, 1], got {quality!r}.")
        if not outcome.ok:
            # A failure (an unverified answer included) earns the failure's reward and nothing
            # else: no quality, latency or cost term (see the module docstring). The parts are
            # reported as they counted, so reward = w_q·quality + w_l·latency + w_c·cost − penalty.
            penalty = self.fallback_penalty
            return ArmReward(arm, -penalty, 0.0, 0.0, 0.0, penalty)
        latency = outcome.latency_s if outcome.latency_s > 0 else None
        lat = self.latency_term(arm, latency, query_chars, tracker)
        cost = float(self.cost_term(outcome.cost_usd))
        value = self.quality_weight * quality + self.latency_weight * lat + self.cost_weight * cost
        return ArmReward(arm, value, quality, lat, cost, 0.0)

    def rewards(
        self,
        graded: Sequence[tuple[Outcome, float]],
        *,
        query_chars: int = 0,
        tracker: LatencyTracker | None = None,
    ) -> dict[str, ArmReward]:
        """Rewards keyed by arm name; two outcomes of one arm are an error (ambiguous)."""
        out: dict[str, ArmReward] = {}
        for outcome, quality in graded:
            if outcome.config_id in out:
                raise UserError(f"Two outcomes for arm {outcome.config_id!r}; give one per arm.")
            out[outcome.config_id] = self.reward(
                outcome, quality, query_chars=query_chars, tracker=tracker
            )
        return out
