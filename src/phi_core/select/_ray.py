"""The Ray executor: evaluation batches run as Ray tasks; the algorithms do not change.

Each combination's share of a batch is one Ray task. Inside the task its datapoints run
concurrently on the worker's own event loop, exactly as locally (same :class:`CellRunner`:
metering, interception, attribution, scoring). The driver keeps the run's two-level split of
``max_concurrent`` (at most ``n_combo`` tasks in flight, each with at most ``dp_concurrent``
datapoints in flight), so the whole cluster never has more agent runs in flight than locally.

Workers open the run's response cache by its path (SQLite in WAL mode is shared safely between
processes on one machine; on a multi-machine cluster give a path on a shared file system, or
each machine keeps its own), price intercepted calls with the run's ``model_prices``, and hold
their calls to the dollars and wall-clock time the run has left when the task starts (token and
call budgets are checked by the driver between batches).

A Ray runtime already initialised in this process is used as it is. Otherwise the run connects
to the cluster at ``address``, or starts a local one (no dashboard, usage statistics off: it works
offline), and disconnects (stopping the local one) when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import MissingExtraError, UserError
from ..metering import Budget, Meter, metering
from ..types import Pricing
from ._arena import Evaluation
from ._cache import ResponseCache
from ._cells import BatchEvaluator, CellRunner, concurrency_split, each_combination, run_cells
from ._intercept import InterceptScope, intercepting
from ._meter import MeteredModel

__all__ = ["RayEvaluator"]


@dataclass(frozen=True, slots=True)
class _TaskSettings:
    cache_path: str | None
    model_prices: dict[str, Pricing]
    budget: Budget | None


def _evaluate_chunk(
    runner: CellRunner, settings: _TaskSettings, k: int, datapoints: list[int], dp: int
) -> tuple[list[Evaluation], list[str]]:
    """The Ray task: one combination on some datapoints, ``dp`` at a time."""
    return asyncio.run(_evaluate_chunk_async(runner, settings, k, datapoints, dp))


async def _evaluate_chunk_async(
    runner: CellRunner, settings: _TaskSettings, k: int, datapoints: list[int], dp: int
) -> tuple[list[Evaluation], list[str]]:
    loop = asyncio.get_running_loop()
    path = settings.cache_path
    cache = ResponseCache(path) if path is not None and path != ":memory:" else None
    for handles in runner.candidates.values():
        for handle in handles.values():
            if isinstance(handle, MeteredModel):
                handle.loop = loop
                handle.cache = cache
    scope = InterceptScope(cache=cache, model_prices=settings.model_prices, loop=loop)
    executor = ThreadPoolExecutor(max_workers=dp, thread_name_prefix="phi-select-ray")
    try:
        with intercepting(scope), metering(Meter(settings.budget)):
            out = await run_cells(runner, {k: datapoints}, dp, executor)
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
        if cache is not None:
            cache.close()
    return out[k], sorted(scope.unpriced)


class RayEvaluator(BatchEvaluator):
    """Runs batches as Ray tasks (see the module docstring)."""

    def __init__(
        self,
        runner: CellRunner,
        max_concurrent: int,
        recorded: Mapping[tuple[str, int], Evaluation] | None = None,
        on_cell: Callable[[int, int, Evaluation], Awaitable[None]] | None = None,
        *,
        cache_path: str | None = None,
        model_prices: Mapping[str, Pricing] | None = None,
        budget: Budget | None = None,
        address: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(runner, max_concurrent, recorded, on_cell)
        self.cache_path = cache_path
        self.model_prices = dict(model_prices or {})
        self.budget = budget
        self.address = address
        self.options = {"num_cpus": 1, **(options or {})}
        self.connected_here = False
        """Whether this run initialised Ray (so it shuts it down: stops the local cluster it
        started, or disconnects from the cluster at ``address``)."""
        self.tasks = 0
        self._ray: Any = None
        self._remote: Any = None
        self._runner_ref: Any = None
        self._started = time.monotonic()

    async def _connect(self) -> Any:
        if self._ray is not None:
            return self._ray
        try:
            import ray
        except ImportError as error:
            raise MissingExtraError("ModelSelector(executor='ray')", "ray") from error
        if not ray.is_initialized():
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if self.address is not None:
                kwargs["address"] = self.address
            await asyncio.to_thread(ray.init, **kwargs)
            self.connected_here = True
        self._ray = ray
        self._remote = ray.remote(_evaluate_chunk).options(**self.options)
        self._runner_ref = ray.put(self.runner)
        return ray

    def _settings(self) -> _TaskSettings:
        budget = self.budget
        if budget is not None:
            cost = budget.max_cost_usd
            wall = budget.max_wall_s
            budget = Budget(
                max_cost_usd=max(cost - self.spent, 1e-9) if cost is not None else None,
                max_wall_s=(
                    max(wall - (time.monotonic() - self._started), 1e-3)
                    if wall is not None
                    else None
                ),
            )
            budget = None if budget.unlimited else budget
        return _TaskSettings(self.cache_path, self.model_prices, budget)

    async def run(self, batch: Mapping[int, Sequence[int]]) -> dict[int, list[Evaluation]]:
        ray = await self._connect()
        n_combo, dp = concurrency_split(self.max_concurrent, max(map(len, batch.values())))
        gate = asyncio.Semaphore(n_combo)
        results: dict[int, list[Evaluation]] = {}

        async def one(k: int, datapoints: Sequence[int]) -> None:
            async with gate:
                ref = self._remote.remote(
                    self._runner_ref, self._settings(), k, list(datapoints), dp
                )
                self.tasks += 1
                try:
                    evaluations, unpriced = await ref
                except asyncio.CancelledError:
                    with contextlib.suppress(Exception):
                        ray.cancel(ref)
                    raise
                except ray.exceptions.RayTaskError as error:
                    cause = getattr(error, "cause", None)
                    if isinstance(cause, UserError):
                        raise cause from None
                    raise
            self.unpriced.update(unpriced)
            for i, evaluation in zip(datapoints, evaluations, strict=True):
                await self.done(k, i, evaluation)
            results[k] = evaluations

        await each_combination(batch, one)
        return results

    async def aclose(self) -> None:
        if self._ray is not None and self.connected_here:
            await asyncio.to_thread(self._ray.shutdown)
        self._ray = None
