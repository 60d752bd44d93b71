"""AgentOpt's selection API on phi-core's engine: an AgentOpt user changes one import.

::

    from phi_core.agentopt import ModelSelector        # was: from agentopt import ModelSelector

    selector = ModelSelector(agent=MyAgent, models={"planner": [...], "solver": [...]},
                             eval_fn=eval_fn, dataset=dataset, method="auto")
    results = selector.select_best(parallel=True, max_concurrent=20)
    results.print_summary()
    best = results.get_best_combo()

AgentOpt's selector classes (``ArmEliminationModelSelector``, ``MatrixUCBModelSelector``, ...)
are here under the same names, each :class:`ModelSelector` with its ``method`` fixed.

The agent is AgentOpt's: a class built from ``{step: candidate}`` (candidates given as they are)
with a sync or async ``run(input)``, calling its models through the official SDKs or httpx; those
calls are intercepted, metered, priced (``model_prices`` first, in $ per million tokens), cached
and limited by :class:`~phi_core.select.ModelSelector`. What changes for the better: ``"auto"``
is phi-core's default algorithm; the dataset order is seeded and shuffled; failures score 0
instead of being dropped; ties are broken by cost (a model without a price never wins a tie on
cost), then latency beyond timing noise, then name (so a seed reproduces the pick); the cache
lives in ``$PHI_HOME``, not in the working directory; the best is always on the Pareto front; and
the openai SDK's ``httpx2`` transport is metered too.

Other differences an AgentOpt user may meet:

- The agent class is built for every datapoint (not once per combination and batch), so no
  state leaks from one datapoint's run into another's; building it is not counted as latency,
  and a sync agent is built and run in a worker thread, so building blocks no other run.
- Scores must be numbers in [0, 1] (or bools): the algorithms' bounds rest on it, and a score
  outside is a usage error that stops the run at once. A scorer returning ``None`` fails that
  datapoint (it scores 0, with the reason in ``error``), as a scorer that raised does.
- ``method="matrix_ucb"`` observes a quarter of the grid unless ``sample_fraction`` says
  otherwise (AgentOpt's default, 1.0, evaluates every cell and so saves nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import gc
import inspect
import io
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._files import export_target
from .errors import UserError
from .select._cache import ResponseCache
from .select._cells import concurrency_split
from .select._intercept import InterceptedCall, InterceptScope, attribute, intercepting
from .select._intercept_wire import ModelPrices
from .select._results import CombinationResult, SelectionResult
from .select._selector import ModelSelector as _NativeSelector
from .types import Usage

__all__ = [
    "ArmEliminationModelSelector",
    "BaseModelSelector",
    "BayesianOptimizationModelSelector",
    "BruteForceModelSelector",
    "CallRecord",
    "DatapointResult",
    "EpsilonLUCBModelSelector",
    "HillClimbingModelSelector",
    "LLMTracker",
    "LMProposalModelSelector",
    "MatrixUCBLRFModelSelector",
    "MatrixUCBModelSelector",
    "ModelResult",
    "ModelSelector",
    "RandomSearchModelSelector",
    "SelectionResults",
    "ThresholdBanditSEModelSelector",
]


class _DefaultCacheDir:
    def __repr__(self) -> str:
        return "<$PHI_HOME/select-cache.sqlite>"


DEFAULT_CACHE_DIR: Any = _DefaultCacheDir()
"""``LLMTracker``'s ``cache_dir`` when it is left out: the cache file in ``$PHI_HOME``."""

CallRecord = InterceptedCall
"""One tracked model call (``data_id``/``combo_id``, tokens, latency, ``cached``)."""

