"""``ModelSelector``: evaluate an agent's model combinations on a dataset and pick the best."""

from __future__ import annotations

import asyncio
import inspect
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._callables import accepts_positional
from .._logging import get_logger
from .._paths import user_path
from ..errors import BudgetExhausted, StateStoreError, UserError, redact
from ..events import Emitter, SelectionEnd, SelectionEvaluation, SelectionStart, Warning
from ..metering import Budget, Meter, metering
from ..providers.base import ModelConfig
from ..providers.registry import split_model_settings
from ..providers.retry import RetryPolicy
from ..types import Usage
from ._algorithms import SelectionAlgorithm, make_algorithm
from ._arena import Arena, Evaluation, Objective
from ._cache import ResponseCache
from ._cells import (
    AgentEvaluator,
    BatchEvaluator,
    CellRunner,
    Scorer,
    concurrency_split,
    read_datapoint,
)
from ._intercept import InterceptedCall, InterceptScope, intercepting
from ._intercept_wire import ModelPrices, normalise_prices
from ._journal import RunJournal, default_journal_path, run_fingerprint
from ._meter import MeteredModel
from ._results import SelectionResult, build_result
from ._space import SearchSpace

__all__ = [
    "AgentEvaluator",
    "ModelSelector",
    "candidate_label",
    "concurrency_split",
    "default_cache_path",
    "step_labels",
]

logger = get_logger("phi_core.select")

Candidate = str | ModelConfig | MeteredModel
ProgressCallback = Callable[[Arena], None]
EvaluationCallback = Callable[[int, int, Evaluation], None]
"""Called as each (combination, datapoint) evaluation finishes: ``(k, i, evaluation)``."""
Executor = Literal["local", "ray"]

NO_CALLS_WARNING = (
    "No model call was metered in this selection run, so its tokens and dollars are 0. Calls "
    "through MeteredModel handles, the openai, anthropic and google-genai SDKs, plain httpx and "
    "requests made by the agent in the run are counted; calls from other HTTP libraries "
    "(urllib, aiohttp), subprocesses or other processes are not."
)


NO_AGENT_CALLS_WARNING = (
    "No model call of the agent was metered in this selection run (only the {calls} of the "
    "algorithm's proposer were, and they are in cost_usd), so the combinations' tokens and "
    "dollars are 0. If the agent calls models, those calls were not seen: calls through "
    "MeteredModel handles, the openai, anthropic and google-genai SDKs, plain httpx and requests "
    "made by the agent in the run are counted; calls from other HTTP libraries (urllib, "
    "aiohttp), subprocesses or other processes are not."
)


def default_cache_path() -> Path:
    """``$PHI_HOME/select-cache.sqlite`` (``PHI_HOME`` defaults to ``~/.phi``)."""
    return user_path("select-cache.sqlite")


def candidate_label(candidate: Any) -> str:
    """The name of a candidate in results: a string itself; a number (or ``None``) its
    ``repr``; else its ``model``, ``model_name``, ``id`` or ``name`` (attribute or key); else its
    type's name (:func:`step_labels` tells such candidates apart). Never a memory address, so a
    run's names (its ties broken by name, its journal) are the same in every run, and never an
    object's ``repr``, which may hold a credential."""
    if isinstance(candidate, str):
        return candidate
    if isinstance(candidate, MeteredModel):
        return candidate.name
    if candidate is None or isinstance(candidate, bool | int | float):
        return repr(candidate)
    for key in ("model", "model_name", "id", "name"):
        value = (
            candidate.get(key) if isinstance(candidate, Mapping) else getattr(candidate, key, None)
        )
        if isinstance(value, str) and value:
            return value
    return type(candidate).__name__  # not its repr, which may hold a credential


def step_labels(step: str, candidates: Sequence[Any]) -> list[str]:
    """:func:`candidate_label` of each candidate of ``step``, made unique: candidates that share
    a label (two settings of one model) get the generation settings that tell them apart in the
    ``model@key=value`` syntax (so an exported config keeps them), else their place in the list
    (``#2``). Equal candidates are a mistake. Only known settings are shown — never another
    key of the candidate, which may be a credential."""
    labels = [candidate_label(c) for c in candidates]
    for label in dict.fromkeys(x for x in labels if labels.count(x) > 1):  # in list order
        same = [i for i, x in enumerate(labels) if x == label]
        for a, i in enumerate(same):
            for j in same[a + 1 :]:
                if _equal(candidates[i], candidates[j]):
                    raise UserError(
                        f"Step {step!r} lists a candidate twice: {label!r} (items {i} and {j})."
                    )
        settings = [_settings(candidates[i]) for i in same]
        differing = [k for k in _SETTING_KEYS if len({repr(s.get(k)) for s in settings}) > 1]
        for i, own in zip(same, settings, strict=True):
            shown = ",".join(f"{k}={own[k]}" for k in differing if k in own)
            labels[i] = f"{label}@{shown}" if shown else f"{label}#{i + 1}"
        for i in same:  # settings that do not tell every one apart: places do
            if sum(labels[j] == labels[i] for j in same) > 1:
                labels[i] = f"{label}#{i + 1}"
    return labels


