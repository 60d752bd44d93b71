"""The abstract evaluation interface every selection algorithm runs against.

An algorithm never calls an agent. It asks the :class:`Arena` to evaluate some combinations on
some *positions* of the (per-seed shuffled) dataset; the arena hands the batch to an
:class:`Evaluator` (the real agent runner, or a replay of recorded matrices in benchmarks),
records every :class:`Evaluation` it gets back, never evaluates a cell twice, and enforces the
budget. All statistics the algorithms need (means, paired differences over shared positions, the
deterministic ranking) are computed here from the recorded cells.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..errors import BudgetExhausted, UserError
from ..metering import Budget
from ..outcome import Outcome
from ..types import Usage

__all__ = [
    "LATENCY_FLOOR_S",
    "LATENCY_RESOLUTION",
    "Arena",
    "Evaluation",
    "Evaluator",
    "Objective",
    "clearly_faster",
    "latency_band",
]

FloatArray = npt.NDArray[np.float64]


@dataclass(eq=False, kw_only=True)
class Evaluation(Outcome):
    """The outcome of running one combination on one datapoint: an
    :class:`~phi_core.outcome.Outcome` with the scorer's ``score``.

    A run that failed has ``error`` set and counts as score 0: failures count against a
    combination, they are never dropped. A cell whose calls the budget refused (status
    ``over_budget``) is not recorded at all.

    Two figures of money (and of calls and tokens) are kept apart:

    * **the price of the run** — ``cost_usd``, ``usage`` and ``calls``: every call of the agent,
      cache hits priced at what they originally cost, the scorer's calls left out. It does not
      depend on the cache's state, so cached and fresh runs of a combination compare fairly; the
      ranking, the objective and each combination's reported cost use it.
    * **what was paid** — ``spent_usd``, ``calls_sent`` and ``usage_sent``: only the calls
      actually sent (cache hits are free, refused calls never went out), the scorer's own calls
      (an LLM judge) included. The run's :class:`~phi_core.metering.Budget` counts these, like
      :class:`~phi_core.metering.Meter` does.
    """

    score: float = 0.0
    calls: int = 0
    """The agent's model calls, cache hits included (the price of the run)."""
    spent_usd: float | None = None
    """Dollars actually paid for this run, its scoring included (``None``: the same as
    ``cost_usd``)."""
    calls_sent: int | None = None
    """Model calls actually sent for this run, its scoring's included (cache hits and refused
    calls are not); what a ``Budget(max_calls)`` counts (``None``: the same as ``calls``)."""
    usage_sent: Usage | None = None
    """Tokens of the calls actually sent for this run, its scoring's included; what a
    ``Budget(max_tokens)`` counts (``None``: the same as ``usage``)."""
    scoring_usd: float = 0.0
    """Dollars the scorer's own model calls cost (an LLM judge): paid, so in ``spent_usd``, but
    not the combination's cost."""
    model_usage: dict[str, Usage] = field(default_factory=dict)
    """Tokens per model (``provider:model``) of this run's calls."""

    @property
    def cost(self) -> float:
        return self.cost_usd

    @property
    def latency(self) -> float:
        return self.latency_s

    @property
    def input_tokens(self) -> int:
        return self.usage.input + self.usage.cache_read + self.usage.cache_write

    @property
    def output_tokens(self) -> int:
        return self.usage.output

    @property
    def paid(self) -> float:
        """Dollars actually paid (see :attr:`spent_usd`)."""
        return self.cost_usd if self.spent_usd is None else self.spent_usd

    @property
    def paid_calls(self) -> int:
        """Model calls actually sent (see :attr:`calls_sent`)."""
        return self.calls if self.calls_sent is None else self.calls_sent

    @property
    def paid_tokens(self) -> int:
        """Input and output tokens of the calls actually sent (see :attr:`usage_sent`)."""
        usage = self.usage if self.usage_sent is None else self.usage_sent
        return usage.input + usage.cache_read + usage.cache_write + usage.output


class Evaluator(Protocol):
    """Runs combinations on datapoints: ``{combo: [dataset index, ...]} -> {combo: [Evaluation]}``.

    The returned lists are in the order of the requested indices. The evaluator owns the
    concurrency of one batch (see :func:`~phi_core.select.concurrency_split`).
    """

    async def evaluate(
        self, batch: Mapping[int, Sequence[int]]
    ) -> Mapping[int, Sequence[Evaluation]]: ...


