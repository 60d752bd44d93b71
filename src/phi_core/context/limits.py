"""Execution-limit tracking: turns, tokens, wall-clock time and dollars of one run."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..metering import check_amount_limit, check_count_limit

if TYPE_CHECKING:
    from ..types import Pricing, Usage

__all__ = ["ExecutionLimits", "ExecutionTracker", "LimitsLeft", "counted_tokens"]


def counted_tokens(usage: Usage) -> int:
    """The tokens of ``usage`` that count against ``max_total_tokens``: input, cached input
    (``cache_read`` and ``cache_write``) and output, the tokens a
    :class:`~phi_core.metering.Meter` counts against ``Budget.max_tokens`` (reasoning tokens
    are part of output)."""
    return usage.input + usage.cache_read + usage.cache_write + usage.output


@dataclass(frozen=True, slots=True)
class ExecutionLimits:
    """Runaway protection; ``None`` switches a limit off.

    Turns, tokens and cost are checked before every turn, and a turn's output limit is lowered
    so that it cannot pass ``max_total_tokens`` or ``max_cost`` (its input estimated cautiously,
    :func:`~phi_core.metering.estimate_tokens`); a turn whose input alone would pass them is
    not sent and the run ends on the limit (a thinking model's thinking counts inside that
    output limit: Anthropic's thinking budget shrinks to fit it, or is not asked for).
    ``max_duration`` is also a deadline
    for everything inside the run: a model call still streaming when it passes ends with a
    ``timeout`` error; tools still running are cancelled; hooks, input filters, message
    getters, ``transform_context`` and compaction (a custom strategy's included) still running
    are cancelled; the run then ends on the limit.

    ``max_total_tokens`` counts every token of every call, the run's own and its sub-agents':
    input, cached input (``cache_read`` and ``cache_write``) and output (reasoning included),
    as a :class:`~phi_core.metering.Meter` counts them against ``Budget.max_tokens``
    (:func:`counted_tokens`). Prompt caching makes input cheaper, not smaller, so a cached
    prompt still counts.

    Checked when built (:class:`~phi_core.errors.UserError` otherwise): ``max_turns`` and
    ``max_total_tokens`` are ints from 1 to 10**15, ``max_duration`` (seconds) and ``max_cost``
    (dollars) finite numbers > 0.
    """

    max_turns: int | None = 50
    max_total_tokens: int | None = 1_000_000
    max_duration: float | None = 600.0
    max_cost: float | None = None

    def __post_init__(self) -> None:
        # Whole numbers: an int from 1 to 10**15 (bool refused); seconds and dollars: a finite
        # number > 0. None switches a limit off.
        check_count_limit("ExecutionLimits.max_turns", self.max_turns)
        check_count_limit("ExecutionLimits.max_total_tokens", self.max_total_tokens)
        check_amount_limit("ExecutionLimits.max_duration", self.max_duration, "seconds")
        check_amount_limit("ExecutionLimits.max_cost", self.max_cost, "dollars")


_NO_LIMITS = ExecutionLimits(max_turns=None, max_total_tokens=None, max_duration=None)


def _least(own: float | None, left: float | None) -> float | None:
    if left is None:
        return own
    return left if own is None else min(own, left)


@dataclass(frozen=True, slots=True)
class LimitsLeft:
    """What a run's :class:`ExecutionLimits` have left at one moment (``None``: no such limit):
    ``tokens`` of ``max_total_tokens``, dollars of ``max_cost`` (``cost``) and ``seconds`` of
    ``max_duration``. A value may be zero or negative (used up). Turns are not in it: a tool's
    own model calls (a sub-agent's) are not turns of the run.
    """

    tokens: int | None = None
    cost: float | None = None
    seconds: float | None = None

    def used_up(self) -> str | None:
        """The name of a limit with nothing left (max_total_tokens, max_cost,
        max_duration), or None when every limit has some left."""
        if self.tokens is not None and self.tokens < 1:
            return "max_total_tokens"
        if self.cost is not None and self.cost <= 0:
            return "max_cost"
        if self.seconds is not None and self.seconds <= 0:
            return "max_duration"
        return None

    def split(self, ways: int) -> LimitsLeft:
        """One of ``ways`` equal shares, for tools that spend the run's limits at the same time
        (sub-agents started in one batch): tokens and dollars are divided, the time left is
        not (it passes for all of them at once)."""
        if ways <= 1:
            return self
        return LimitsLeft(
            tokens=None if self.tokens is None else self.tokens // ways,
            cost=None if self.cost is None else self.cost / ways,
            seconds=self.seconds,
        )

    def bound(self, limits: ExecutionLimits | None) -> ExecutionLimits | None:
        """``limits`` (None: no limits) tightened to what is left: each of ``max_total_tokens``,
        ``max_cost`` and ``max_duration`` becomes the smaller of the two; ``max_turns`` stays.
        Call only when :meth:`used_up` is None."""
        if self.tokens is None and self.cost is None and self.seconds is None:
            return limits
        base = limits or _NO_LIMITS
        tokens = _least(base.max_total_tokens, self.tokens)
        return dataclasses.replace(
            base,
            max_total_tokens=None if tokens is None else int(tokens),
            max_cost=_least(base.max_cost, self.cost),
            max_duration=_least(base.max_duration, self.seconds),
        )


@dataclass
class ExecutionTracker:
    limits: ExecutionLimits
    turns: int = 0
    tokens_used: int = 0
    cost: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def record_turn(self, tokens: int) -> None:
        self.turns += 1
        self.tokens_used += tokens

    def record_cost(self, dollars: float) -> None:
        self.cost += dollars

    def output_allowance(self, input_tokens: int, pricing: Pricing | None) -> int | None:
        """The most output tokens the next call may produce without passing ``max_total_tokens``
        or ``max_cost`` (``None``: no cap; ``< 1``: its input alone would pass them)."""
        limits = self.limits
        caps: list[int] = []
        if limits.max_total_tokens is not None:
            caps.append(limits.max_total_tokens - self.tokens_used - input_tokens)
        if limits.max_cost is not None and pricing is not None and pricing.output > 0:
            left = limits.max_cost - self.cost - input_tokens * pricing.input / 1_000_000
            caps.append(math.floor(left / pricing.output * 1_000_000))
        return min(caps) if caps else None

    def left(self, pending_tokens: int = 0, pending_cost: float = 0.0) -> LimitsLeft:
        """What the limits have left now; ``pending_tokens`` and ``pending_cost`` were already
        spent but are not recorded yet (the current turn's reply and what its tools spent so
        far, while its tools run)."""
        limits = self.limits
        return LimitsLeft(
            tokens=(
                None
                if limits.max_total_tokens is None
                else limits.max_total_tokens - self.tokens_used - pending_tokens
            ),
            cost=None if limits.max_cost is None else limits.max_cost - self.cost - pending_cost,
            seconds=(
                None
                if limits.max_duration is None
                else limits.max_duration - (time.monotonic() - self.started)
            ),
        )

    def deadline(self) -> float | None:
        """When ``max_duration`` runs out, as a ``time.monotonic()`` value (``None``: never)."""
        if self.limits.max_duration is None:
            return None
        return self.started + self.limits.max_duration

    def duration_exceeded(self, where: str) -> str:
        """The stop reason when ``max_duration`` ran out ``where`` (mid-stream, in tools)."""
        elapsed = time.monotonic() - self.started
        return f"Max duration reached {where} ({elapsed:.1f}s/{self.limits.max_duration or 0:.1f}s)"

    def check_limits(self) -> str | None:
        """The reason the run must stop before its next turn, or None (first violated wins)."""
        limits = self.limits
        if limits.max_turns is not None and self.turns >= limits.max_turns:
            return f"Max turns reached ({self.turns}/{limits.max_turns})"
        if limits.max_total_tokens is not None and self.tokens_used >= limits.max_total_tokens:
            return f"Max tokens reached ({self.tokens_used}/{limits.max_total_tokens})"
        elapsed = time.monotonic() - self.started
        if limits.max_duration is not None and elapsed >= limits.max_duration:
            return f"Max duration reached ({elapsed:.1f}s/{limits.max_duration:.1f}s)"
        if limits.max_cost is not None and self.cost >= limits.max_cost:
            return f"Max cost reached (${self.cost:.4f}/${limits.max_cost:.4f})"
        return None