# generation settings a candidate object or mapping may carry (what tells two settings apart)
_SETTING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "max_tokens",
    "max_output_tokens",
    "reasoning_effort",
    "frequency_penalty",
    "presence_penalty",
)


def _settings(candidate: Any) -> dict[str, str]:
    """The known generation settings of a candidate whose value is a plain number or word."""
    out: dict[str, str] = {}
    for key in _SETTING_KEYS:
        value = (
            candidate.get(key) if isinstance(candidate, Mapping) else getattr(candidate, key, None)
        )
        if isinstance(value, bool | int | float) or (
            isinstance(value, str) and value.replace("-", "").replace("_", "").isalnum()
        ):
            out[key] = str(value)
    return out


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # an object whose == is not a truth value (an array): not equal
        return a is b


class ModelSelector:
    """Find the best model per step of a multi-step agent on a small dataset.

    Args:
        agent: a class built from ``{step: model}`` with a sync or async ``run(input)``, or a
            function ``(models, input)`` (sync or async). With handles (the default) a step calls
            ``await models["solver"].complete(prompt)`` (sync agents: ``complete_sync``); the
            agent may also call vendors' SDKs or httpx itself: those calls are intercepted,
            metered, cached, limited and budgeted the same way.
        models: ``{step: [candidate, ...]}``; with handles a candidate is a ``provider:model``
            string, a :class:`ModelConfig` or a ready :class:`MeteredModel`; with
            ``model_handles=False`` any value, given to the agent as it is.
        dataset: a sequence of ``(input, expected)`` pairs or ``{"input": ..., "expected":
            ...}`` rows (any object with ``len`` and indexing: a list, a Hugging Face split).
        scorer: ``(expected, actual) -> float`` in [0, 1] (or bool), sync or async.
        algorithm: a name (``"auto"`` = ``"regret_race"``, ``"regret_race_thrifty"``,
            ``"paired_race"``, ``"arm_elimination"``, ``"matrix_ucb_lrf"``, ``"lm_proposal"``,
            ...) or a :class:`SelectionAlgorithm` instance. Warnings an algorithm records (e.g.
            an LM proposer's unusable replies) are added to the result's ``warnings``.
        max_concurrent: agent runs in flight at once, split between combinations and datapoints.
        seed: shuffles the dataset and seeds the algorithm; the same seed reproduces the run.
        budget: a :class:`~phi_core.metering.Budget` (dollars actually paid, tokens, calls, wall
            clock — every call is held to it by reservation, so none overshoots), an ``int``
            (max evaluations) or a ``float`` (max dollars).
        max_evaluations: stop after this many (combination, datapoint) evaluations.
        cache: ``True`` (default: ``$PHI_HOME/select-cache.sqlite``), ``False``, a path, or a
            :class:`ResponseCache`.
        retry: retry policy for each model call.
        algorithm_params: keyword arguments for the named algorithm.
        model_prices: ``{model: {"input_price": ..., "output_price": ...}}`` in $ per million
            tokens for intercepted calls (they win over the price table).
        cost_weight, latency_weight: the search maximises ``score - cost_weight * norm(cost) -
            latency_weight * norm(latency)`` per datapoint (see :class:`Objective`).
        model_handles: ``False`` gives the agent each candidate as it is (AgentOpt's way);
            its calls are then counted through interception only.
        executor: ``"local"`` (this event loop) or ``"ray"`` (evaluation batches as Ray tasks;
            extra ``ray``).
        ray_address: the Ray cluster to connect to (``None``: the one already initialised, else
            a local one started for the run and stopped after it).
        ray_options: options for the Ray tasks (default ``{"num_cpus": 1}``).
        journal: record every finished cell so an interrupted run can resume: ``True``
            (``$PHI_HOME/select-runs.sqlite``), ``False`` or a path.
        timeout: seconds one agent run may take (counted from when it starts; a sync agent's
            from when a thread picks it up). A run past it is stopped, scores 0 and is reported
            with status ``timeout``; the calls it made still count. The scorer (an LLM judge)
            gets the same time again for each verdict; one past it fails that cell. ``None``: no
            limit. A sync agent's or scorer's thread cannot be stopped, only abandoned: it runs
            on in the background.
    """

    def __init__(
        self,
        agent: Any,
        models: Mapping[str, Sequence[Any]],
        dataset: Sequence[Any],
        scorer: Scorer,
        algorithm: str | SelectionAlgorithm = "auto",
        max_concurrent: int = 20,
        seed: int | None = None,
        budget: Budget | int | float | None = None,
        *,
        max_evaluations: int | None = None,
        cache: bool | str | Path | ResponseCache = True,
        retry: RetryPolicy | None = None,
        algorithm_params: Mapping[str, Any] | None = None,
        model_prices: ModelPrices | None = None,
        cost_weight: float = 0.0,
        latency_weight: float = 0.0,
        model_handles: bool = True,
        executor: Executor = "local",
        ray_address: str | None = None,
        ray_options: Mapping[str, Any] | None = None,
        journal: bool | str | Path = True,
        timeout: float | None = None,
    ) -> None:
        if not callable(agent):
            raise UserError(
                "`agent` must be a class with run(input) or a function (models, input)."
            )
        if inspect.isclass(agent):
            if not callable(getattr(agent, "run", None)):
                raise UserError(f"Agent class {agent.__name__!r} has no `run(input)` method.")
            if not accepts_positional(agent, 1):
                raise UserError(
                    f"Agent class {agent.__name__!r} is built as {agent.__name__}(models), with "
                    f"the {{step: model}} dict; its __init__ must take that one argument."
                )
            if not _run_takes_input(agent):
                raise UserError(
                    f"{agent.__name__}.run is called as run(input) with one dataset input; "
                    f"its signature {_signature(getattr(agent, 'run', None))} does not take that."
                )
        elif not accepts_positional(agent, 2):
            raise UserError(
                f"The agent function is called as agent(models, input); its signature "
                f"{_signature(agent)} does not take those two arguments."
            )
        if not callable(scorer):
            raise UserError("`scorer` must be a function (expected, actual) -> float in [0, 1].")
        if not accepts_positional(scorer, 2):
            raise UserError(
                f"The scorer is called as scorer(expected, actual); its signature "
                f"{_signature(scorer)} does not take those two arguments."
            )
        concurrency_split(max_concurrent, 1)
        if (
            isinstance(dataset, str | bytes | Mapping)
            or not hasattr(dataset, "__len__")
            or not hasattr(dataset, "__getitem__")
        ):
            iterable = hasattr(dataset, "__iter__") and not isinstance(
                dataset, str | bytes | Mapping
            )
            raise UserError(
                "`dataset` must be a sequence (a list) of (input, expected) pairs or "
                f'{{"input": ..., "expected": ...}} rows, got {type(dataset).__name__}'
                + (": pass list(...) of it." if iterable else ".")
            )
        if len(dataset) == 0:
            raise UserError("The dataset is empty; give at least one (input, expected) pair.")
        for i in range(len(dataset)):  # every item, before anything is spent on the first ones
            read_datapoint(dataset, i)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise UserError(
                f"`timeout` must be a number of seconds > 0 (or None for no limit), got {timeout!r}."
            )
        self.timeout = None if timeout is None else float(timeout)
        if executor not in ("local", "ray"):
            raise UserError(f"`executor` must be 'local' or 'ray', got {executor!r}.")
        self.agent = agent
        self.dataset = dataset
        self.scorer = scorer
        self.max_concurrent = max_concurrent
        self.seed = seed
        self.budget, self.max_evaluations = _budget(budget, max_evaluations)
        self.retry = retry
        if not isinstance(cache, bool | str | Path | ResponseCache):
            raise UserError(
                f"`cache` must be True, False, a path or a ResponseCache, got {cache!r}."
            )
        self._cache_setting = cache
        self.cache: ResponseCache | None = cache if isinstance(cache, ResponseCache) else None
        """The response cache (opened on the first run, so constructing a selector touches no file)."""
        self.model_prices = normalise_prices(model_prices)
        self.objective = Objective(cost_weight, latency_weight)
        self.executor: Executor = executor
        self.ray_address = ray_address
        self.ray_options = dict(ray_options or {})
        if not isinstance(journal, bool | str | Path):
            raise UserError(f"`journal` must be True, False or a path, got {journal!r}.")
        self._journal_setting = journal
        self._algorithm = algorithm
        self._algorithm_params = dict(algorithm_params or {})
        make_algorithm(algorithm, **self._algorithm_params)  # fail fast on a bad name or parameter
        self.model_handles = model_handles
        self._handles: dict[str, dict[str, MeteredModel]] = {}
        self._candidates: dict[str, dict[str, Any]] = {}
        steps: dict[str, list[str]] = {}
        if not isinstance(models, Mapping):
            raise UserError(
                "`models` must map each step of the agent to its candidates, e.g. "
                f"{{'solver': ['openai:gpt-4o-mini', 'openai:gpt-4o']}}; got a "
                f"{type(models).__name__}."
            )
        for step, candidates in models.items():
            if not isinstance(step, str):
                raise UserError(f"A step's name must be a string, got {step!r} in `models`.")
            if isinstance(candidates, str | bytes) or not isinstance(candidates, Sequence):
                got = repr(candidates) if isinstance(candidates, str) else type(candidates).__name__
                raise UserError(f"models[{step!r}] must be a list of candidates, got {got}.")
            values = [self._handle(c) if model_handles else c for c in candidates]
            steps[step] = step_labels(step, values)
            self._candidates[step] = dict(zip(steps[step], values, strict=True))
            self._handles[step] = {
                label: v
                for label, v in self._candidates[step].items()
                if isinstance(v, MeteredModel)
            }
        self.space = SearchSpace(steps)
        self.last_evaluator: BatchEvaluator | None = None
        self.last_scope: InterceptScope | None = None
        """The interception scope of the last run (its ``calls`` log every intercepted call)."""
        self._run_meter: Meter | None = None
        """The meter of the last run: every call made in this process while it ran."""

    def _handle(self, candidate: Candidate) -> MeteredModel:
        if isinstance(candidate, MeteredModel):
            return candidate
        if isinstance(candidate, ModelConfig):
            return MeteredModel(candidate, retry=self.retry)
        if isinstance(candidate, str):
            return self._handle_from_string(candidate)
        raise UserError(
            f"A candidate model must be a `provider:model` string, a ModelConfig or a MeteredModel, got {candidate!r} "
            "(pass model_handles=False to give the agent candidates as they are)."
        )

    def _handle_from_string(self, candidate: str) -> MeteredModel:
        """``provider:model`` or ``provider:model@temperature=0.7,max_tokens=64`` (the same
        settings syntax as ``phi race -m``), so one model can compete at several settings."""
        model, settings = split_model_settings(candidate)
        if not settings:
            return MeteredModel(model, retry=self.retry)
        parsers: dict[str, Callable[[str], float | int]] = {
            "temperature": float,
            "top_p": float,
            "seed": int,
            "max_tokens": int,
        }
        values: dict[str, Any] = {}
        for key, raw in settings.items():
            parse = parsers.get(key)
            if parse is None:
                raise UserError(
                    f"Unknown setting {key!r} in candidate {candidate!r}; "
                    f"use one of: {', '.join(parsers)}."
                )
            try:
                values[key] = parse(raw)
            except ValueError:
                raise UserError(
                    f"Setting {key!r} in candidate {candidate!r} must be a number, got {raw!r}."
                ) from None
        return MeteredModel(model, retry=self.retry, name=candidate, **values)

    def candidates(self) -> dict[str, dict[str, Any]]:
        """``{step: {label: candidate as given to the agent}}``."""
        return {s: dict(c) for s, c in self._candidates.items()}

    def _runner(self) -> CellRunner:
        return CellRunner(
            self.agent,
            self._candidates,
            self.dataset,
            self.scorer,
            self.space,
            self.seed,
            self.timeout,
        )

    @property
    def journal_path(self) -> Path | None:
        """The file the run journal is kept in (``None`` with ``journal=False``)."""
        setting = self._journal_setting
        if setting is False:
            return None
        return default_journal_path() if setting is True else Path(setting)

    def _journal(self, algorithm: SelectionAlgorithm) -> RunJournal | None:
        path = self.journal_path
        if path is None:
            return None
        run = run_fingerprint(
            combinations=[self.space.name(k) for k in range(len(self.space))],
            dataset=self.dataset,
            agent=self.agent,
            scorer=self.scorer,
            seed=self.seed,
            algorithm=algorithm.name,
            params=algorithm.params(),
            objective=(self.objective.cost_weight, self.objective.latency_weight),
            timeout=self.timeout,
            models=self._model_identities(),
        )
        return RunJournal(path, run)

    def _model_identities(self) -> list[str]:
        """What each candidate of each step is, beyond its label: the resolved provider, model
        and endpoint and the settings of a model handle (another object: its type)."""
        rows = []
        for step, candidates in self._candidates.items():
            for label, value in candidates.items():
                if isinstance(value, MeteredModel):
                    config = value.config
                    what = (
                        f"{config.spec}@{config.base_url or ''} t={value.temperature} "
                        f"p={value.top_p} s={value.seed} m={value.max_tokens}"
                    )
                else:
                    what = type(value).__name__
                rows.append(f"{step}={label}:{what}")
        return rows

    async def select_best(
        self,
        *,
        on_progress: ProgressCallback | None = None,
        resume: bool = False,
        on_evaluation: EvaluationCallback | None = None,
    ) -> SelectionResult:
        """Run the algorithm and return the results (the winner is ``result.best``).

        ``resume=True`` continues an interrupted run with the same settings: the cells its
        journal recorded are not run again. ``on_progress(arena)`` is called after every batch,
        ``on_evaluation(k, i, evaluation)`` as each evaluation run now finishes (a progress bar
        per evaluation).

        Event observers (:func:`phi_core.events.add_observer`, OpenTelemetry spans) see a
        :class:`~phi_core.events.SelectionStart`, a ``SelectionEvaluation`` per evaluation run
        and exactly one ``SelectionEnd``, whatever ends the run. Every one of them carries the
        run's id as both ``session_id`` and ``loop_id`` (as a race's own events do); the result
        has it as :attr:`SelectionResult.session_id`.
        """
        session_id = str(uuid.uuid4())
        emitter = Emitter()
        if not emitter.active:
            return await self._select_best(on_progress, resume, on_evaluation, session_id)
        name = self._algorithm if isinstance(self._algorithm, str) else self._algorithm.name
        emitter.emit(
            SelectionStart(
                loop_id=session_id,
                session_id=session_id,
                algorithm=name,
                combinations=len(self.space),
                datapoints=len(self.dataset),
            )
        )

        def observe(k: int, i: int, evaluation: Evaluation) -> None:
            emitter.emit(
                SelectionEvaluation(
                    loop_id=session_id,
                    session_id=session_id,
                    combination=self.space.name(k),
                    datapoint=i,
                    status=evaluation.status,
                    score=evaluation.score,
                    usage=evaluation.usage,
                    cost_usd=evaluation.cost_usd,
                    latency_s=evaluation.latency_s,
                    calls=evaluation.calls,
                    model_usage=dict(evaluation.model_usage),
                    error_kind=evaluation.error_kind,
                    error=evaluation.error,
                )
            )
            if on_evaluation is not None:
                on_evaluation(k, i, evaluation)

        def end(status: str, usage: Usage | None = None, **fields: Any) -> None:
            """The one SelectionEnd: what was paid so far (``usage``: the result's own)."""
            paid, cost = self._paid()
            emitter.emit(
                SelectionEnd(
                    loop_id=session_id,
                    session_id=session_id,
                    status=status,
                    usage=paid if usage is None else usage,
                    cost_usd=cost,
                    **fields,
                )
            )

        try:
            result = await self._select_best(on_progress, resume, observe, session_id)
        except (asyncio.CancelledError, KeyboardInterrupt):  # stopped, by the program or a Ctrl-C
            end("cancelled")
            raise
        except BaseException as exc:
            end("error", error=redact(f"{type(exc).__name__}: {exc}"))
            raise
        for message in result.warnings:  # an algorithm's fallback, unpriced models, ...
            emitter.emit(Warning(loop_id=session_id, message=message))
        end(result.status, result.usage, best=result.best.name, evaluations=result.evaluations)
        return result

    def _paid(self) -> tuple[Usage, float]:
        """Tokens and dollars the last run actually paid, over the same calls: those sent (not
        cache hits, refusals or cells resumed from the journal), the agents', the scorer's and the
        algorithm's own. The run's meter saw every call made in this process; cells run by Ray
        made theirs in its workers, so their evaluations' paid figures are added."""
        meter = self._run_meter
        if meter is None:
            return Usage(), 0.0
        usage, cost = meter.paid_usage, meter.spent
        evaluator = self.last_evaluator
        if self.executor == "ray" and evaluator is not None:
            for _, _, evaluation in evaluator.completed:
                sent = evaluation.usage_sent
                usage += evaluation.usage if sent is None else sent
                cost += evaluation.paid
        return usage, cost

    async def _select_best(
        self,
        on_progress: ProgressCallback | None,
        resume: bool,
        on_evaluation: EvaluationCallback | None,
        session_id: str,
    ) -> SelectionResult:
        self._run_meter = self.last_evaluator = None
        algorithm = make_algorithm(self._algorithm, **self._algorithm_params)
        for handles in self._handles.values():
            for h in handles.values():
                # a missing API key (named with its variable) or extra is refused now, before
                # any model call is paid for, as a race refuses it
                h.provider  # noqa: B018
        loop = asyncio.get_running_loop()
        stores: list[tuple[str, ResponseCache | RunJournal | None]] = []
        if self.cache is None:
            self.cache = _cache(self._cache_setting)
            stores.append(("response cache", self.cache))  # opened by this run
        for handles in self._handles.values():
            for h in handles.values():
                h.loop = loop
                if h.cache is None:
                    h.cache = self.cache
        journal = self._journal(algorithm)
        stores.append(("run journal", journal))
        if resume and journal is None:
            raise UserError("resume=True needs the run journal; do not pass journal=False.")
        recorded = journal.load() if journal is not None and resume else {}
        # a cell the budget refused did not run (journals of before recorded it): run it again
        recorded = {key: ev for key, ev in recorded.items() if ev.status != "over_budget"}
        if resume and journal is not None and journal.error is not None:
            journal.close()
            raise StateStoreError(  # before anything is spent again
                f"Cannot resume: the run journal {journal.path} cannot be read ({journal.error}). "
                "Fix or free it and resume again; running without resume starts over."
            )
        started = time.perf_counter()
        scope = InterceptScope(cache=self.cache, model_prices=self.model_prices, loop=loop)
        run_meter = self._run_meter = Meter(self.budget)
        evaluator = self._evaluator(recorded, journal, on_evaluation)
        self.last_evaluator = evaluator
        try:
            arena = Arena(
                len(self.space),
                len(self.dataset),
                evaluator,
                seed=self.seed,
                names=[self.space.name(k) for k in range(len(self.space))],
                budget=self.budget,
                max_evaluations=self.max_evaluations,
                on_batch=on_progress,
                objective=self.objective,
                unpriced=lambda: scope.unpriced | evaluator.unpriced,
            )
            exhausted = False
            with intercepting(scope), metering(run_meter):
                try:
                    recommended = await algorithm.run(arena, self.space)
                except BudgetExhausted:
                    exhausted = True
                    recommended = arena.best(algorithm.pool)
        finally:
            await evaluator.aclose()
            if journal is not None:
                journal.close()
        self.last_scope = scope
        unpriced = scope.unpriced | evaluator.unpriced
        proposal_cost = float(getattr(algorithm, "proposal_cost_usd", 0.0))
        proposal_calls = int(getattr(algorithm, "proposal_calls", 0))
        remaining = run_meter.remaining_wall()
        warnings = _warnings(
            arena,
            unpriced,
            proposal_calls,
            wall_s=self.budget.max_wall_s
            if self.budget is not None and remaining is not None and remaining <= 0
            else None,
            timeout=self.timeout,
        )
        estimated = scope.estimated
        if estimated:
            warnings.append(_estimated_warning(estimated, len(scope.calls)))
        if resume and not recorded:
            warnings.append(NOTHING_TO_RESUME)
        for warning in warnings:
            logger.warning("%s", warning)
        warnings += algorithm.warnings  # logged by the algorithm as they happened
        warnings += [  # logged when the file was moved
            f"The {what} {store.path} was not a database: it was moved to {store.set_aside} "
            "(kept) and a fresh one was used."
            for what, store in stores
            if store is not None and store.set_aside is not None
        ]
        return build_result(
            arena,
            self.space,
            recommended,
            algorithm=algorithm.name,
            params=algorithm.params(),
            pool=algorithm.pool,
            spent=evaluator.spent + proposal_cost,
            proposal_cost_usd=proposal_cost,
            wall_time=time.perf_counter() - started,
            budget_exhausted=exhausted,
            warnings=warnings,
            unpriced=sorted(unpriced),
            resumed=evaluator.resumed,
            objective=self.objective,
            session_id=session_id,
            usage=self._paid()[0],
        )

    def _evaluator(
        self,
        recorded: Mapping[tuple[str, int], Evaluation],
        journal: RunJournal | None,
        on_evaluation: EvaluationCallback | None = None,
    ) -> BatchEvaluator:
        on_cell = None
        if journal is not None or on_evaluation is not None:

            async def on_cell(k: int, i: int, evaluation: Evaluation) -> None:
                if journal is not None and self._finished(evaluation):
                    await journal.record(self.space.name(k), i, evaluation)
                if on_evaluation is not None:
                    on_evaluation(k, i, evaluation)

        if self.executor == "ray":
            from ._ray import RayEvaluator

            return RayEvaluator(
                self._runner(),
                self.max_concurrent,
                recorded,
                on_cell,
                cache_path=self.cache.path if self.cache is not None else None,
                model_prices=self.model_prices,
                budget=self.budget,
                address=self.ray_address,
                options=self.ray_options,
            )
        return AgentEvaluator(self._runner(), self.max_concurrent, recorded, on_cell)

    def _finished(self, evaluation: Evaluation) -> bool:
        """Whether a cell ran to its own end, so a resumed run may take it from the journal
        instead of running it again. Not when the run's budget stopped it: a refused call
        (``over_budget``), or a timeout once the budget's wall clock has run out (a run resumed
        with more time runs it again; one its own ``timeout`` stopped then is run again too,
        which costs a run but never keeps a result the budget cut short)."""
        if evaluation.status == "over_budget":
            return False
        if evaluation.status == "timeout" and self._run_meter is not None:
            remaining = self._run_meter.remaining_wall()  # a timer may fire a little early
            return remaining is None or remaining > _CLOCK_SLACK_S
        return True

    def select_best_sync(
        self, *, on_progress: ProgressCallback | None = None, resume: bool = False
    ) -> SelectionResult:
        """Blocking :meth:`select_best` (must not be called from a running event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.select_best(on_progress=on_progress, resume=resume))
        raise UserError(
            "select_best_sync() was called inside an event loop; use `await select_best()`."
        )


_CLOCK_SLACK_S = 0.05
"""How early the budget's wall clock may be seen to stop a call (timers fire a little early)."""

