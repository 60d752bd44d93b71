"""``ModelSelector``: evaluate an agent's model combinations on a dataset and pick the best."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from .._paths import user_path
from ..errors import BudgetExhausted, UserError
from ..metering import Budget, Meter, metering
from ..outcome import ErrorKind
from ..providers.base import ModelConfig
from ..providers.registry import split_model_settings
from ..providers.retry import RetryPolicy
from ._algorithms import SelectionAlgorithm, make_algorithm, run_algorithm
from ._arena import Arena, Evaluation
from ._cache import ResponseCache
from ._meter import MeteredModel
from ._results import SelectionResult, build_result
from ._space import SearchSpace

__all__ = ["AgentEvaluator", "ModelSelector", "concurrency_split", "default_cache_path"]

Candidate = str | ModelConfig | MeteredModel
Scorer = Callable[[Any, Any], float | bool | Awaitable[float | bool]]
ProgressCallback = Callable[[Arena], None]


def concurrency_split(max_concurrent: int, batch_size: int) -> tuple[int, int]:
    """``(n_combo, dp_concurrent)`` for a batch giving each combination ``batch_size`` datapoints.

    Datapoint parallelism comes first: ``dp_concurrent = min(max_concurrent, batch_size)`` and
    ``n_combo = max_concurrent // dp_concurrent``, so ``n_combo * dp_concurrent <= max_concurrent``.
    """
    if max_concurrent < 1:
        raise UserError(f"max_concurrent must be >= 1, got {max_concurrent!r}.")
    dp = max(1, min(max_concurrent, batch_size))
    return max(1, max_concurrent // dp), dp


def default_cache_path() -> Path:
    """``$PHI_HOME/select-cache.sqlite`` (``PHI_HOME`` defaults to ``~/.phi``)."""
    return user_path("select-cache.sqlite")


class AgentEvaluator:
    """Runs the user's agent on (combination, datapoint) cells with two-level concurrency.

    For each batch handed over by the algorithm, at most ``n_combo`` combinations run at once and
    each runs at most ``dp_concurrent`` datapoints at once (:func:`concurrency_split`, recomputed
    for every batch, i.e. at each algorithm's own granularity). Model calls additionally share
    the process-wide provider limiter. Sync agents run in a thread pool sized ``max_concurrent``
    (not the default executor's handful of threads).
    """

    def __init__(
        self, selector: ModelSelector, space: SearchSpace, executor: ThreadPoolExecutor
    ) -> None:
        self.selector = selector
        self.space = space
        self.executor = executor
        self.spent = 0.0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.splits: list[tuple[int, int]] = []
        self.completed: list[tuple[int, int, Evaluation]] = []
        """Every finished cell as ``(combination, datapoint, evaluation)``, in finishing order —
        also those of a batch that was interrupted before the arena recorded it."""

    async def evaluate(self, batch: Mapping[int, Sequence[int]]) -> dict[int, list[Evaluation]]:
        batch_size = max(len(v) for v in batch.values())
        n_combo, dp_concurrent = concurrency_split(self.selector.max_concurrent, batch_size)
        self.splits.append((n_combo, dp_concurrent))
        combo_gate = asyncio.Semaphore(n_combo)
        results: dict[int, list[Evaluation]] = {}

        async def run_combo(k: int, datapoints: Sequence[int]) -> None:
            async with combo_gate:
                dp_gate = asyncio.Semaphore(dp_concurrent)
                out: list[Evaluation | None] = [None] * len(datapoints)

                async def run_one(j: int, i: int) -> None:
                    async with dp_gate:
                        out[j] = await self._evaluate_one(k, i)

                async with asyncio.TaskGroup() as tg:
                    for j, i in enumerate(datapoints):
                        tg.create_task(run_one(j, i))
                results[k] = [e for e in out if e is not None]

        try:
            async with asyncio.TaskGroup() as tg:
                for k, datapoints in batch.items():
                    tg.create_task(run_combo(k, datapoints))
        except BaseExceptionGroup as group:
            # a usage mistake (bad score, missing key, ...) aborts the run with its own message
            user_error = _first_user_error(group)
            if user_error is not None:
                raise user_error from None
            raise
        return results

    async def _evaluate_one(self, k: int, i: int) -> Evaluation:
        sel = self.selector
        models = {step: sel._handles[step][label] for step, label in self.space.labels(k).items()}
        inputs, expected = sel._datapoint(i)
        meter = Meter(seed=sel.seed)
        error: str | None = None
        score = 0.0
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        started = time.perf_counter()
        try:
            with metering(meter):
                try:
                    actual = await self._run_agent(models, inputs)
                except UserError:
                    raise
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
                else:
                    try:
                        score = await sel._score(expected, actual)
                    except UserError:
                        raise
                    except Exception as exc:
                        error = f"scorer raised {type(exc).__name__}: {exc}"
        finally:
            self.in_flight -= 1
        wall = time.perf_counter() - started
        # a cache hit answers instantly; count the original call's latency so cached runs compare fairly
        latency = wall + sum(c.latency_s for c in meter.calls if c.cached)
        self.spent += meter.spent
        refused = next((c for c in meter.calls if c.error_kind == "budget"), None)
        failed = next((c for c in meter.calls if c.error_kind is not None), None)
        evaluation = Evaluation(
            config_id=self.space.name(k),
            status="over_budget" if refused is not None else ("error" if error else "ok"),
            score=0.0 if error else score,
            cost_usd=meter.cost,
            spent_usd=meter.spent,
            latency_s=latency,
            usage=meter.usage,
            error=refused.error if refused is not None else error,
            error_kind=(
                cast("ErrorKind", failed.error_kind) if failed is not None and error else None
            ),
            calls=len(meter.calls),
        )
        self.completed.append((k, i, evaluation))
        return evaluation

    async def _run_agent(self, models: dict[str, MeteredModel], inputs: Any) -> Any:
        agent: Any = self.selector.agent
        if inspect.isclass(agent):
            factory: Callable[..., Any] = agent
            instance: Any = factory(models)
            run: Any = instance.run
            if inspect.iscoroutinefunction(run):
                return await run(inputs)
            return await self._in_thread(run, inputs)
        if inspect.iscoroutinefunction(agent):
            return await agent(models, inputs)
        result = await self._in_thread(agent, models, inputs)
        if inspect.isawaitable(result):
            return await result
        return result

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        return await loop.run_in_executor(self.executor, lambda: ctx.run(fn, *args))


class ModelSelector:
    """Find the best model per step of a multi-step agent on a small dataset.

    Args:
        agent: a class built from ``{step: MeteredModel}`` with a sync or async ``run(input)``, or
            a function ``(models, input)`` (sync or async). Steps call
            ``await models["solver"].complete(prompt)`` (sync agents: ``complete_sync``).
        models: ``{step: [candidate, ...]}``; a candidate is a ``provider:model`` string, a
            :class:`ModelConfig` or a ready :class:`MeteredModel`.
        dataset: a sequence of ``(input, expected)`` pairs.
        scorer: ``(expected, actual) -> float`` in [0, 1] (or bool), sync or async.
        algorithm: a name (``"auto"`` = ``"regret_race"``, ``"paired_race"``, ``"arm_elimination"``,
            ...) or a :class:`SelectionAlgorithm` instance.
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
    """

    def __init__(
        self,
        agent: Any,
        models: Mapping[str, Sequence[Candidate]],
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
    ) -> None:
        if not callable(agent):
            raise UserError(
                "`agent` must be a class with run(input) or a function (models, input)."
            )
        if inspect.isclass(agent) and not callable(getattr(agent, "run", None)):
            raise UserError(f"Agent class {agent.__name__!r} has no `run(input)` method.")
        if not callable(scorer):
            raise UserError("`scorer` must be a function (expected, actual) -> float in [0, 1].")
        concurrency_split(max_concurrent, 1)
        if len(dataset) == 0:
            raise UserError("The dataset is empty; give at least one (input, expected) pair.")
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
        self._algorithm = algorithm
        self._algorithm_params = dict(algorithm_params or {})
        make_algorithm(algorithm, **self._algorithm_params)  # fail fast on a bad name or parameter
        self._handles: dict[str, dict[str, MeteredModel]] = {}
        steps: dict[str, list[str]] = {}
        for step, candidates in models.items():
            handles = [self._handle(c) for c in candidates]
            steps[step] = [h.name for h in handles]
            self._handles[step] = {h.name: h for h in handles}
        self.space = SearchSpace(steps)
        self.last_evaluator: AgentEvaluator | None = None

    def _handle(self, candidate: Candidate) -> MeteredModel:
        if isinstance(candidate, MeteredModel):
            return candidate
        if isinstance(candidate, ModelConfig):
            return MeteredModel(candidate, retry=self.retry)
        if isinstance(candidate, str):
            return self._handle_from_string(candidate)
        raise UserError(
            f"A candidate model must be a `provider:model` string, a ModelConfig or a MeteredModel, got {candidate!r}."
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

    def _datapoint(self, i: int) -> tuple[Any, Any]:
        item = self.dataset[i]
        try:
            inputs, expected = item
        except (TypeError, ValueError):
            raise UserError(
                f"Dataset item {i} is not an (input, expected) pair: {item!r}."
            ) from None
        return inputs, expected

    async def _score(self, expected: Any, actual: Any) -> float:
        value = self.scorer(expected, actual)
        if inspect.isawaitable(value):
            value = await value
        score = float(value)
        if not 0.0 <= score <= 1.0 or score != score:
            raise UserError(f"The scorer returned {value!r}; scores must be in [0, 1] (or bool).")
        return score

    async def select_best(self, *, on_progress: ProgressCallback | None = None) -> SelectionResult:
        """Run the algorithm and return the results (the winner is ``result.best``)."""
        algorithm = make_algorithm(self._algorithm, **self._algorithm_params)
        loop = asyncio.get_running_loop()
        if self.cache is None:
            self.cache = _cache(self._cache_setting)
        for handles in self._handles.values():
            for h in handles.values():
                h.loop = loop
                if h.cache is None:
                    h.cache = self.cache
        started = time.perf_counter()
        executor = ThreadPoolExecutor(
            max_workers=self.max_concurrent, thread_name_prefix="phi-select"
        )
        try:
            evaluator = AgentEvaluator(self, self.space, executor)
            self.last_evaluator = evaluator
            names = [self.space.name(k) for k in range(len(self.space))]
            arena = Arena(
                len(self.space),
                len(self.dataset),
                evaluator,
                seed=self.seed,
                names=names,
                budget=self.budget,
                max_evaluations=self.max_evaluations,
                on_batch=on_progress,
            )
            exhausted = False
            try:
                with metering(Meter(self.budget)):
                    best = await algorithm.run(arena, self.space)
            except BudgetExhausted:
                exhausted = True
                best = await run_algorithm(_Recommend(algorithm.pool), arena, self.space)
        finally:
            executor.shutdown(wait=False, cancel_futures=True)
        return build_result(
            arena,
            self.space,
            best,
            algorithm=algorithm.name,
            params=algorithm.params(),
            pool=algorithm.pool,
            spent=evaluator.spent,
            wall_time=time.perf_counter() - started,
            budget_exhausted=exhausted,
        )

    def select_best_sync(self, *, on_progress: ProgressCallback | None = None) -> SelectionResult:
        """Blocking :meth:`select_best` (must not be called from a running event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.select_best(on_progress=on_progress))
        raise UserError(
            "select_best_sync() was called inside an event loop; use `await select_best()`."
        )


class _Recommend(SelectionAlgorithm):
    """Recommend from what is recorded (after the budget ran out)."""

    name = "recommend"

    def __init__(self, pool: set[int] | None) -> None:
        super().__init__()
        self.pool = pool

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        return arena.best(self.pool)


def _first_user_error(group: BaseExceptionGroup[BaseException]) -> UserError | None:
    for error in group.exceptions:
        if isinstance(error, UserError):
            return error
        if isinstance(error, BaseExceptionGroup):
            found = _first_user_error(error)
            if found is not None:
                return found
    return None


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
