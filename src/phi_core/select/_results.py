"""What a selection run reports: per-combination metrics, the Pareto front, exports and a plot."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from .._files import export_target
from ..errors import MissingExtraError, UserError
from ..outcome import OutcomeStatus, RaceStatus
from ..types import Usage
from ._arena import Arena, Objective
from ._space import SearchSpace

__all__ = [
    "CombinationResult",
    "DatapointResult",
    "FailureRecord",
    "SelectionResult",
    "build_result",
]


class FailureRecord(BaseModel):
    """A datapoint whose run (or scoring) raised; it scored 0."""

    combination: str
    datapoint: int
    error: str


class DatapointResult(BaseModel):
    """One combination on one datapoint."""

    combination: str
    datapoint: int
    """The item's index in the dataset."""
    position: int
    """Its place in this run's (seeded, shuffled) order."""
    score: float
    objective: float | None = None
    """The search objective of this cell, when cost or latency were weighted."""
    cost_usd: float = 0.0
    latency_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    usage: Usage = Field(default_factory=Usage)
    """The tokens of this run's model calls (cache hits included), in the shape races report
    them; ``input_tokens`` and ``output_tokens`` are its ``input`` (with cache reads and
    writes) and ``output``."""
    calls: int = 0
    status: OutcomeStatus = "ok"
    """How the run ended, in the races' words (:func:`~phi_core.outcome.status_of_error_kind`):
    ``ok``; ``error`` (the agent or the scorer raised); ``timeout`` (its own ``timeout``, a model
    call's deadline or the budget's wall clock stopped it); ``cancelled``."""
    error_kind: str | None = None
    """The classified kind of ``error`` (a provider error's ``kind``: ``timeout``...)."""
    scoring_cost_usd: float = 0.0
    """What the scorer's own model calls cost here (not part of ``cost_usd``)."""
    error: str | None = None
    usage_by_model: dict[str, Usage] = Field(default_factory=dict)
    """The tokens of this run's model calls, per ``provider:model``."""


class CombinationResult(BaseModel):
    """Everything measured for one combination (over the datapoints it was evaluated on)."""

    name: str
    models: dict[str, str]
    evaluations: int
    accuracy: float | None = None
    """Mean score in [0, 1]; ``None`` when never evaluated."""
    ci_low: float | None = None
    ci_high: float | None = None
    """95 % Wilson interval of the accuracy to expect on new inputs like the dataset's (scores
    in [0, 1] have variance at most p(1-p), so it is conservative for partial credit). It does not
    shrink to nothing when every datapoint was run: the dataset is a sample of the task."""
    cost_usd: float = 0.0
    """Dollars of all its runs (cache hits counted at their original price)."""
    cost_per_datapoint: float | None = None
    latency_mean: float | None = None
    latency_p50: float | None = None
    latency_p95: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    usage: Usage = Field(default_factory=Usage)
    """The tokens of all its runs, in the shape races report them (``input_tokens`` and
    ``output_tokens`` are its ``input``, with cache reads and writes, and ``output``)."""
    failures: int = 0
    is_best: bool = False
    in_contention: bool = True
    """False when the algorithm eliminated or never chose to finish this combination."""
    pareto: bool = False
    """On the Pareto front (accuracy, cost, latency) of the combinations in contention (see
    :meth:`SelectionResult.pareto_front`)."""
    objective: float | None = None
    """The mean search objective, when cost or latency were weighted."""
    usage_by_model: dict[str, Usage] = Field(default_factory=dict)
    """Tokens per model (``provider:model``) over its evaluations."""
    unpriced_models: list[str] = Field(default_factory=list)
    """The models without a price it called (``provider:model``): their calls count as $0, so
    its ``cost_usd`` is a lower bound and its cost is unknown (the summary shows ``n/a``)."""

    @property
    def cost_known(self) -> bool:
        """Whether every model it called has a price (else its cost is shown as ``n/a``)."""
        return not self.unpriced_models