NOTHING_TO_RESUME = (
    "Nothing was resumed: the run journal holds no finished evaluation of a run with these "
    "settings, so this one ran from the start. A run resumes only with the same combinations "
    "(the same models and endpoints behind their names), dataset, agent and scorer (code and "
    "prompts included), seed, algorithm (and its parameters) and objective."
)


def _warnings(
    arena: Arena,
    unpriced: set[str],
    proposal_calls: int = 0,
    *,
    wall_s: float | None = None,
    timeout: float | None = None,
) -> list[str]:
    """What the run's caller should know. ``wall_s``: the budget's wall clock (of that many
    seconds) ran out during the run; ``timeout``: the run's per-evaluation timeout."""
    out: list[str] = []
    if arena.evaluations and int(arena.calls[arena.observed].sum()) == 0:
        out.append(
            NO_AGENT_CALLS_WARNING.format(
                calls=f"{proposal_calls} call" + ("s" if proposal_calls > 1 else "")
            )
            if proposal_calls
            else NO_CALLS_WARNING
        )
    else:
        silent = _silent_cells(arena)
        if silent:
            k, p = silent[0]
            out.append(
                f"{len(silent)} of {arena.evaluations} evaluations finished without metering a "
                f"single model call while others metered some (first: {arena.names[k]} on dataset "
                f"item {arena.order[p]}). If the agent called a model there, the call left the "
                "run's reach (another process, an HTTP library other than httpx and requests, a "
                "thread pool fed from outside the run) and its tokens and dollars are missing from "
                "the totals."
            )
    if arena.errors:
        out.append(_failure_warning(arena, wall_s=wall_s, timeout=timeout))
    if unpriced:
        out.append(
            f"No price for {', '.join(sorted(unpriced))}: their calls count as $0. Pass "
            'model_prices={"<model>": {"input_price": ..., "output_price": ...}} ($ per '
            "million tokens) to price them."
        )
    return out