# AgentOpt parameter names -> ours, per algorithm.
_RENAMES: dict[str, dict[str, str]] = {
    "hill_climbing": {"batch_size": "neighbours_per_step"},
    "matrix_ucb": {
        "observation_budget_fraction": "budget_fraction",
        "sample_fraction": "budget_fraction",
    },
    "matrix_ucb_lrf": {
        "observation_budget_fraction": "budget_fraction",
        "sample_fraction": "budget_fraction",
        "warmup_percentage": "warmup_fraction",
        "regularizer_weight": "regularizer",
    },
    "lm_proposal": {"proposer_model": "proposer"},
}
_CONFIG_FORMATS = ("litellm", "phi-race", "race", "toml")
"""The formats :meth:`SelectionResults.export_config` writes (the last three are one)."""
_SELECTOR_KEYS = {
    "model_prices",
    "tracker",
    "seed",
    "lambda_cost",
    "lambda_latency",
    "node_descriptions",
}


class LLMTracker:
    """Tracks the model calls made inside it: ``start()``/``stop()``, or ``with tracker.track(
    data_id=..., combo_id=...)`` around the calls of one datapoint.

    Args:
        cache: answer repeated requests from the response cache.
        cache_dir: the folder of the cache's file (``cache.sqlite``); left out,
            ``$PHI_HOME/select-cache.sqlite`` (AgentOpt: ``./.agentopt_cache``); ``None`` (or
            ``":memory:"``) keeps the cache in memory, for this tracker's runs only.
        model_prices: ``{model: {"input_price": ..., "output_price": ...}}`` ($ per million
            tokens).
    """

    def __init__(
        self,
        cache: bool = True,
        cache_dir: str | Path | None = DEFAULT_CACHE_DIR,
        model_prices: ModelPrices | None = None,
    ) -> None:
        self.cache = cache
        self.cache_dir = cache_dir
        self.model_prices = dict(model_prices or {})
        self._records: list[InterceptedCall] = []
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None
        self._scope: InterceptScope | None = None

    def cache_setting(self) -> bool | str | Path:
        """What :class:`ModelSelector`'s ``cache`` argument becomes."""
        if not self.cache:
            return False
        if self.cache_dir is DEFAULT_CACHE_DIR:
            return True
        if self.cache_dir is None or str(self.cache_dir) == ":memory:":
            return ":memory:"
        return Path(self.cache_dir) / "cache.sqlite"

    def start(self) -> None:
        """Track calls made from here on in this context (tasks and copied contexts follow it)."""
        if self._stack is not None:
            return
        setting = self.cache_setting()
        cache = None
        if setting is not False:
            from .select._selector import default_cache_path

            cache = ResponseCache(default_cache_path() if setting is True else setting)
        self._scope = InterceptScope(cache=cache, model_prices=self.model_prices)
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(intercepting(self._scope))
        if cache is not None:
            self._stack.callback(cache.close)

    def stop(self) -> None:
        """Stop tracking (the records stay)."""
        if self._stack is None:
            return
        scope = self._scope
        self._stack.close()
        self._stack = None
        if scope is not None:
            self.add_records(scope.calls)
            self._scope = None

    @contextlib.contextmanager
    def track(self, data_id: Any = None, combo_id: str | None = None, **_: Any) -> Iterator[None]:
        """Attribute the calls made in the block to ``(combo_id, data_id)``."""
        with attribute(combo_id, data_id):
            yield

    def add_records(self, records: Sequence[InterceptedCall]) -> None:
        with self._lock:
            self._records.extend(records)

    def get_records(self) -> list[InterceptedCall]:
        with self._lock:
            live = list(self._scope.calls) if self._scope is not None else []
            return list(self._records) + live

    def get_usage(
        self, data_id: Any = None, combo_id: str | None = None
    ) -> dict[str, tuple[int, int]]:
        """``{model: (input tokens, output tokens)}`` of the matching calls, keyed by the model
        the requests named."""
        out: dict[str, Usage] = {}
        for r in self.get_records():
            if (data_id is None or r.datapoint == data_id) and (
                combo_id is None or r.combination == combo_id
            ):
                model = _requested(r.model)
                out[model] = out.get(model, Usage()) + r.usage
        return {m: (_input(u), u.output) for m, u in out.items()}

    def get_cached_latency(self, data_id: Any = None) -> float:
        """Seconds the cache hits of ``data_id`` took originally."""
        return sum(
            r.latency_s
            for r in self.get_records()
            if r.cached and (data_id is None or r.datapoint == data_id)
        )