class SelectionResult(BaseModel):
    """The outcome of :meth:`ModelSelector.select_best`.

    Its JSON (:meth:`to_json`, ``phi select --json``) describes itself in the races' words: a
    ``type`` (``selection_result``), the run's ``session_id``, its ``status`` and its ``usage``.
    """

    type: Literal["selection_result"] = "selection_result"
    session_id: str = ""
    """The run's id: the ``session_id`` and ``loop_id`` of its selection events."""
    status: RaceStatus = "ok"
    """How the run ended, in the races' words: ``ok``, or ``over_budget`` when the budget (or
    ``max_evaluations``) ended the search early — a best is still recommended (the same as
    :attr:`budget_exhausted` and as the ``status`` of its ``SelectionEnd`` event)."""
    algorithm: str
    params: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    best: CombinationResult
    combinations: list[CombinationResult]
    """Every combination, best first (accuracy, then cost, latency, name; unevaluated last)."""
    evaluations: int
    grid_evaluations: int
    """What brute force would run: combinations x datapoints."""
    cost_usd: float
    """Dollars paid during this run (cache hits are free), the scorer's and the algorithm's own
    model calls (an LM proposer's) included."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens of the model calls this run actually sent and paid for — the agents', the
    scorer's and the algorithm's own; cache hits, refused calls and cells resumed from the
    journal are not counted (the calls of ``cost_usd``; the ``usage`` of its ``SelectionEnd``).
    Shaped like a race's ``usage``."""
    scoring_cost_usd: float = 0.0
    """Of ``cost_usd``, what the scorer's own model calls cost (an LLM judge); no combination's
    cost includes it."""
    proposal_cost_usd: float = 0.0
    """Of ``cost_usd``, what the algorithm's own model calls cost (``lm_proposal``'s proposer);
    no combination's cost includes it."""
    wall_time_s: float
    failures: list[FailureRecord] = Field(default_factory=list)
    budget_exhausted: bool = False
    datapoints: list[DatapointResult] = Field(default_factory=list)
    """Every evaluated (combination, datapoint) cell, in combination then position order."""
    metered_calls: int = 0
    """Model calls counted (handles and intercepted SDK calls, cache hits included)."""
    warnings: list[str] = Field(default_factory=list)
    """What the caller should know (no call metered, models without a price...)."""
    unpriced_models: list[str] = Field(default_factory=list)
    """Models called that have no price: their dollars count as 0."""
    resumed: int = 0
    """Cells taken from the run journal instead of being run again."""
    cost_weight: float = 0.0
    latency_weight: float = 0.0

    def best_models(self) -> dict[str, str]:
        """``{step: model}`` of the winner."""
        return dict(self.best.models)

    def evaluated(self) -> list[CombinationResult]:
        return [c for c in self.combinations if c.accuracy is not None]

    def pareto_front(self) -> list[CombinationResult]:
        """The combinations in contention no other one dominates on (higher accuracy, lower cost,
        lower latency), best first. Latencies closer than timing noise count as equal, and a
        combination evaluated on fewer datapoints never dominates one evaluated on more, so the
        best is always on the front.

        A combination that called a model without a price (its ``unpriced_models``) has an
        unknown cost, not a zero one: it is compared with the others on accuracy and latency
        only, so it neither dominates nor is dominated on cost. When every combination is
        unpriced (local models without a price), the front is thus on accuracy and latency, as
        it is when every cost is $0 (an agent that calls no model)."""
        return [c for c in self.combinations if c.pareto]

    def get_best(self) -> CombinationResult:
        """The winner (AgentOpt's name for :attr:`best`)."""
        return self.best

    def get_best_combo(self) -> dict[str, str]:
        """``{step: model}`` of the winner (AgentOpt's name for :meth:`best_models`)."""
        return self.best_models()

    def weighted(
        self, accuracy: float = 1.0, cost: float = 0.0, latency: float = 0.0
    ) -> list[tuple[float, CombinationResult]]:
        """Evaluated combinations ranked by ``accuracy*acc - cost*norm(cost) - latency*norm(latency)``.

        Cost and latency are min-max normalised over the evaluated combinations (0 = cheapest or
        fastest, 1 = dearest or slowest), so the weights are comparable. Best first.
        """
        if min(accuracy, cost, latency) < 0:
            raise UserError(
                f"Objective weights must be >= 0, got accuracy={accuracy}, cost={cost}, latency={latency}."
            )
        pts = self.evaluated()
        if not pts:
            return []

        def norm(values: list[float]) -> list[float]:
            lo, hi = min(values), max(values)
            return [0.0 if hi <= lo else (v - lo) / (hi - lo) for v in values]

        costs = norm([p.cost_per_datapoint or 0.0 for p in pts])
        lats = norm([p.latency_mean or 0.0 for p in pts])
        scored = [
            (accuracy * (p.accuracy or 0.0) - cost * c - latency * lt, p)
            for p, c, lt in zip(pts, costs, lats, strict=True)
        ]
        return sorted(scored, key=lambda t: (-t[0], t[1].name))

    # ---------------------------------------------------------------- export

    def to_json(self, path: str | Path | None = None) -> str:
        text = self.model_dump_json(indent=2)
        if path is not None:
            with export_target(path) as target:
                target.write_text(text + "\n")
        return text

    def to_csv(self, path: str | Path) -> None:
        fields = [
            "name",
            "accuracy",
            "ci_low",
            "ci_high",
            "cost_usd",
            "cost_per_datapoint",
            "latency_mean",
            "latency_p50",
            "latency_p95",
            "input_tokens",
            "output_tokens",
            "evaluations",
            "failures",
            "is_best",
            "in_contention",
        ]
        with export_target(path) as target, target.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow([*fields, "models"])
            for c in self.combinations:
                writer.writerow([getattr(c, k) for k in fields] + [json.dumps(c.models)])

    def totals(self) -> str:
        """One line: the algorithm, evaluations of the grid, dollars (the scorer's share), time."""
        from ._export import totals_text

        return totals_text(self)

    def summary(self, limit: int | None = 20) -> str:
        """A plain-text ranking (best first), with the run's totals and warnings."""
        from ._export import summary_text

        return summary_text(self, limit)

    def print_summary(self, limit: int | None = 20) -> None:
        print(self.summary(limit))

    def export_config(
        self,
        path: str | Path,
        format: str = "litellm",
        *,
        step: str | None = None,
        api_key_env_vars: dict[str, str] | None = None,
    ) -> str:
        """Write the winner as a LiteLLM ``model_list`` (YAML, one entry per step) or as a
        ``phi race --config`` file (TOML racing the Pareto front's models for ``step``); returns
        the text. ``api_key_env_vars`` maps a provider to the variable holding its key."""
        from ._export import litellm_config, race_config

        if format == "litellm":
            text = litellm_config(self, api_key_env_vars)
        elif format in ("phi-race", "race", "toml"):
            text = race_config(self, step)
        else:
            raise UserError(f"Unknown config format {format!r}; use 'litellm' or 'phi-race'.")
        with export_target(path) as target:
            target.write_text(text)
        return text

    def plot_pareto(self, path: str | Path | None = None) -> Any:
        """Accuracy against cost and against latency; the Pareto front joined, the best starred.

        Saves to ``path``, or returns the matplotlib figure when no path is given.
        """
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise MissingExtraError("SelectionResult.plot_pareto", "plot") from error
        pts = self.evaluated()
        front = {p.name for p in self.pareto_front()}
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for ax, attr, label in (
            (axes[0], "cost_per_datapoint", "cost per datapoint (USD)"),
            (axes[1], "latency_mean", "mean latency (s)"),
        ):
            xs = [getattr(p, attr) or 0.0 for p in pts]
            ys = [p.accuracy or 0.0 for p in pts]
            ax.scatter(xs, ys, s=18, color="lightgrey", label="evaluated")
            fx = sorted(
                (getattr(p, attr) or 0.0, p.accuracy or 0.0) for p in pts if p.name in front
            )
            if fx:
                ax.plot(
                    [x for x, _ in fx],
                    [y for _, y in fx],
                    "o-",
                    color="tab:blue",
                    ms=4,
                    label="Pareto front",
                )
            ax.scatter(
                [getattr(self.best, attr) or 0.0],
                [self.best.accuracy or 0.0],
                marker="*",
                s=220,
                color="tab:red",
                label=f"best: {self.best.name}",
                zorder=5,
            )
            ax.set_xlabel(label)
            ax.set_ylabel("accuracy")
            ax.legend(fontsize=7)
        fig.suptitle(f"{self.algorithm}: {self.evaluations}/{self.grid_evaluations} evaluations")
        fig.tight_layout()
        if path is None:
            return fig
        try:
            with export_target(path) as target:
                fig.savefig(target, dpi=120)
        finally:
            plt.close(fig)
        return None


