"""The run log as a sink of the one event stream: :class:`RunRecorder`.

A recorder is passed as (or beside, through :func:`~phi_core.events.tee`) the ``events=`` sink of
a run, a race or a bandit race. From the stream it keeps what only the stream carries — the
router's ``RouteDecision`` / ``RouteUpdate`` events, warnings, the phase of every loop, each
loop's end — and :meth:`RunRecorder.finish` adds the final result (a
:class:`~phi_core.loop.LoopResult`, :class:`~phi_core.parallel.ParallelLoopResult`,
:class:`~phi_core.race.BanditRaceResult` or :class:`~phi_core.select.SelectionResult`) and
writes one :class:`RunRecord`.

For the gateway (or any server)::

    log = RunLog()                                  # $PHI_HOME/logs.db
    recorder = RunRecorder(log, prompt=text, plan=plan, source="gateway")
    result = await plan.run(text, events=tee(my_sink, recorder))
    await recorder.afinish(result)                 # the SQLite write runs in a thread

``finish`` never raises because the log failed (a full disk must not fail a run already paid
for): it keeps the error in :attr:`RunRecorder.error` and returns the record all the same.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._logging import get_logger
from ..events import AgentEnd, ParallelLoopStart, RouteDecision, RouteUpdate, Warning
from ..loop import AgentContext, LoopResult
from ..parallel import ParallelLoopOutcome, ParallelLoopResult
from ..race import BanditRaceResult
from ..select import SelectionResult
from ..types import AgentMessage, AssistantMessage, TextContent, UserMessage
from ._records import BranchRecord, RouteEventRecord, RunKind, RunRecord, new_run_id, utc_iso
from ._store import RunLog

if TYPE_CHECKING:
    from ..config import RacePlan

__all__ = ["RunRecorder", "plan_snapshot", "winner_history"]

logger = get_logger("phi_core.runlog")


def plan_snapshot(plan: RacePlan) -> dict[str, Any]:
    """The parts of a race plan a continuation races again: branch specs, judge, strategy and
    limits (JSON-ready)."""
    return {
        "branches": [b.model_dump(mode="json", exclude_none=True) for b in plan.branches],
        "judge": plan.judge.model_dump(mode="json", exclude_none=True) if plan.judge else None,
        "strategy": plan.strategy,
        "timeout": plan.timeout,
        "max_concurrency": plan.max_concurrency,
    }


class RunRecorder:
    """Collects one run's events; :meth:`finish` writes the record (see the module docstring).

    Args:
        log: where to write (``None``: collect only; :meth:`finish` still returns the record).
        prompt: the new input of this run.
        system: the system prompt (of a single run; races keep theirs in each branch's spec).
        plan: the race plan (labels, branch specs, judge, strategy); for a single run, give
            ``branches=[spec]`` instead.
        branches: branch specs as dicts (a single run: the one model's spec).
        conversation_id: the conversation this run belongs to (``-c`` continues it).
        source: who ran it (``cli``, ``gateway``, ``library``).
        extra: anything else worth keeping (JSON-ready).
        log_failures: log a failed write as a warning (off when the caller reports it).
    """

    def __init__(
        self,
        log: RunLog | None,
        *,
        prompt: str,
        system: str | None = None,
        plan: RacePlan | None = None,
        branches: Sequence[dict[str, Any]] | None = None,
        conversation_id: str | None = None,
        source: str = "cli",
        extra: dict[str, Any] | None = None,
        log_failures: bool = True,
    ) -> None:
        self.log = log
        self.log_failures = log_failures
        """Whether a failed write is logged as a warning (off: the caller reports
        :attr:`error` itself, as the command line does)."""
        self.run_id = new_run_id()
        self.prompt = prompt
        self.system = system
        self.plan = plan
        self.snapshot = (
            plan_snapshot(plan) if plan is not None else {"branches": list(branches or [])}
        )
        self.conversation_id = conversation_id
        self.source = source
        self.extra = dict(extra or {})
        self.started = time.time()
        self.created_at = utc_iso(self.started)
        self.route_events: list[RouteEventRecord] = []
        self.warnings: list[str] = []
        self.phases: dict[str, str] = {}
        self.ends: dict[str, AgentEnd] = {}
        self.error: BaseException | None = None
        """Why the last :meth:`finish` could not write (``None``: it did, or nothing was due)."""

    # ------------------------------------------------------------------ the sink

    def __call__(self, event: Any) -> None:
        if isinstance(event, RouteDecision | RouteUpdate):
            payload = event.model_dump(mode="json")
            self.route_events.append(
                RouteEventRecord(
                    run_id=self.run_id,
                    seq=len(self.route_events),
                    type=event.type,
                    namespace=event.namespace,
                    action=event.action if isinstance(event, RouteDecision) else None,
                    timestamp=event.timestamp,
                    payload=payload,
                )
            )
        elif isinstance(event, Warning):
            self.warnings.append(event.message)
        elif isinstance(event, ParallelLoopStart):
            for loop_id in event.loop_ids:
                self.phases[loop_id] = event.label or ""
        elif isinstance(event, AgentEnd):
            self.ends[event.loop_id] = event

    # ------------------------------------------------------------------ the result

    def build(self, result: Any, *, context: AgentContext | None = None) -> RunRecord:
        """The record of ``result`` plus what the events said (nothing is written); a single
        run's ``context`` (after the run) gives its whole history."""
        if isinstance(result, BanditRaceResult):
            record = self._bandit(result)
        elif isinstance(result, ParallelLoopResult):
            record = self._race(result)
        elif isinstance(result, LoopResult):
            record = self._single(result, context)
        elif isinstance(result, SelectionResult):
            record = self._selection(result)
        else:
            raise TypeError(f"Cannot log a {type(result).__name__}; pass the run's result.")
        record.warnings = [*self.warnings, *record.warnings]
        return record

    def finish(self, result: Any, *, context: AgentContext | None = None) -> RunRecord:
        """Build the record of ``result`` and write it (when there is a log); returns the
        record as built (the stored copy has every secret redacted). A failed write never
        raises: :attr:`error` says why and a warning is logged."""
        record = self.build(result, context=context)
        if self.log is not None:
            try:
                self.log.write(record)
            except Exception as exc:  # a failed log write must not fail a finished run
                self.error = exc
                if self.log_failures:
                    logger.warning("the run log could not record run %s: %s", record.id, exc)
        return record

    def finish_interrupted_selection(
        self, algorithm: str, combinations: Sequence[tuple[str, int, float, float]], spent: float
    ) -> RunRecord:
        """Write the record of a selection stopped before its end (Ctrl-C, SIGTERM): status
        ``cancelled``, no winner, and per combination evaluated so far ``(name, evaluations,
        mean score, dollars)``; a failed write is kept in :attr:`error`, as in :meth:`finish`."""
        branches = [
            BranchRecord(
                index=i,
                label=name,
                model=name,
                status="cancelled",
                text="",
                cost_usd=cost,
                score=score,
                winner=False,
                spec={"evaluations": evaluations},
            )
            for i, (name, evaluations, score, cost) in enumerate(combinations)
        ]
        record = self._base(
            "select",
            strategy=algorithm,
            status="cancelled",
            winner=None,
            cost_usd=spent,
            verdict={"strategy": algorithm, "evaluations": sum(c[1] for c in combinations)},
            branches=branches,
        )
        record.warnings = [*self.warnings, "interrupted before its end: no best was chosen"]
        if self.log is not None:
            try:
                self.log.write(record)
            except Exception as exc:  # as finish: a failed log write must not fail the command
                self.error = exc
                if self.log_failures:
                    logger.warning("the run log could not record run %s: %s", record.id, exc)
        return record

    async def afinish(self, result: Any, *, context: AgentContext | None = None) -> RunRecord:
        """:meth:`finish` with the write in a worker thread."""
        return await asyncio.to_thread(lambda: self.finish(result, context=context))

    # ------------------------------------------------------------------ builders

    def _base(self, kind: RunKind, **fields: Any) -> RunRecord:
        fields.setdefault("duration_s", round(time.time() - self.started, 4))
        return RunRecord(
            id=self.run_id,
            kind=kind,
            source=self.source,
            conversation_id=self.conversation_id,
            created_at=self.created_at,
            prompt=self.prompt,
            system=self.system,
            plan=self.snapshot,
            extra=self.extra,
            route_events=self.route_events,
            **fields,
        )

    def _spec(self, index: int) -> dict[str, Any] | None:
        specs = self.snapshot.get("branches") or []
        return specs[index] if index < len(specs) else None

    def _single(self, result: LoopResult, context: AgentContext | None) -> RunRecord:
        spec = self._spec(0) or {}
        final = result.final_message
        model = spec.get("model") or (f"{final.provider}:{final.model}" if final else "")
        status = {"completed": "ok"}.get(result.reason, result.reason)
        branch = BranchRecord(
            index=0, label=_label(spec, model), model=model, status=status, error=result.error,
            error_kind=result.error_kind, text=result.text, input_tokens=result.usage.input,
            output_tokens=result.usage.output, cost_usd=result.cost_usd,
            latency_s=round(time.time() - self.started, 4), winner=result.ok, spec=spec or None,
        )  # fmt: skip
        return self._base(
            "run",
            status=status,
            winner=branch.label if result.ok else None,
            winner_model=model if result.ok else None,
            text=result.text,
            input_tokens=result.usage.input,
            output_tokens=result.usage.output,
            cost_usd=result.cost_usd,
            branches=[branch],
            messages=_optional(winner_history(result, self.prompt, context=context)),
        )

    def _race(self, result: ParallelLoopResult) -> RunRecord:
        labels = self.plan.labels if self.plan is not None else []
        decision = result.decision
        winner = result.selected
        branches = [
            _branch(o, _at(labels, o.config_index), self._spec(o.config_index),
                    score=decision.scores.get(o.config_index),
                    winner=winner is not None and o.config_index == winner.config_index)
            for o in result.outcomes
        ]  # fmt: skip
        verdict = decision.summary()
        if self.plan is not None and self.plan.judge is not None:
            verdict["judge"] = self.plan.judge.model
        verdict["evaluation_cost_usd"] = decision.cost_usd
        return self._base(
            "race",
            strategy=self.plan.strategy if self.plan is not None else decision.strategy,
            status=result.status,
            winner=_at(labels, winner.config_index) if winner is not None else None,
            winner_model=winner.config.model_config().spec if winner is not None else None,
            text=result.text,
            input_tokens=result.total_usage.input,
            output_tokens=result.total_usage.output,
            cost_usd=result.cost_usd,
            duration_s=round(result.wall_time_s, 4),
            verdict=verdict,
            branches=branches,
            messages=_optional(winner_history(result, self.prompt)),
        )

    def _bandit(self, result: BanditRaceResult) -> RunRecord:
        labels = self.plan.labels if self.plan is not None else []
        rows: list[BranchRecord] = []
        previews = result.previews.outcomes if result.previews is not None else []
        for phase, outcomes in (("preview", previews), ("answer", result.answers)):
            for outcome in outcomes:
                arm = str(outcome.config.extra.get("arm", outcome.config_id))
                spec = self._spec(labels.index(arm)) if arm in labels else None
                row = _branch(outcome, arm, spec, score=None, winner=outcome is result.answer)
                row.index, row.phase = len(rows), phase
                row.score = result.scores.get(arm) if phase == "preview" else None
                rows.append(row)
        verdict: dict[str, Any] = {
            "strategy": "bandit",
            "action": result.action,
            "contenders": result.contenders,
            "order": result.order,
            "scores": result.scores,
            "quality": result.quality,
            "verified": result.verified,
            "rewards": {arm: reward.reward for arm, reward in result.rewards.items()},
            "ranking": result.ranking.explain() if result.ranking is not None else [],
            "error": result.error,
        }
        if self.plan is not None and self.plan.judge is not None:
            verdict["judge"] = self.plan.judge.model
        answer = result.answer
        return self._base(
            "bandit",
            strategy="bandit",
            status=result.status,
            winner=result.winner,
            winner_model=answer.config.model_config().spec if answer is not None else None,
            text=result.text,
            input_tokens=result.usage.input,
            output_tokens=result.usage.output,
            cost_usd=result.cost_usd,
            duration_s=round(result.wall_time_s, 4),
            verdict=verdict,
            branches=rows,
            messages=_optional(winner_history(result, self.prompt)),
        )

    def _selection(self, result: SelectionResult) -> RunRecord:
        branches = [
            BranchRecord(
                index=i,
                label=c.name,
                model=", ".join(f"{step}={model}" for step, model in c.models.items()),
                status="ok" if c.accuracy is not None else "not evaluated",
                text="",
                input_tokens=c.input_tokens,
                output_tokens=c.output_tokens,
                cost_usd=c.cost_usd,
                latency_s=c.latency_p50,
                score=c.accuracy,
                winner=c.name == result.best.name,
                spec={"models": c.models, "evaluations": c.evaluations, "failures": c.failures},
            )
            for i, c in enumerate(result.combinations)
        ]
        return self._base(
            "select",
            strategy=result.algorithm,
            status=result.status,  # the races' words: ok, over_budget
            winner=result.best.name,
            winner_model=", ".join(result.best.models.values()),
            input_tokens=sum(c.input_tokens for c in result.combinations),
            output_tokens=sum(c.output_tokens for c in result.combinations),
            cost_usd=result.cost_usd,
            duration_s=round(result.wall_time_s, 4),
            verdict={
                "strategy": result.algorithm,
                "evaluations": result.evaluations,
                "grid_evaluations": result.grid_evaluations,
                "accuracy": result.best.accuracy,
                "ci": [result.best.ci_low, result.best.ci_high],
                "pareto": [c.name for c in result.pareto_front()],
                "params": result.params,
                "seed": result.seed,
            },
            branches=branches,
            warnings=[f"{f.combination} on item {f.datapoint}: {f.error}" for f in result.failures],
        )


def _branch(
    outcome: ParallelLoopOutcome,
    label: str,
    spec: dict[str, Any] | None,
    *,
    score: float | None,
    winner: bool,
) -> BranchRecord:
    return BranchRecord(
        index=outcome.config_index,
        label=label or outcome.config_id,
        model=outcome.config.model_config().spec,
        status=outcome.status,
        error=outcome.error,
        error_kind=outcome.error_kind,
        text=outcome.text,
        input_tokens=outcome.usage.input,
        output_tokens=outcome.usage.output,
        cost_usd=outcome.cost_usd,
        latency_s=round(outcome.latency_s, 4),
        score=score,
        winner=winner,
        spec=spec,
    )


def _at(labels: list[str], index: int) -> str:
    return labels[index] if 0 <= index < len(labels) else str(index)


def _label(spec: dict[str, Any], model: str) -> str:
    return str(spec.get("name") or model)


def winner_history(
    result: Any, prompt: str, *, context: AgentContext | None = None
) -> list[AgentMessage] | None:
    """The conversation the next turn continues from: the winner's whole history (``None``
    when there is no answer). A single run's history is its ``context`` after the run."""
    if isinstance(result, BanditRaceResult):
        answer = result.answer
        if answer is None or not result.text:
            return None
        # The answer race continued a preview after an internal "go on" prompt; what to
        # continue is the question and the whole answer.
        model = answer.config.model_config()
        reply = AssistantMessage(
            content=[TextContent(text=result.text)], model=model.id, provider=model.provider
        )
        return [UserMessage.text(prompt), reply]
    if isinstance(result, ParallelLoopResult):
        winner = result.selected
        return list(winner.context.messages) if winner is not None and winner.ok else None
    if isinstance(result, LoopResult):
        if not result.ok:
            return None
        return list(context.messages) if context is not None else list(result.messages)
    return None


def _optional(messages: Sequence[AgentMessage] | None) -> list[dict[str, Any]] | None:
    return None if messages is None else [m.model_dump(mode="json") for m in messages]