def _estimated_warning(estimated: Sequence[InterceptedCall], intercepted: int) -> str:
    """How many intercepted calls had their tokens estimated, why, and how to meter them."""
    models = sorted({c.model for c in estimated})
    shown = ", ".join(models[:3]) + (f" and {len(models) - 3} more" if len(models) > 3 else "")
    return (
        f"{len(estimated)} of {intercepted} intercepted model calls ({shown}) reported no token "
        "usage, so their tokens were estimated from the text and their cost is an estimate (it "
        "can be far off). An OpenAI stream reports its usage only when asked: pass "
        'stream_options={"include_usage": True} to chat.completions.create(..., stream=True).'
    )


def _silent_cells(arena: Arena) -> list[tuple[int, int]]:
    """The evaluations that finished without an error and without a single metered call (a
    cache hit counts as a call), in (combination, position) order."""
    silent = arena.observed & (arena.calls == 0)
    return [
        (int(k), int(p))
        for k, p in zip(*np.nonzero(silent), strict=True)
        if (k, p) not in arena.errors
    ]


_STOPPED: frozenset[str] = frozenset({"timeout", "over_budget"})
"""Statuses of evaluations a timeout or the budget stopped, rather than failures of their own."""


def _failure_warning(
    arena: Arena, *, wall_s: float | None = None, timeout: float | None = None
) -> str:
    """How many evaluations failed (and scored 0), grouped by what raised, with the first one.
    Those a timeout or the budget's wall clock stopped are told apart from those that failed on
    their own, so the advice fits (more time, not a fix)."""
    kinds = Counter(message.split(":", 1)[0] for message in arena.errors.values())
    grouped = ", ".join(f"{kind} x{count}" for kind, count in sorted(kinds.items()))
    (k, p), first = min(arena.errors.items())
    where = f"first: {arena.names[k]} on dataset item {arena.order[p]}: {first}"
    failed = len(arena.errors)
    stopped = [key for key in arena.errors if _status(arena, key) in _STOPPED]
    cause, remedy = _stop_cause(arena, stopped, wall_s, timeout)
    if failed == arena.evaluations and len(stopped) == failed:
        return (
            f"Every evaluation was stopped before it finished ({grouped}; {where}): {cause}, so "
            "the ranking and the best mean nothing. They did not fail on their own: give them "
            f"more time ({remedy}) and run again."
        )
    note = (
        f" {len(stopped)} of them did not fail on their own but were stopped: {cause} (more "
        f"time: {remedy})."
        if stopped
        else ""
    )
    if failed == arena.evaluations:
        return (
            f"Every evaluation failed ({grouped}; {where}), so the ranking and the best mean "
            f"nothing: fix what raised and run again.{note}"
        )
    return (
        f"{failed} of {arena.evaluations} evaluations failed and scored 0 ({grouped}; {where})."
        f"{note} Each one is in the result's `failures`."
    )