def wilson_interval(mean: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a mean of ``n`` scores in [0, 1]."""
    if n <= 0:
        return 0.0, 1.0
    denominator = 1 + z * z / n
    centre = (mean + z * z / (2 * n)) / denominator
    half = z * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _quantile(values: np.ndarray, q: float) -> float | None:
    return float(np.quantile(values, q)) if values.size else None


def build_result(
    arena: Arena,
    space: SearchSpace,
    best: int,
    *,
    algorithm: str,
    params: dict[str, Any],
    pool: set[int] | None,
    spent: float,
    wall_time: float,
    proposal_cost_usd: float = 0.0,
    budget_exhausted: bool = False,
    warnings: Sequence[str] = (),
    unpriced: Sequence[str] = (),
    resumed: int = 0,
    objective: Objective | None = None,
    session_id: str = "",
    usage: Usage | None = None,
) -> SelectionResult:
    """Summarise an arena after a run; ``best`` is the algorithm's recommendation.

    A combination in contention that dominates the recommendation with at least as much
    evidence is at least as good on every axis, so it replaces it: the reported best is always on
    the Pareto front. ``unpriced`` lists the models without a price: a combination that called
    one has an unknown cost, left out of its comparisons (see :meth:`SelectionResult.pareto_front`).
    ``session_id`` and ``usage`` (the tokens the run paid for) are the run's, reported as they are.
    """
    total = arena.n_datapoints
    by_model: list[dict[str, Usage]] = [{} for _ in range(arena.n_combos)]
    totals = [Usage() for _ in range(arena.n_combos)]
    for (k, _), ev in sorted(arena.cells.items()):
        totals[k] = totals[k] + ev.usage
        for model, used in ev.model_usage.items():
            by_model[k][model] = by_model[k].get(model, Usage()) + used
    no_price = set(unpriced)
    unpriced_of = [
        sorted(m for m, used in by_model[k].items() if m in no_price and used.total)
        for k in range(arena.n_combos)
    ]
    unknown = {k for k in range(arena.n_combos) if unpriced_of[k]}
    contenders = {
        k for k in (range(arena.n_combos) if pool is None else pool) if arena.count(k) > 0
    }
    for _ in range(arena.n_combos):
        better = [k for k in contenders if arena.dominates(k, best, unknown)]
        if not better:
            break
        best = arena.best(better, unknown)
    contenders.add(best)
    above = arena.dominated_by(best, contenders, unknown) if unknown else []
    if above:  # a cycle through an unknown cost (see Arena.pareto): the front's best above it
        best = arena.best(above, unknown)
    front = set(arena.pareto(contenders, unknown))
    weighted = arena.objective is not None
    combos: list[CombinationResult] = []
    for k in range(arena.n_combos):
        mask = arena.observed[k]
        n = int(mask.sum())
        item = CombinationResult(
            name=space.name(k),
            models=space.labels(k),
            evaluations=n,
            failures=sum(1 for (kk, _) in arena.errors if kk == k),
            is_best=k == best,
            in_contention=pool is None or k in pool,
            pareto=k in front,
        )
        if n:
            mean = float(arena.accuracy[k][mask].mean())
            latencies = arena.latencies[k][mask]
            item.accuracy = mean
            item.ci_low, item.ci_high = wilson_interval(mean, n)
            item.cost_usd = float(arena.costs[k][mask].sum())
            item.cost_per_datapoint = item.cost_usd / n
            item.latency_mean = float(latencies.mean())
            item.latency_p50 = _quantile(latencies, 0.5)
            item.latency_p95 = _quantile(latencies, 0.95)
            item.input_tokens = int(arena.input_tokens[k][mask].sum())
            item.output_tokens = int(arena.output_tokens[k][mask].sum())
            if weighted:
                item.objective = float(arena.scores[k][mask].mean())
        combos.append(item)
    rows: list[DatapointResult] = []
    for k, item in enumerate(combos):
        item.usage_by_model = by_model[k]
        item.usage = totals[k]
        item.unpriced_models = unpriced_of[k]
    for (k, p), ev in sorted(arena.cells.items()):
        item = combos[k]
        rows.append(
            DatapointResult(
                combination=item.name,
                datapoint=arena.order[p],
                position=p,
                score=float(arena.accuracy[k, p]),
                objective=float(arena.scores[k, p]) if weighted else None,
                cost_usd=float(arena.costs[k, p]),
                latency_s=float(arena.latencies[k, p]),
                input_tokens=int(arena.input_tokens[k, p]),
                output_tokens=int(arena.output_tokens[k, p]),
                usage=ev.usage,
                calls=int(arena.calls[k, p]),
                status=ev.status,
                error_kind=ev.error_kind,
                scoring_cost_usd=ev.scoring_usd,
                error=arena.errors.get((k, p)),
                usage_by_model=dict(ev.model_usage),
            )
        )
    rest = sorted((k for k in range(arena.n_combos) if k != best), key=arena.rank_key)
    ordered = [combos[best]] + [combos[k] for k in rest]
    failure_records = [
        FailureRecord(combination=space.name(k), datapoint=arena.order[p], error=msg)
        for (k, p), msg in sorted(arena.errors.items())
    ]
    return SelectionResult(
        session_id=session_id,
        status="over_budget" if budget_exhausted else "ok",
        algorithm=algorithm,
        params=params,
        seed=arena.seed,
        best=combos[best],
        combinations=ordered,
        evaluations=arena.evaluations,
        grid_evaluations=arena.n_combos * total,
        cost_usd=spent,
        usage=usage if usage is not None else Usage(),
        scoring_cost_usd=sum(ev.scoring_usd for ev in arena.cells.values()),
        proposal_cost_usd=proposal_cost_usd,
        wall_time_s=wall_time,
        failures=failure_records,
        budget_exhausted=budget_exhausted,
        datapoints=rows,
        metered_calls=int(arena.calls[arena.observed].sum()),
        warnings=list(warnings),
        unpriced_models=sorted(unpriced),
        resumed=resumed,
        cost_weight=objective.cost_weight if objective else 0.0,
        latency_weight=objective.latency_weight if objective else 0.0,
    )