def _input(usage: Usage) -> int:
    return usage.input + usage.cache_read + usage.cache_write


def _requested(spec: str) -> str:
    """The model a request named, from the ``provider:model`` an intercepted call is metered
    under (``openai:llama3.1:8b`` -> ``llama3.1:8b``): AgentOpt keys tokens by it."""
    return spec.split(":", 1)[1] if ":" in spec else spec


def _tokens(usage: Mapping[str, Usage]) -> tuple[dict[str, int], dict[str, int]]:
    """``({model: input tokens}, {model: output tokens})``, keyed by the requested model."""
    inputs: dict[str, int] = {}
    outputs: dict[str, int] = {}
    for spec, u in usage.items():
        model = _requested(spec)
        inputs[model] = inputs.get(model, 0) + _input(u)
        outputs[model] = outputs.get(model, 0) + u.output
    return inputs, outputs


class _Tokens:
    """Totals of per-model token counts (``input_tokens`` / ``output_tokens``)."""

    input_tokens: dict[str, int]
    output_tokens: dict[str, int]

    @property
    def total_input_tokens(self) -> int:
        return sum(self.input_tokens.values())

    @property
    def total_output_tokens(self) -> int:
        return sum(self.output_tokens.values())


@dataclass
class DatapointResult(_Tokens):
    """One combination on one datapoint, in AgentOpt's shape (tokens per requested model)."""

    datapoint_index: int
    score: float
    latency_seconds: float
    input_tokens: dict[str, int]
    output_tokens: dict[str, int]
    cost_usd: float = 0.0
    error: str | None = None


@dataclass
class ModelResult(_Tokens):
    """One combination, in AgentOpt's shape."""

    model_name: str
    accuracy: float
    latency_seconds: float
    input_tokens: dict[str, int]
    output_tokens: dict[str, int]
    price: float | None
    """Dollars per datapoint; ``None`` when a model it used has no price."""
    is_best: bool = False
    attribute: str = "combination"
    datapoint_results: list[DatapointResult] = field(default_factory=list)
    combined_objective: float | None = None
    models: dict[str, str] = field(default_factory=dict)
    eliminated: bool = False

    @property
    def num_samples(self) -> int:
        return len(self.datapoint_results) or 1