def latency_band(latency: Any) -> Any:
    """Latency in seconds to a band: 0 below 10 ms, then one band per factor of 1.5.

    Used for tie-breaking only: wall-clock latencies of identical runs differ by noise, so the
    ranking compares bands, not raw seconds (works on floats and numpy arrays).
    """
    value = np.maximum(np.asarray(latency, dtype=float), 0.0)
    band = np.where(
        value < 0.01, 0.0, np.floor(np.log(np.maximum(value, 0.01) / 0.01) / np.log(1.5)) + 1.0
    )
    return band if band.ndim else float(band)


LATENCY_RESOLUTION = 0.25
"""Mean latencies closer than this fraction (plus :data:`LATENCY_FLOOR_S`) are a tie: wall-clock
timing of identical runs differs by noise, and noise must not decide which combination wins."""
LATENCY_FLOOR_S = 0.05


def clearly_faster(a: float, b: float) -> bool:
    """Whether mean latency ``a`` beats ``b`` by more than timing noise (a quarter and 50 ms)."""
    return a * (1.0 + LATENCY_RESOLUTION) + LATENCY_FLOOR_S < b


def _cheaper(a: float, b: float) -> bool:
    """Whether cost ``a`` is below ``b`` beyond floating-point noise."""
    return a < b - (1e-12 + 1e-9 * max(abs(a), abs(b)))


@dataclass(frozen=True, slots=True)
class Objective:
    """What the search maximises: the score, less weighted cost and latency.

    Per cell, ``score - cost_weight * norm(cost) - latency_weight * norm(latency)``, where ``norm``
    maps the cheapest (fastest) cell recorded so far to 0 and the dearest (slowest) to 1 — the
    weights are comparable to one point of score. The algorithms rank by it during the search (it
    is recomputed for every recorded cell after each batch), rescaled into [0, 1] (same order) so
    their bounds for scores in [0, 1] still hold. All weights 0: the score alone.
    """

    cost_weight: float = 0.0
    latency_weight: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cost_weight", "latency_weight"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise UserError(f"{name} must be a number >= 0 (0 ignores it), got {value!r}.")

    @property
    def active(self) -> bool:
        return self.cost_weight > 0 or self.latency_weight > 0

    def utility(self, scores: FloatArray, costs: FloatArray, latencies: FloatArray) -> FloatArray:
        """The objective of cells (arrays of their scores, dollars and seconds), in [0, 1]."""
        cw, lw = self.cost_weight, self.latency_weight
        value = scores + cw * (1.0 - _norm(costs)) + lw * (1.0 - _norm(latencies))
        return np.asarray(value / (1.0 + cw + lw), dtype=np.float64)


