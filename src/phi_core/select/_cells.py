"""Running the user's agent on (combination, datapoint) cells.

:class:`CellRunner` runs one cell: it builds the agent for the combination, runs it on the
datapoint with a fresh :class:`~phi_core.metering.Meter` active and the cell's attribution set
(so calls through :class:`~phi_core.select.MeteredModel` handles and intercepted SDK calls are
both counted, and counted for this cell only), scores the answer, and returns an
:class:`~phi_core.select.Evaluation`. It holds nothing that cannot be pickled, so the Ray
executor ships it to its workers. :class:`AgentEvaluator` runs the batches an algorithm asks for
on the local event loop with two-level concurrency.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from .._callables import is_async_callable
from .._tasks import is_real_cancellation, run_all
from ..errors import AgentInterrupted, ProviderError, UserError, redact
from ..metering import CallRecord, Meter, metering
from ..outcome import ErrorKind, OutcomeStatus, status_of_error_kind
from ..types import Usage
from ._arena import Evaluation
from ._intercept import attribute
from ._space import SearchSpace

__all__ = [
    "AgentEvaluator",
    "BatchEvaluator",
    "CellRunner",
    "concurrency_split",
    "each_combination",
    "read_datapoint",
    "run_cells",
]


Scorer = Callable[[Any, Any], float | bool | Awaitable[float | bool]]


def concurrency_split(max_concurrent: int, batch_size: int) -> tuple[int, int]:
    """``(n_combo, dp_concurrent)`` for a batch giving each combination ``batch_size`` datapoints.

    Datapoint parallelism comes first: ``dp_concurrent = min(max_concurrent, batch_size)`` and
    ``n_combo = max_concurrent // dp_concurrent``, so ``n_combo * dp_concurrent <= max_concurrent``.
    """
    if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int):
        raise UserError(f"max_concurrent must be a whole number >= 1, got {max_concurrent!r}.")
    if max_concurrent < 1:
        raise UserError(f"max_concurrent must be >= 1, got {max_concurrent!r}.")
    dp = max(1, min(max_concurrent, batch_size))
    return max(1, max_concurrent // dp), dp


def read_datapoint(dataset: Sequence[Any], i: int) -> tuple[Any, Any]:
    """``(input, expected)`` of dataset item ``i``: a pair, or a mapping with the keys ``input``
    and ``expected`` (a row of ``phi select``'s JSONL). A string or another mapping is a mistake,
    not a pair to unpack (a two-key dict would unpack into its keys)."""
    try:
        item = dataset[i]
    except Exception as exc:  # a lazy dataset (a file, a Hugging Face split) failed to load it
        raise UserError(
            redact(f"Reading dataset item {i} failed: {type(exc).__name__}: {exc}")
        ) from None
    if isinstance(item, Mapping):
        if "input" in item and "expected" in item:
            return item["input"], item["expected"]
        raise UserError(
            f'Dataset item {i} is a mapping without "input" and "expected" keys '
            f"(its keys: {', '.join(map(str, item))})."
        )
    if not isinstance(item, str | bytes):
        try:
            inputs, expected = item
        except (TypeError, ValueError):
            pass
        else:
            return inputs, expected
    text = redact(repr(item))
    text = text if len(text) <= 120 else text[:117] + "..."
    raise UserError(
        f'Dataset item {i} is not an (input, expected) pair or an {{"input", "expected"}} '
        f"mapping: {text}."
    )


class CellRunner:
    """Runs the agent on one cell. Picklable when the agent, scorer, dataset and candidates are.

    Args:
        agent: a class built from ``{step: model}`` with a sync or async ``run(input)``, or a
            function ``(models, input)``.
        candidates: ``{step: {label: what the agent gets}}`` (a handle, or the user's object).
        dataset: ``(input, expected)`` pairs.
        scorer: ``(expected, actual) -> score in [0, 1]``.
        space: the search space (combination names and labels).
        seed: the run's seed (calls without their own seed derive one from it).
        timeout: seconds one agent run may take, counted from when it starts (a sync agent's
            from when its thread picks it up); a run past it is stopped and scores 0 with status
            ``timeout``. Scoring gets the same time again, separately (a scorer past it fails the
            cell, with status ``timeout`` too). ``None``: no limit. Whatever stops a run, the
            cell's status is the one :func:`~phi_core.outcome.status_of_error_kind` gives, as
            in races: a call's missed deadline or the budget's wall clock is ``timeout``, a
            budget refusal ``over_budget``.
    """

    def __init__(
        self,
        agent: Any,
        candidates: Mapping[str, Mapping[str, Any]],
        dataset: Sequence[Any],
        scorer: Scorer,
        space: SearchSpace,
        seed: int | None,
        timeout: float | None = None,
    ) -> None:
        self.timeout = timeout
        self.agent = agent
        self.candidates = {s: dict(c) for s, c in candidates.items()}
        self.dataset = dataset
        self.scorer = scorer
        self.space = space
        self.seed = seed

    def datapoint(self, i: int) -> tuple[Any, Any]:
        return read_datapoint(self.dataset, i)

    async def score(
        self, expected: Any, actual: Any, executor: ThreadPoolExecutor, clock: _RunClock
    ) -> float | None:
        """The scorer's verdict on ``actual`` (a sync scorer in ``executor``'s threads, so an
        LLM judge called synchronously does not stop every other run while it waits), within
        ``clock``'s timeout; ``None`` when it gave none."""
        async with clock:
            if is_async_callable(self.scorer):
                clock.start()
                value: Any = self.scorer(expected, actual)
            else:
                value = await _in_thread(executor, clock, self.scorer, expected, actual)
            if inspect.isawaitable(value):
                value = await value
        if value is None:  # no verdict on this answer (AgentOpt drops such a datapoint)
            return None
        # a number, not text that reads as one ("0.9" is almost always a parsing slip)
        if isinstance(value, str | bytes) or not hasattr(value, "__float__"):
            raise UserError(
                f"The scorer returned {value!r}; it must return a number in [0, 1] (or a bool)."
            )
        score = float(value)
        if not 0.0 <= score <= 1.0 or math.isnan(score):
            raise UserError(f"The scorer returned {value!r}; scores must be in [0, 1] (or bool).")
        return score

    async def run(self, k: int, i: int, executor: ThreadPoolExecutor) -> Evaluation:
        """Run combination ``k`` on dataset item ``i`` (sync agents in ``executor``'s threads).

        The agent's run is timed and metered as the combination's; the scorer runs after it,
        under its own meter: what its model calls cost (an LLM judge) is paid by the run and
        counted in ``spent_usd`` and ``scoring_usd``, never in the combination's ``cost_usd``,
        tokens or latency. ``spent_usd``, ``calls_sent`` and ``usage_sent`` count the calls
        actually sent (the agent's and the scorer's; cache hits are free): what the budget counts."""
        models = {s: self.candidates[s][label] for s, label in self.space.labels(k).items()}
        name = self.space.name(k)
        inputs, expected = self.datapoint(i)
        meter = Meter(seed=self.seed)
        meter.calls = timeline = _Timeline()
        error: str | None = None
        kind: str | None = None  # the classified kind of `error`: it decides the status
        score = 0.0
        started = time.perf_counter()
        clock = _RunClock(self.timeout)
        answered = False
        with metering(meter), attribute(name, i):
            try:
                async with clock:
                    actual = await self._run_agent(models, inputs, executor, clock)
            except BaseException as exc:
                error = _failure(exc)
                kind = _kind_of(exc, list(meter.calls))
            else:
                answered = True
            if clock.expired():  # also when the agent swallowed the cancellation and answered
                error, answered, kind = clock.message(), False, "timeout"
        ended = time.perf_counter()
        latency = timeline.latency(clock.ran_at or started, ended)
        scoring = Meter(seed=self.seed)
        if answered:  # intercepted judge calls belong to the datapoint, not to a combination
            judging = _RunClock(self.timeout, "scorer")
            with metering(scoring), attribute(None, i):
                try:
                    verdict = await self.score(expected, actual, executor, judging)
                except BaseException as exc:
                    error = f"scorer raised {_failure(exc)}"
                    kind = _kind_of(exc, list(scoring.calls))
                else:
                    if verdict is None:
                        error = "the scorer returned None instead of a score, so it scored 0"
                    else:
                        score = verdict
            if judging.expired():
                error, score, kind = f"scorer raised {judging.message()}", 0.0, "timeout"
        calls = list(meter.calls)
        refused = next((c for c in [*calls, *scoring.calls] if c.error_kind == "budget"), None)
        per_model: dict[str, Usage] = {}
        for c in calls:
            per_model[c.model] = per_model.get(c.model, Usage()) + c.usage
        # one rule for every engine: a timeout (the run's own, a call's deadline, the budget's
        # wall clock) is `timeout`, a budget refusal `over_budget`, any other failure `error`
        if refused is not None:
            status: OutcomeStatus = "over_budget"
            kind = "budget"
        elif error is not None:
            status = status_of_error_kind(kind)
        else:
            status, kind = "ok", None
        return Evaluation(
            config_id=name,
            status=status,
            score=0.0 if error else score,
            cost_usd=meter.cost,
            spent_usd=meter.spent + scoring.spent,
            scoring_usd=scoring.spent,
            latency_s=latency,
            usage=meter.usage,
            error=refused.error if refused is not None else error,
            error_kind=cast("ErrorKind | None", kind),
            calls=len(calls),
            calls_sent=meter.calls_sent + scoring.calls_sent,
            usage_sent=meter.paid_usage + scoring.paid_usage,
            model_usage=per_model,
        )

    async def _run_agent(
        self,
        models: dict[str, Any],
        inputs: Any,
        executor: ThreadPoolExecutor,
        clock: _RunClock,
    ) -> Any:
        """The agent's answer. A class is built for this run (its ``__init__`` counts toward the
        timeout, not the latency): an async ``run`` is built and awaited on the event loop, a sync
        one is built and run in a worker thread, so building (an SDK client, a graph) blocks no
        other run."""
        agent: Any = self.agent
        if inspect.isclass(agent):
            factory: Callable[[dict[str, Any]], Any] = agent
            if is_async_callable(getattr(agent, "run", None)):
                clock.start()
                instance = factory(models)
                clock.ran()
                return await instance.run(inputs)

            def build_and_run() -> Any:
                instance = factory(models)
                clock.ran()
                return instance.run(inputs)

            result = await _in_thread(executor, clock, build_and_run)
        elif is_async_callable(agent):
            clock.start()
            clock.ran()
            return await agent(models, inputs)
        else:

            def run_function() -> Any:
                clock.ran()
                return agent(models, inputs)

            result = await _in_thread(executor, clock, run_function)
        if inspect.isawaitable(result):
            return await result
        return result


_last_call: contextvars.ContextVar[tuple[object, int] | None] = contextvars.ContextVar(
    "phi_select_last_call", default=None
)
"""The last call that ended in this context: ``(its timeline's token, its index there)``."""


class _Timeline(list[CallRecord]):
    """A cell meter's list of calls that also notes when each call was recorded (when it
    ended; a cache hit when it was answered) and which call had ended last in the context that
    made it, to tell the run's latency as if no call had been answered from the cache
    (:meth:`latency`)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []
        self.before: list[int | None] = []
        self._token = object()
        self._lock = threading.Lock()

    def append(self, call: CallRecord) -> None:
        last = _last_call.get()
        with self._lock:
            self.ends.append(time.perf_counter())
            self.before.append(last[1] if last is not None and last[0] is self._token else None)
            super().append(call)
            index = len(self) - 1
        _last_call.set((self._token, index))

    def latency(self, start: float, end: float) -> float:
        """The latency of a run from ``start`` to ``end`` (``time.perf_counter()``), had every
        cache hit taken as long as its original call did.

        A cache hit answers at once. Adding every hit's original latency to the wall time would
        count twice the time of calls made concurrently (two identical combinations would differ
        by what the cache answered, and a fully cached rerun would look slower than the first
        run). Instead the run is replayed with each hit at its original duration:

        - a call depends on the last call that had ended, before it began, in the context that
          made it (the same task or thread, or the one that started its task or thread: the
          context is inherited), and begins after it by the time the agent really took in
          between (its own work);
        - concurrent calls (``asyncio.gather``, a thread pool) depend on none of each other;
        - the run ends when its slowest call ends in the replay, plus the time the agent really
          took after its last call ended, and never before its wall time.

        Without cache hits this is the wall time, exactly; a fully cached rerun is about the
        first run's latency. A join is not seen (a call made after ``gather`` of cached calls
        depends on the call before the ``gather``), so then the estimate is a little low."""
        with self._lock:
            ends, before, calls = list(self.ends), list(self.before), list(self)
        wall = end - start
        if not any(call.cached for call in calls):
            return wall
        replayed: list[float] = []  # when each call ends in the replay (from `start`)
        for i, call in enumerate(calls):
            began = ends[i] if call.cached else max(start, ends[i] - call.latency_s)
            p = before[i]
            while p is not None and ends[p] > began:  # overlapped it: not what it waited for
                p = before[p]
            at = replayed[p] + (began - ends[p]) if p is not None else began - start
            replayed.append(at + call.latency_s)
        return max(wall, max(replayed) + (end - max(ends)))


def _failure(exc: BaseException) -> str:
    """What a failed agent run or scoring records (redacted); raises again what is not that
    run's failure: a usage mistake, the user's Ctrl-C, a cancellation of the selection."""
    if isinstance(exc, UserError):
        raise exc
    if isinstance(exc, KeyboardInterrupt):
        raise AgentInterrupted(exc) from None
    if isinstance(exc, asyncio.CancelledError):
        if is_real_cancellation(exc):
            raise exc
        # raised by the user's code on its own (an inner task of its was cancelled)
        return redact(f"CancelledError: {exc or 'raised'} (nothing cancelled the run)")
    return redact(f"{type(exc).__name__}: {exc}")  # sys.exit() included: that run failed


def _kind_of(exc: BaseException, calls: Sequence[CallRecord]) -> str | None:
    """The kind of a failed run: the ``kind`` of the :class:`ProviderError` it raised
    (``timeout`` for a missed deadline or the budget's wall clock, ``budget`` for a refusal...),
    else that of the first call that failed in the run (an SDK raised its own exception for it),
    else ``None`` (the agent's or the scorer's own failure)."""
    if isinstance(exc, ProviderError):
        return exc.kind
    return next((c.error_kind for c in calls if c.error_kind is not None), None)


class _RunClock:
    """The timeout of one agent run (or one scoring), armed when it starts: a sync agent or
    scorer may first wait for a free thread, and that wait is not its time."""

    def __init__(self, seconds: float | None, who: str = "agent") -> None:
        self.seconds = seconds
        self.who = who
        self.threaded = False
        """The agent runs in a worker thread (which a timeout cannot stop)."""
        self.ran_at: float | None = None
        """When the agent's own run began (``time.perf_counter()``), after it was built."""
        self._timeout = asyncio.timeout(None)
        self._open = False

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()
        self._open = True

    async def __aexit__(self, *exc: Any) -> None:
        self._open = False
        await self._timeout.__aexit__(*exc)  # turns its own cancellation into TimeoutError

    def start(self) -> None:
        """Start counting (on the event loop's thread); a no-op once the run has ended."""
        if self.seconds is not None and self._open:
            self._timeout.reschedule(asyncio.get_running_loop().time() + self.seconds)

    def ran(self) -> None:
        """The run itself starts now (from any thread): latency is counted from here."""
        self.ran_at = time.perf_counter()

    def expired(self) -> bool:
        return self._timeout.expired()

    def message(self) -> str:
        text = (
            f"TimeoutError: the {self.who} ran longer than timeout={self.seconds:g} s and was "
            "stopped"
        )
        if self.threaded:  # Python cannot stop a thread; say so rather than pretend
            text += f" (a sync {self.who}'s thread cannot be stopped: it runs on in the background)"
        return text


async def _in_thread(
    executor: ThreadPoolExecutor, clock: _RunClock | None, fn: Callable[..., Any], *args: Any
) -> Any:
    """``fn(*args)`` in a worker thread with this context; ``clock`` (if any) starts when the
    thread picks it up."""
    ctx = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    if clock is not None:
        clock.threaded = True

    def work() -> Any:
        if clock is not None:
            try:
                loop.call_soon_threadsafe(clock.start)
            except RuntimeError:  # the run ended and its loop closed before a thread was free
                return None
        return ctx.run(fn, *args)

    job = executor.submit(work)
    try:
        return await asyncio.wrap_future(job)
    except asyncio.CancelledError:
        # the thread cannot be stopped; if it hands back an awaitable nobody will await, close it
        job.add_done_callback(_close_orphan)
        raise


def _close_orphan(job: Future[Any]) -> None:
    if job.cancelled() or job.exception() is not None:
        return
    result = job.result()
    if inspect.iscoroutine(result):
        result.close()


async def run_cells(
    runner: CellRunner,
    batch: Mapping[int, Sequence[int]],
    max_concurrent: int,
    executor: ThreadPoolExecutor,
    on_cell: Callable[[int, int, Evaluation], Awaitable[None]] | None = None,
) -> dict[int, list[Evaluation]]:
    """Run a batch with at most ``n_combo`` combinations and ``dp_concurrent`` datapoints each in
    flight (:func:`concurrency_split`); results in the order of the requested datapoints."""
    batch_size = max(len(v) for v in batch.values())
    n_combo, dp_concurrent = concurrency_split(max_concurrent, batch_size)
    combo_gate = asyncio.Semaphore(n_combo)
    results: dict[int, list[Evaluation]] = {}

    async def run_combo(k: int, datapoints: Sequence[int]) -> None:
        async with combo_gate:
            dp_gate = asyncio.Semaphore(dp_concurrent)
            out: list[Evaluation | None] = [None] * len(datapoints)

            async def run_one(j: int, i: int) -> None:
                async with dp_gate:
                    out[j] = evaluation = await runner.run(k, i, executor)
                    if on_cell is not None:
                        await on_cell(k, i, evaluation)

            await run_all((run_one(j, i) for j, i in enumerate(datapoints)), pick=_usage_first)
            results[k] = [e for e in out if e is not None]

    await each_combination(batch, run_combo)
    return results


async def each_combination(
    batch: Mapping[int, Sequence[int]],
    run: Callable[[int, Sequence[int]], Coroutine[Any, Any, None]],
) -> None:
    """``run(k, datapoints)`` for every combination of a batch, concurrently. What fails in any
    (a usage mistake such as a bad score, a callback of the caller's that raised) aborts the
    batch and is raised as itself, not wrapped in exception groups; a usage mistake first."""
    try:
        await run_all((run(k, datapoints) for k, datapoints in batch.items()), pick=_usage_first)
    except AgentInterrupted as interrupted:  # every sibling has been cancelled and awaited
        raise interrupted.interrupt from None


def _usage_first(failures: Sequence[BaseException]) -> BaseException:
    """Of a batch's failures, the one to raise: an interrupt, then a usage mistake, then the
    first."""
    for kind in (AgentInterrupted, UserError):
        found = next((f for f in failures if isinstance(f, kind)), None)
        if found is not None:
            return found
    return failures[0]


class BatchEvaluator:
    """What every executor shares: cells a resumed run already recorded are handed back instead
    of being run again; finished cells are counted and reported (``on_cell``: the journal)."""

    def __init__(
        self,
        runner: CellRunner,
        max_concurrent: int,
        recorded: Mapping[tuple[str, int], Evaluation] | None = None,
        on_cell: Callable[[int, int, Evaluation], Awaitable[None]] | None = None,
    ) -> None:
        self.runner = runner
        self.space = runner.space
        self.max_concurrent = max_concurrent
        self.recorded = dict(recorded or {})
        self.on_cell = on_cell
        self.spent = 0.0
        self.resumed = 0
        self.unpriced: set[str] = set()
        self.splits: list[tuple[int, int]] = []
        self.completed: list[tuple[int, int, Evaluation]] = []
        """Every finished cell as ``(combination, datapoint, evaluation)``, in finishing order —
        also those of a batch that was interrupted before the arena recorded it."""

    async def evaluate(self, batch: Mapping[int, Sequence[int]]) -> dict[int, list[Evaluation]]:
        known: dict[tuple[int, int], Evaluation] = {}
        todo: dict[int, list[int]] = {}
        for k, datapoints in batch.items():
            for i in datapoints:
                found = self.recorded.get((self.space.name(k), i))
                if found is not None:
                    known[(k, i)] = found
                else:
                    todo.setdefault(k, []).append(i)
        self.resumed += len(known)
        fresh: dict[int, list[Evaluation]] = {}
        if todo:
            self.splits.append(concurrency_split(self.max_concurrent, max(map(len, todo.values()))))
            fresh = await self.run(todo)
        out: dict[int, list[Evaluation]] = {}
        for k, datapoints in batch.items():
            queue = iter(fresh.get(k, ()))
            out[k] = [known[(k, i)] if (k, i) in known else next(queue) for i in datapoints]
        return out

    async def run(self, batch: Mapping[int, Sequence[int]]) -> dict[int, list[Evaluation]]:
        """Run cells nobody recorded yet; call :meth:`done` for each as it finishes."""
        raise NotImplementedError

    async def done(self, k: int, i: int, evaluation: Evaluation) -> None:
        self.spent += evaluation.paid
        self.completed.append((k, i, evaluation))
        if self.on_cell is not None:
            await self.on_cell(k, i, evaluation)

    async def aclose(self) -> None:
        """Release what the executor holds (threads, a cluster it started)."""


class AgentEvaluator(BatchEvaluator):
    """Runs batches on the local event loop.

    For each batch, at most ``n_combo`` combinations run at once and each runs at most
    ``dp_concurrent`` datapoints at once (:func:`concurrency_split`, recomputed for every batch,
    i.e. at each algorithm's own granularity). Model calls additionally share the process-wide
    limiter. Sync agents run in a thread pool sized ``max_concurrent`` (not the default
    executor's handful of threads).
    """

    def __init__(
        self,
        runner: CellRunner,
        max_concurrent: int,
        recorded: Mapping[tuple[str, int], Evaluation] | None = None,
        on_cell: Callable[[int, int, Evaluation], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(runner, max_concurrent, recorded, on_cell)
        self.executor = ThreadPoolExecutor(
            max_workers=max_concurrent, thread_name_prefix="phi-select"
        )

    async def run(self, batch: Mapping[int, Sequence[int]]) -> dict[int, list[Evaluation]]:
        return await run_cells(self.runner, batch, self.max_concurrent, self.executor, self.done)

    async def aclose(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