class SelectionResults:
    """AgentOpt's result object over phi-core's :class:`~phi_core.select.SelectionResult`
    (``native``), with the candidates as the agent received them."""

    def __init__(
        self, native: SelectionResult, candidates: Mapping[str, Mapping[str, Any]]
    ) -> None:
        self.native = native
        self._candidates = candidates
        unpriced = set(native.unpriced_models)
        rows: dict[str, list[DatapointResult]] = {}
        for row in native.datapoints:
            inputs, outputs = _tokens(row.usage_by_model)
            rows.setdefault(row.combination, []).append(
                DatapointResult(
                    row.datapoint, row.score, row.latency_s, inputs, outputs, row.cost_usd,
                    row.error,
                )
            )  # fmt: skip
        self.results = [
            _model_result(c, rows.get(c.name, []), unpriced) for c in native.evaluated()
        ]
        self.selection_wall_time_seconds = native.wall_time_s
        self.selection_cost = native.cost_usd

    def __iter__(self) -> Iterator[ModelResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __str__(self) -> str:
        return self.native.summary(limit=None)

    def get_best(self, attribute: str | None = None) -> ModelResult:
        del attribute  # AgentOpt's only attribute is "combination"
        return next(r for r in self.results if r.is_best)

    def get_best_combo(self) -> dict[str, str]:
        """``{step: label}`` of the winner (a candidate's label: the string itself, or the
        object's ``model`` / ``model_name`` / ``id`` / ``name``), as AgentOpt gives it;
        :meth:`get_best_candidates` gives the objects themselves."""
        return dict(self.native.best.models)

    def get_best_candidates(self) -> dict[str, Any]:
        """``{step: candidate}`` of the winner, as the agent received it."""
        return {
            step: self._candidates[step][label] for step, label in self.native.best.models.items()
        }

    def get_by_attribute(self, attribute: str = "combination") -> list[ModelResult]:
        """The results of ``attribute`` (AgentOpt's only one is ``"combination"``)."""
        return [r for r in self.results if r.attribute == attribute]

    def print_summary(self) -> None:
        print(self.native.summary(limit=None))

    def to_csv(self, path: str | Path) -> None:
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer)
        writer.writerow(
            ["model_name", "accuracy", "latency_seconds", "input_tokens", "output_tokens",
             "price", "attribute", "is_best", "num_samples"]
        )  # fmt: skip
        for r in self.results:
            writer.writerow(
                [r.model_name, r.accuracy, r.latency_seconds, json.dumps(r.input_tokens),
                 json.dumps(r.output_tokens), r.price, r.attribute, r.is_best, r.num_samples]
            )  # fmt: skip
        with export_target(path) as target:
            target.write_text(buffer.getvalue())

    def export_config(
        self,
        path: str | Path,
        api_key_env_vars: Mapping[str, str] | str | None = None,
        format: str | None = None,
        *,
        step: str | None = None,
    ) -> str:
        """Write the winner's config to ``path`` and return its text: AgentOpt's
        ``export_config(path, api_key_env_vars=None)`` (a LiteLLM ``model_list``), or, with
        ``format="phi-race"``, a ``phi race --config`` file racing the Pareto front's models
        for ``step`` (needed when the agent has several steps). The format may also be given
        second, as phi-core's own ``export_config(path, "phi-race", step=...)`` takes it."""
        if isinstance(api_key_env_vars, str):
            if api_key_env_vars not in _CONFIG_FORMATS:
                raise UserError(
                    f"export_config's second argument is `api_key_env_vars` (a dict of provider "
                    f"-> environment variable) or a format, got {api_key_env_vars!r}; formats: "
                    f"{', '.join(map(repr, _CONFIG_FORMATS))}."
                )
            if format is not None and format != api_key_env_vars:
                raise UserError(
                    f"export_config got two formats, {api_key_env_vars!r} and "
                    f"format={format!r}; give one."
                )
            format, api_key_env_vars = api_key_env_vars, None
        keys = dict(api_key_env_vars) if api_key_env_vars is not None else None
        return self.native.export_config(
            path, format or "litellm", step=step, api_key_env_vars=keys
        )

    def plot_pareto(self, path: str | Path | None = None) -> Any:
        return self.native.plot_pareto(path)


def _model_result(
    c: CombinationResult, rows: list[DatapointResult], unpriced: set[str]
) -> ModelResult:
    models = list(c.usage_by_model)
    inputs, outputs = _tokens(c.usage_by_model)
    return ModelResult(
        model_name=c.name,
        accuracy=c.accuracy or 0.0,
        latency_seconds=c.latency_mean or 0.0,
        input_tokens=inputs,
        output_tokens=outputs,
        price=None if unpriced.intersection(models) else (c.cost_per_datapoint or 0.0),
        is_best=c.is_best,
        datapoint_results=rows,
        combined_objective=c.objective,
        models=dict(c.models),
        eliminated=not c.in_contention,
    )