def _status(arena: Arena, key: tuple[int, int]) -> str:
    found = arena.cells.get(key)
    return found.status if found is not None else "error"


def _stop_cause(
    arena: Arena, stopped: Sequence[tuple[int, int]], wall_s: float | None, timeout: float | None
) -> tuple[str, str]:
    """What stopped the evaluations ``stopped`` — their own ``timeout``, else the budget's wall
    clock when it ran out, else a deadline of a model call's or of the agent's own — and what
    would give them more time, in words."""
    own = [key for key in stopped if "ran longer than timeout=" in arena.errors[key]]
    causes: list[str] = []
    remedies: list[str] = []
    if own and timeout is not None:
        causes.append(f"they ran longer than timeout={timeout:g} s")
        remedies.append("a larger timeout")
    if len(own) < len(stopped):
        if wall_s is not None:
            causes.append(f"the budget's wall clock ran out (max_wall_s={wall_s:g} s)")
            remedies.append("a larger wall-clock budget: Budget.max_wall_s, phi select --deadline")
        else:
            causes.append("a deadline passed (a model call's, or the agent's own)")
            remedies.append("longer deadlines")
    if not causes:  # a message that only reads like a timeout's
        causes.append("a timeout")
        remedies.append("a larger timeout")
    return " and ".join(causes), "; ".join(remedies)