def _components(nodes: Sequence[int], above: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """Strongly connected components of the graph with an edge ``j -> k`` for each ``j`` in
    ``above[k]``: ``{node: component id}`` (Kosaraju, iterative)."""
    below: dict[int, list[int]] = {k: [] for k in nodes}
    for k in nodes:
        for j in above[k]:
            below[j].append(k)
    order: list[int] = []
    visited: set[int] = set()
    for start in nodes:  # finishing order on the edges j -> k
        if start in visited:
            continue
        visited.add(start)
        stack = [(start, iter(below[start]))]
        while stack:
            node, edges = stack[-1]
            nxt = next((n for n in edges if n not in visited), None)
            if nxt is None:
                stack.pop()
                order.append(node)
            else:
                visited.add(nxt)
                stack.append((nxt, iter(below[nxt])))
    component: dict[int, int] = {}
    for start in reversed(order):  # then on the reversed edges
        if start in component:
            continue
        component[start] = start
        todo = [start]
        while todo:
            for j in above[todo.pop()]:
                if j not in component:
                    component[j] = start
                    todo.append(j)
    return component


def _front(pool: Sequence[int], above: Mapping[int, Sequence[int]]) -> list[int]:
    """The members of ``pool`` that no other one dominates (``above[k]``: those dominating
    ``k``), the members of a cycle of dominations counting as equals."""
    component = _components(pool, above)
    beaten = {component[k] for k in pool for j in above[k] if component[j] != component[k]}
    return [k for k in pool if component[k] not in beaten]


def _norm(values: FloatArray) -> FloatArray:
    if values.size == 0:
        return values
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo:
        return np.zeros_like(values)
    return (values - lo) / (hi - lo)


class Arena:
    """Recorded evaluations of ``n_combos`` combinations on ``n_datapoints`` shuffled datapoints.

    Args:
        n_combos: number of combinations (arms).
        n_datapoints: dataset size.
        evaluator: runs the cells.
        seed: seeds the dataset order and :attr:`rng`; the same seed gives the same run.
        names: combination names, the last key of the deterministic ranking.
        budget: the run's :class:`~phi_core.metering.Budget` (dollars, tokens, calls, wall
            clock), checked against what the recorded cells paid; live calls are also held to it
            by reservation while they run (see :class:`~phi_core.select.ModelSelector`).
        max_evaluations: stop after this many cells.
        cost_check_every: with a dollar or token budget, batches run in slices of this many
            datapoints per combination so the budget is checked between slices.
        on_batch: called after every batch with the arena (progress reporting).
        objective: what the algorithms maximise (:attr:`scores`); the score alone by default.
        unpriced: the models called so far that have no price (read after every batch): a
            combination that called one has an unknown cost (:meth:`cost_unknown`).
    """

    def __init__(
        self,
        n_combos: int,
        n_datapoints: int,
        evaluator: Evaluator,
        *,
        seed: int | None = None,
        names: Sequence[str] | None = None,
        budget: Budget | None = None,
        max_evaluations: int | None = None,
        cost_check_every: int = 5,
        on_batch: Callable[[Arena], None] | None = None,
        shuffle: bool = True,
        objective: Objective | None = None,
        unpriced: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        if max_evaluations is not None and max_evaluations < 1:
            raise UserError(f"max_evaluations must be >= 1, got {max_evaluations!r}.")
        if cost_check_every < 1:
            raise UserError(f"cost_check_every must be >= 1, got {cost_check_every!r}.")
        if n_combos < 1:
            raise UserError("There are no combinations to select from.")
        if n_datapoints < 1:
            raise UserError("The dataset is empty; give at least one (input, expected) pair.")
        self.n_combos = n_combos
        self.n_datapoints = n_datapoints
        self.evaluator = evaluator
        self.seed = seed
        self.rng = random.Random(seed)
        order = list(range(n_datapoints))
        if shuffle:
            random.Random(f"order:{seed}").shuffle(order)
        self.order: list[int] = order
        self.names = list(names) if names is not None else [str(k) for k in range(n_combos)]
        ranks = {name: i for i, name in enumerate(sorted(self.names))}
        self._name_rank = np.array([ranks[name] for name in self.names], dtype=np.int64)
        self.budget = budget if budget is not None and not budget.unlimited else None
        self.max_evaluations = max_evaluations
        self.cost_check_every = cost_check_every
        self.started = time.monotonic()
        self.on_batch = on_batch
        shape = (n_combos, n_datapoints)
        self.objective = objective if objective is not None and objective.active else None
        self.observed = np.zeros(shape, dtype=bool)
        self.accuracy = np.zeros(shape)
        """The scorer's score of every recorded cell (failures 0)."""
        self.scores = np.zeros(shape)
        """What the algorithms rank by: :attr:`accuracy`, or the :class:`Objective` of each cell."""
        self.costs = np.zeros(shape)
        self.latencies = np.zeros(shape)
        self.input_tokens = np.zeros(shape, dtype=np.int64)
        self.output_tokens = np.zeros(shape, dtype=np.int64)
        self.paid = np.zeros(shape)
        """Dollars paid for each recorded cell (cache hits free, scoring included)."""
        self.calls = np.zeros(shape, dtype=np.int64)
        """The agent's model calls of each recorded cell, cache hits included."""
        self.calls_sent = np.zeros(shape, dtype=np.int64)
        """Model calls actually sent for each recorded cell (what the budget counts)."""
        self.tokens_sent = np.zeros(shape, dtype=np.int64)
        """Tokens of the calls actually sent for each recorded cell (what the budget counts)."""
        self.errors: dict[tuple[int, int], str] = {}
        self.cells: dict[tuple[int, int], Evaluation] = {}
        """Every recorded evaluation by ``(combination, position)``."""
        self.batches = 0
        self._unpriced_of = unpriced
        self.unpriced: set[str] = set()
        """The models without a price called so far (their calls count as $0)."""
        self._models: list[set[str]] = [set() for _ in range(n_combos)]

    # ------------------------------------------------------------------ evaluation

    @property
    def evaluations(self) -> int:
        return int(self.observed.sum())

    @property
    def cost_spent(self) -> float:
        """Dollars actually paid for the recorded cells."""
        return float(self.paid[self.observed].sum())

    @property
    def tokens_spent(self) -> int:
        """Tokens of the calls actually sent for the recorded cells (cache hits are free)."""
        return int(self.tokens_sent[self.observed].sum())

    @property
    def calls_spent(self) -> int:
        """Model calls actually sent for the recorded cells (cache hits are not)."""
        return int(self.calls_sent[self.observed].sum())

    def exhausted(self) -> bool:
        if self.max_evaluations is not None and self.evaluations >= self.max_evaluations:
            return True
        b = self.budget
        if b is None:
            return False
        return (
            (b.max_cost_usd is not None and self.cost_spent >= b.max_cost_usd)
            or (b.max_tokens is not None and self.tokens_spent >= b.max_tokens)
            or (b.max_calls is not None and self.calls_spent >= b.max_calls)
            or (b.max_wall_s is not None and time.monotonic() - self.started >= b.max_wall_s)
        )

    async def evaluate(self, batch: Mapping[int, Iterable[int]]) -> None:
        """Evaluate each combination on the given dataset *positions* (already-seen cells are skipped).

        Raises:
            BudgetExhausted: the budget was spent before or during this batch.
        """
        if self.exhausted():
            raise BudgetExhausted
        todo: dict[int, list[int]] = {}
        for k, positions in batch.items():
            fresh = [p for p in dict.fromkeys(positions) if not self.observed[k, p]]
            if fresh:
                todo[k] = fresh
        if not todo:
            return
        truncated = False
        if self.max_evaluations is not None:
            room = self.max_evaluations - self.evaluations
            trimmed: dict[int, list[int]] = {}
            for k, positions in todo.items():
                if room <= 0:
                    truncated = True
                    break
                trimmed[k] = positions[:room]
                truncated = truncated or len(positions) > room
                room -= len(trimmed[k])
            todo = trimmed
        if self.budget is not None:
            # the spent budget is checked every few datapoints per combination, not once per batch
            step = self.cost_check_every
            while any(todo.values()):
                head = {k: p[:step] for k, p in todo.items() if p}
                todo = {k: p[step:] for k, p in todo.items() if p[step:]}
                await self._run(head)
                if self.exhausted():
                    raise BudgetExhausted
        else:
            await self._run(todo)
        if truncated or self.exhausted():
            raise BudgetExhausted

    async def _run(self, todo: dict[int, list[int]]) -> None:
        request = {k: [self.order[p] for p in positions] for k, positions in todo.items()}
        results = await self.evaluator.evaluate(request)
        refused = False
        for k, positions in todo.items():
            got = list(results[k])
            if len(got) != len(positions):
                raise RuntimeError(
                    f"The evaluator returned {len(got)} results for {len(positions)} datapoints of combination {k}."
                )
            for p, ev in zip(positions, got, strict=True):
                if ev.status == "over_budget":
                    refused = True  # never recorded: the cell did not run to its end
                    continue
                failed = ev.error is not None or not ev.ok
                self.observed[k, p] = True
                self.accuracy[k, p] = 0.0 if failed else min(max(ev.score, 0.0), 1.0)
                self.scores[k, p] = self.accuracy[k, p]
                self.cells[(k, p)] = ev
                self.costs[k, p] = ev.cost_usd
                self.paid[k, p] = ev.paid
                self.calls[k, p] = ev.calls
                self.calls_sent[k, p] = ev.paid_calls
                self.tokens_sent[k, p] = ev.paid_tokens
                self.latencies[k, p] = ev.latency_s
                self.input_tokens[k, p] = ev.input_tokens
                self.output_tokens[k, p] = ev.output_tokens
                if failed:
                    self.errors[(k, p)] = ev.error or ev.status
                self._models[k].update(m for m, used in ev.model_usage.items() if used.total)
        if self._unpriced_of is not None:
            self.unpriced = set(self._unpriced_of())
        self._apply_objective()
        self.batches += 1
        if self.on_batch is not None:
            self.on_batch(self)
        if refused:
            raise BudgetExhausted

    def _apply_objective(self) -> None:
        if self.objective is None:
            return
        seen = self.observed
        self.scores[seen] = self.objective.utility(
            self.accuracy[seen], self.costs[seen], self.latencies[seen]
        )

    async def evaluate_prefix(self, combos: Iterable[int], n: int) -> None:
        """Make sure every combination in ``combos`` has seen positions ``0 .. n-1`` (paired)."""
        n = min(n, self.n_datapoints)
        await self.evaluate({k: range(n) for k in combos})

    # ------------------------------------------------------------------ statistics

    def count(self, k: int) -> int:
        return int(self.observed[k].sum())

    def prefix(self, k: int) -> int:
        """How many leading positions combination ``k`` has seen without a gap."""
        row = self.observed[k]
        if row.all():
            return self.n_datapoints
        return int(np.argmin(row))

    def mean(self, k: int) -> float:
        n = self.count(k)
        return float(self.scores[k][self.observed[k]].sum() / n) if n else float("nan")

    def std(self, k: int) -> float:
        """Sample standard deviation of ``k``'s scores (n-1 denominator; NaN below two samples)."""
        n = self.count(k)
        if n < 2:
            return float("nan")
        return float(np.std(self.scores[k][self.observed[k]], ddof=1))

    def cost_unknown(self, k: int) -> bool:
        """Whether combination ``k`` called a model without a price (its cost is not known: those
        calls count as $0 in :attr:`costs`)."""
        return not self._models[k].isdisjoint(self.unpriced)

    def rank_key(self, k: int) -> tuple[float, float, float, float, str]:
        """Deterministic order: higher accuracy, then lower cost (an unknown cost after every
        known one, see :meth:`cost_unknown`), lower latency, then name.

        Latency is compared in bands (see :func:`latency_band`) so that timing noise between two
        otherwise identical combinations does not decide the pick; the name does.
        """
        n = self.count(k)
        if n == 0:
            return (math.inf, math.inf, math.inf, math.inf, self.names[k])
        mask = self.observed[k]
        unknown = self.cost_unknown(k)
        return (
            -float(self.scores[k][mask].mean()),
            float(unknown),
            0.0 if unknown else float(self.costs[k][mask].mean()),
            float(latency_band(float(self.latencies[k][mask].mean()))),
            self.names[k],
        )

    def best(
        self, combos: Iterable[int] | None = None, cost_unknown: Container[int] | None = None
    ) -> int:
        """The best evaluated combination among ``combos`` (all by default).

        The top score (objective); among equal scores the cheapest, an unknown cost (a model
        without a price, see :meth:`cost_unknown`; ``cost_unknown`` overrides which combinations
        have one) counting as dearer than any known cost, and unknown costs as equal; among
        equally cheap ones, those not clearly slower than the fastest (:func:`clearly_faster`:
        timing noise never decides); then the name. No combination of the pool with at least as
        much evidence dominates the result (see :meth:`dominates`).
        """
        pool = np.arange(self.n_combos) if combos is None else np.fromiter(combos, dtype=np.int64)
        if pool.size == 0:
            raise ValueError("best() of an empty set of combinations")
        counts = self.observed[pool].sum(axis=1)
        if (counts > 0).any():
            pool, counts = pool[counts > 0], counts[counts > 0]
        safe = np.maximum(counts, 1)
        mask = self.observed[pool]
        mean = (self.scores[pool] * mask).sum(axis=1) / safe
        cost = (self.costs[pool] * mask).sum(axis=1) / safe
        latency = (self.latencies[pool] * mask).sum(axis=1) / safe
        keep = mean >= mean.max() - 1e-12
        pool, cost, latency = pool[keep], cost[keep], latency[keep]
        unknown = np.array(
            [
                self.cost_unknown(int(k)) if cost_unknown is None else int(k) in cost_unknown
                for k in pool
            ]
        )
        if not unknown.all():  # a known cost beats an unknown one; unknown ones tie on cost
            pool, cost, latency = pool[~unknown], cost[~unknown], latency[~unknown]
            cheapest = float(cost.min())
            keep = np.array([not _cheaper(cheapest, float(c)) for c in cost])
            pool, latency = pool[keep], latency[keep]
        fastest = float(latency.min())
        if self.objective is None or self.objective.latency_weight == 0:
            keep = np.array([not clearly_faster(fastest, float(t)) for t in latency])
            pool = pool[keep]
        return int(pool[np.argmin(self._name_rank[pool])])

    def summary(self, k: int) -> tuple[int, float, float, float]:
        """``(count, mean accuracy, mean cost, mean latency)`` of combination ``k``."""
        mask = self.observed[k]
        n = int(mask.sum())
        if n == 0:
            return 0, math.nan, math.nan, math.nan
        return (
            n,
            float(self.accuracy[k][mask].mean()),
            float(self.costs[k][mask].mean()),
            float(self.latencies[k][mask].mean()),
        )

    def dominates(self, a: int, b: int, cost_unknown: Container[int] = ()) -> bool:
        """Whether ``a`` is at least as good as ``b`` on accuracy, cost and latency, better on one,
        and was evaluated on every datapoint ``b`` was (less evidence never dominates).

        Latency is compared at the resolution of :func:`clearly_faster` unless the objective
        weighs latency (then it is compared as measured, like the objective does).

        ``cost_unknown``: combinations whose cost is not known (they called a model without a
        price, counted as $0). When ``a`` or ``b`` is one, cost is left out of the comparison:
        they are compared on accuracy and latency only, so an unknown cost never wins (nor
        loses) on cost.
        """
        if a == b or not (self.observed[a] >= self.observed[b]).all():
            return False
        na, acc_a, cost_a, lat_a = self.summary(a)
        nb, acc_b, cost_b, lat_b = self.summary(b)
        if na == 0 or nb == 0:
            return False
        if a in cost_unknown or b in cost_unknown:
            cost_a = cost_b = 0.0
        exact = self.objective is not None and self.objective.latency_weight > 0
        slower = lat_a > lat_b if exact else clearly_faster(lat_b, lat_a)
        if acc_a < acc_b - 1e-12 or _cheaper(cost_b, cost_a) or slower:
            return False
        faster = lat_a < lat_b if exact else clearly_faster(lat_a, lat_b)
        return acc_a > acc_b + 1e-12 or _cheaper(cost_a, cost_b) or faster

    def pareto(self, combos: Iterable[int], cost_unknown: Container[int] = ()) -> list[int]:
        """The combinations of ``combos`` no other one of them dominates (see :meth:`dominates`
        for ``cost_unknown``).

        Without ``cost_unknown`` domination has no cycles. Leaving cost out of some comparisons
        can make one (a dearer but not clearly slower ``a`` over a cheaper ``b``, ..., and an
        unpriced combination over ``a`` by latency): then a combination counts as dominated only
        by one it does not itself dominate through a chain, so the front is never empty and the
        best can always be found on it (:meth:`dominated_by`)."""
        pool = [k for k in combos if self.count(k) > 0]
        return _front(pool, self._above(pool, cost_unknown))

    def _above(self, pool: Sequence[int], cost_unknown: Container[int]) -> dict[int, list[int]]:
        """``{k: the combinations of pool that dominate k}``."""
        return {k: [j for j in pool if self.dominates(j, k, cost_unknown)] for k in pool}

    def dominated_by(
        self, k: int, combos: Iterable[int], cost_unknown: Container[int] = ()
    ) -> list[int]:
        """The combinations of ``combos`` on their Pareto front that dominate ``k`` through a
        chain of dominations (empty when ``k`` itself is on the front)."""
        pool = [j for j in combos if self.count(j) > 0]
        if k not in pool:
            pool.append(k)
        above = self._above(pool, cost_unknown)
        front = set(_front(pool, above))
        if k in front:
            return []
        seen, todo = {k}, [k]
        while todo:
            for i in above[todo.pop()]:
                if i not in seen:
                    seen.add(i)
                    todo.append(i)
        return sorted(front & seen)

    def stats(self) -> tuple[npt.NDArray[np.int64], FloatArray, FloatArray]:
        """Per combination: sample count, mean score and a shrunk standard error.

        The standard error adds one pseudo-observation of maximal variance (0.25 for scores in
        [0, 1]), so it never collapses to zero after a streak of identical scores.
        """
        counts = self.observed.sum(axis=1)
        safe = np.maximum(counts, 1)
        values = self.scores * self.observed
        mean = values.sum(axis=1) / safe
        ss = (values * values).sum(axis=1) - counts * mean * mean
        se = np.where(counts > 0, np.sqrt((np.maximum(ss, 0.0) + 0.25) / safe) / np.sqrt(safe), 0.5)
        return counts, mean, se

    def matrix(self, combos: Sequence[int], n: int) -> FloatArray:
        """Scores of ``combos`` on positions ``0 .. n-1`` (all must have been observed)."""
        return self.scores[np.asarray(combos, dtype=np.int64), :n]