class ModelSelector:
    """AgentOpt's ``ModelSelector(agent, models, eval_fn, dataset, method="auto", **kwargs)``.

    ``kwargs``: ``model_prices``, ``tracker`` (an :class:`LLMTracker`), ``seed``,
    ``lambda_cost`` / ``lambda_latency`` (weights of normalised cost and latency in the objective
    the search maximises), ``node_descriptions``, and the method's own parameters under
    AgentOpt's names (``n_initial``, ``growth_factor``, ``confidence``, ``sample_fraction``, ...).
    Any other keyword of :class:`phi_core.select.ModelSelector` (``budget``, ``executor``,
    ``cache``, ...) is passed through.
    """

    def __init__(
        self,
        agent: Any,
        models: Mapping[str, Sequence[Any]],
        eval_fn: Any,
        dataset: Sequence[Any],
        method: str = "auto",
        **kwargs: Any,
    ) -> None:
        tracker = kwargs.pop("tracker", None)
        if tracker is not None and not isinstance(tracker, LLMTracker):
            raise UserError(f"`tracker` must be a phi_core.agentopt.LLMTracker, got {tracker!r}.")
        self.tracker = tracker or LLMTracker()
        prices = {**self.tracker.model_prices, **(kwargs.pop("model_prices", None) or {})}
        self.node_descriptions = kwargs.pop("node_descriptions", None)
        native_keys = set(inspect.signature(_NativeSelector).parameters)
        native = {
            k: kwargs.pop(k) for k in list(kwargs) if k in native_keys and k not in _SELECTOR_KEYS
        }
        renames = _RENAMES.get(method, {})
        params = {renames.get(k, k): v for k, v in kwargs.items() if k not in _SELECTOR_KEYS}
        _method_params(method, params, prices, self.node_descriptions)
        native.setdefault("cache", self.tracker.cache_setting())
        self._native = _NativeSelector(
            agent,
            models,
            dataset,
            eval_fn,
            algorithm=method,
            seed=kwargs.get("seed"),
            algorithm_params=params,
            model_prices=prices,
            cost_weight=float(kwargs.get("lambda_cost", 0.0)),
            latency_weight=float(kwargs.get("lambda_latency", 0.0)),
            model_handles=False,
            **native,
        )

    @property
    def native(self) -> _NativeSelector:
        """The phi-core selector underneath."""
        return self._native

    def select_best(self, parallel: bool = False, max_concurrent: int = 20) -> SelectionResults:
        """Run the selection (blocking): ``max_concurrent`` agent runs in flight with
        ``parallel=True``, one at a time otherwise."""
        if parallel:
            concurrency_split(max_concurrent, 1)  # a whole number >= 1, or a clear UserError
        self._native.max_concurrent = max_concurrent if parallel else 1
        result = _run_blocking(self._native)
        scope = self._native.last_scope
        if scope is not None:
            self.tracker.add_records(scope.calls)
        return SelectionResults(result, self._native.candidates())


class _MethodSelector(ModelSelector):
    """One of AgentOpt's selector classes: :class:`ModelSelector` with its ``method`` fixed."""

    method: str = "auto"

    def __init__(
        self,
        agent: Any,
        models: Mapping[str, Sequence[Any]],
        eval_fn: Any,
        dataset: Sequence[Any],
        **kwargs: Any,
    ) -> None:
        if "method" in kwargs:
            raise UserError(
                f"{type(self).__name__} always runs {self.method!r}; use ModelSelector(..., "
                f"method={kwargs['method']!r}) for another method."
            )
        super().__init__(agent, models, eval_fn, dataset, method=self.method, **kwargs)


def _method_class(name: str, method: str) -> type[_MethodSelector]:
    doc = f"AgentOpt's ``{name}``: :class:`ModelSelector` with ``method={method!r}``."
    attrs = {"method": method, "__doc__": doc, "__module__": __name__, "__qualname__": name}
    return type(name, (_MethodSelector,), attrs)


# AgentOpt's selector classes, under their names ("auto" is phi-core's default algorithm)
BaseModelSelector = _method_class("BaseModelSelector", "auto")
BruteForceModelSelector = _method_class("BruteForceModelSelector", "brute_force")
RandomSearchModelSelector = _method_class("RandomSearchModelSelector", "random")
HillClimbingModelSelector = _method_class("HillClimbingModelSelector", "hill_climbing")
ArmEliminationModelSelector = _method_class("ArmEliminationModelSelector", "arm_elimination")
EpsilonLUCBModelSelector = _method_class("EpsilonLUCBModelSelector", "epsilon_lucb")
ThresholdBanditSEModelSelector = _method_class("ThresholdBanditSEModelSelector", "threshold")
LMProposalModelSelector = _method_class("LMProposalModelSelector", "lm_proposal")
BayesianOptimizationModelSelector = _method_class("BayesianOptimizationModelSelector", "bayesian")
MatrixUCBModelSelector = _method_class("MatrixUCBModelSelector", "matrix_ucb")
MatrixUCBLRFModelSelector = _method_class("MatrixUCBLRFModelSelector", "matrix_ucb_lrf")