def _budget(
    budget: Budget | int | float | None, max_evaluations: int | None
) -> tuple[Budget | None, int | None]:
    """``(budget, max_evaluations)`` from the ``budget`` shorthand and the explicit limit."""
    if max_evaluations is not None and (isinstance(max_evaluations, bool) or max_evaluations < 1):
        raise UserError(f"max_evaluations must be an int >= 1, got {max_evaluations!r}.")
    if budget is None or isinstance(budget, Budget):
        return budget, max_evaluations
    if isinstance(budget, bool):
        raise UserError("`budget` must be a Budget, an int (evaluations) or a float (dollars).")
    if isinstance(budget, int):
        if max_evaluations is not None:
            raise UserError("Give the evaluation limit once: `budget=N` or `max_evaluations=N`.")
        if budget < 1:
            raise UserError(f"An evaluation budget must be >= 1, got {budget!r}.")
        return None, budget
    if isinstance(budget, float):
        return Budget(max_cost_usd=budget), max_evaluations
    raise UserError(
        f"`budget` must be a Budget, an int (evaluations) or a float (dollars), got {budget!r}."
    )


def _cache(cache: bool | str | Path | ResponseCache) -> ResponseCache | None:
    if isinstance(cache, ResponseCache):
        return cache
    if cache is False:
        return None
    if cache is True:
        return ResponseCache(default_cache_path())
    return ResponseCache(cache)


def _run_takes_input(agent: Any) -> bool:
    """Whether ``agent(models).run(input)`` fits the class's ``run`` signature."""
    raw = inspect.getattr_static(agent, "run", None)
    bound = isinstance(raw, staticmethod | classmethod) or not inspect.isfunction(raw)
    return accepts_positional(agent.run, 1 if bound else 2)  # a plain function also takes self


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(unknown)"