def _method_params(
    method: str, params: dict[str, Any], prices: Mapping[str, Any], descriptions: Any
) -> None:
    """AgentOpt's method options that differ here (in place)."""
    if method == "matrix_ucb_lrf":
        device = params.pop("device", "cpu")
        if device != "cpu":
            raise UserError(
                f"matrix_ucb_lrf runs on numpy (CPU); device={device!r} is not available."
            )
    if method == "lm_proposal":
        if "proposer_client" in params:
            raise UserError(
                "lm_proposal takes the proposer as a model, not a client: pass "
                "proposer_model='openai:gpt-4.1' (any provider:model, default local:smollm2)."
            )
        if "dataset_preview_size" in params:
            raise UserError(
                "lm_proposal shows the proposer the candidates, prices and results, not dataset "
                "items; drop dataset_preview_size."
            )
        params.setdefault("model_prices", dict(prices) or None)
        params.setdefault("node_descriptions", descriptions)


async def _select_on_own_loop(selector: _NativeSelector) -> SelectionResult:
    """The selection on a loop of its own, which closes after it. Agents are built for every
    datapoint, and an async SDK client an agent built closes itself when it is collected: the
    dropped ones are collected here, while the loop can still run their closing, rather than
    later on a closed loop ("Task exception was never retrieved ... Event loop is closed")."""
    try:
        return await selector.select_best()
    finally:
        gc.collect()
        for _ in range(3):  # the closing tasks, and the transports' callbacks they schedule
            await asyncio.sleep(0)


def _run_blocking(selector: _NativeSelector) -> SelectionResult:
    """Run the selection to its end and return its result, blocking the caller.

    Outside an event loop it runs on a loop of its own here. Called from a running loop (a
    notebook cell, sync code inside ``async def``) it runs on a loop of its own in a worker
    thread while this thread waits, and stays stoppable: a ``KeyboardInterrupt`` (Ctrl-C)
    arriving during the wait, or a cancellation of the task that called it (the first Ctrl-C
    under ``asyncio.run`` cancels the main task, which can only notice once this returns),
    cancels the run and waits for it to wind down (:data:`_STOP_WAIT_S` at most), then is
    raised: the run spends nothing more once it has returned."""
    try:
        caller = asyncio.current_task()
    except RuntimeError:
        return asyncio.run(_select_on_own_loop(selector))
    box: dict[str, Any] = {}
    started = threading.Event()

    async def main() -> SelectionResult:
        box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        started.set()
        return await _select_on_own_loop(selector)

    def target() -> None:
        try:
            box["result"] = asyncio.run(main())
        except BaseException as error:  # handed to the caller's thread below
            box["error"] = error
        finally:
            started.set()

    worker = threading.Thread(target=target, name="phi-agentopt", daemon=True)
    worker.start()
    cancelling = caller.cancelling() if caller is not None else 0
    try:
        # in slices, so that a cancellation of the calling task is seen while the run goes on
        while worker.is_alive():
            worker.join(_POLL_S)
            if caller is not None and caller.cancelling() > cancelling:
                raise asyncio.CancelledError
    except BaseException:
        started.wait(_STOP_WAIT_S)
        loop, task = box.get("loop"), box.get("task")
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the run has just ended: nothing to stop
                loop.call_soon_threadsafe(task.cancel)
        worker.join(_STOP_WAIT_S)
        raise
    if "error" in box:
        raise box["error"]
    result: SelectionResult = box["result"]
    return result


_POLL_S = 0.1
"""How often a blocking run called from a running loop checks whether its caller was cancelled."""
_STOP_WAIT_S = 10.0
"""How long an interrupted blocking run is waited for to stop (its sync agents' threads cannot
be stopped; the model calls they make after that are refused)."""
