"""ModelSelector end to end with scripted providers: metering, concurrency, failures, results."""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phi_core.errors import RunError, UserError
from phi_core.providers.base import ModelConfig
from phi_core.select import (
    Budget,
    MeteredModel,
    ModelSelector,
    ResponseCache,
)
from phi_core.select._selector import concurrency_split
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Pricing, Usage


def scripted(
    name: str,
    answer: str,
    *,
    input_price: float = 1.0,
    output_price: float = 2.0,
    delay: float = 0.0,
) -> tuple[MeteredModel, ScriptedProvider]:
    provider = ScriptedProvider(
        name=name, default=Reply(answer, usage=Usage(input=100, output=50), delay=delay)
    )
    config = ModelConfig(
        provider="scripted",
        id=name,
        api="scripted",
        pricing=Pricing(input=input_price, output=output_price),
    )
    return MeteredModel(config, provider=provider), provider


DATASET = [(f"q{i}", "right") for i in range(8)]


def exact(expected: str, actual: str) -> float:
    return float(expected == actual)


async def solver_agent(models: dict[str, MeteredModel], question: str) -> str:
    return await models["solver"].complete(question)


@pytest.mark.parametrize(
    ("max_concurrent", "batch", "split"),
    [(20, 5, (4, 5)), (20, 100, (1, 20)), (20, 1, (20, 1)), (10, 10, (1, 10)), (7, 3, (2, 3))],
)
def test_concurrency_split_gives_datapoints_priority(
    max_concurrent: int, batch: int, split: tuple[int, int]
) -> None:
    assert concurrency_split(max_concurrent, batch) == split
    n_combo, dp = split
    assert n_combo * dp <= max_concurrent


def test_concurrency_split_rejects_zero() -> None:
    with pytest.raises(UserError, match="max_concurrent must be >= 1"):
        concurrency_split(0, 5)


class InFlight:
    """An agent that counts how many runs are in flight (it yields to the loop a few times)."""

    now = 0
    peak = 0

    def __init__(self, models: dict[str, MeteredModel]) -> None:
        self.models = models

    async def run(self, question: str) -> str:
        InFlight.now += 1
        InFlight.peak = max(InFlight.peak, InFlight.now)
        for _ in range(5):
            await asyncio.sleep(0)
        InFlight.now -= 1
        return "right" if self.models["solver"].spec.endswith("good") else "wrong"


@pytest.mark.parametrize(("max_concurrent", "expected_peak"), [(20, 16), (6, 6), (3, 3)])
async def test_brute_force_runs_at_most_max_concurrent_with_datapoints_first(
    max_concurrent: int, expected_peak: int
) -> None:
    InFlight.now = InFlight.peak = 0
    good, _ = scripted("good", "right")
    bad, _ = scripted("bad", "wrong")
    selector = ModelSelector(
        InFlight,
        {"solver": [good, bad]},
        DATASET,
        exact,
        algorithm="brute_force",
        max_concurrent=max_concurrent,
        cache=False,
    )
    result = await selector.select_best()
    assert result.best.models == {"solver": "scripted:good"}
    # 2 combinations x 8 datapoints: dp_concurrent = min(max, 8), n_combo = max // dp_concurrent
    assert InFlight.peak == expected_peak
    assert selector.last_evaluator is not None
    assert selector.last_evaluator.splits == [concurrency_split(max_concurrent, 8)]


async def test_bandit_rounds_recompute_the_split_at_their_own_granularity() -> None:
    InFlight.now = InFlight.peak = 0
    models = [scripted(f"m{i}", "x")[0] for i in range(4)]
    selector = ModelSelector(
        InFlight,
        {"solver": models},
        DATASET * 5,
        exact,
        algorithm="epsilon_lucb",
        max_concurrent=20,
        cache=False,
        algorithm_params={"n_initial": 2},
    )
    await selector.select_best()
    splits = selector.last_evaluator.splits  # type: ignore[union-attr]
    assert splits[0] == (10, 2)  # initial batch of 2 datapoints per combination
    assert set(splits[1:]) == {(20, 1)}  # then one datapoint per round


async def test_tokens_dollars_and_latency_of_every_call_are_metered() -> None:
    cheap, cheap_provider = scripted("cheap", "right", input_price=1.0, output_price=2.0)
    selector = ModelSelector(
        solver_agent, {"solver": [cheap]}, DATASET, exact, algorithm="brute_force", cache=False
    )
    result = await selector.select_best()
    combo = result.best
    assert cheap_provider.calls == len(DATASET)
    assert combo.input_tokens == 100 * len(DATASET)
    assert combo.output_tokens == 50 * len(DATASET)
    assert combo.cost_usd == pytest.approx(len(DATASET) * (100 * 1.0 + 50 * 2.0) / 1e6)
    assert result.cost_usd == pytest.approx(combo.cost_usd)
    assert combo.latency_p50 is not None and combo.latency_p95 is not None
    assert combo.latency_p50 <= combo.latency_p95


def test_a_sync_agent_class_calls_models_from_worker_threads() -> None:
    class SyncAgent:
        def __init__(self, models: dict[str, MeteredModel]) -> None:
            self.models = models

        def run(self, question: str) -> str:
            plan = self.models["planner"].complete_sync(f"plan {question}")
            return self.models["solver"].complete_sync(plan)

    planner, planner_provider = scripted("planner", "a plan")
    good, _ = scripted("good", "right")
    bad, _ = scripted("bad", "wrong")
    selector = ModelSelector(
        SyncAgent,
        {"planner": [planner], "solver": [bad, good]},
        DATASET,
        exact,
        algorithm="brute_force",
        cache=False,
    )
    result = selector.select_best_sync()
    assert result.best.models == {"planner": "scripted:planner", "solver": "scripted:good"}
    assert planner_provider.calls == 2 * len(DATASET)
    assert result.best.input_tokens == 200 * len(DATASET)


async def test_a_run_that_raises_scores_zero_and_is_reported() -> None:
    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        answer = await models["solver"].complete(question)
        if models["solver"].spec.endswith("flaky") and question in {"q1", "q3", "q5", "q7"}:
            raise RuntimeError(f"tool crashed on {question}")
        return answer

    flaky, _ = scripted("flaky", "right")
    steady, _ = scripted("steady", "right")
    dataset = [*DATASET[:6], ("q6", "nope"), ("q7", "nope")]
    selector = ModelSelector(
        agent, {"solver": [flaky, steady]}, dataset, exact, algorithm="brute_force", cache=False
    )
    result = await selector.select_best()
    assert result.best.models == {"solver": "scripted:steady"}
    by_name = {c.name: c for c in result.combinations}
    assert by_name["solver=scripted:flaky"].accuracy == pytest.approx(3 / 8)
    assert by_name["solver=scripted:flaky"].failures == 4
    assert {f.datapoint for f in result.failures} == {1, 3, 5, 7}
    assert all("tool crashed" in f.error for f in result.failures)
    # the caller is told, in the warnings and in the summary's "failed" column
    (warning,) = [w for w in result.warnings if "failed" in w]
    assert warning.startswith("4 of 16 evaluations failed and scored 0 (RuntimeError x4; first: ")
    assert "tool crashed on q" in warning
    header, *rows = result.summary().splitlines()[:3]
    assert header.split()[:5] == ["#", "combination", "accuracy", "n", "failed"]
    assert {tuple(r.split()[1:5]) for r in rows} == {
        ("solver=scripted:steady", "75.0%", "8", "0"),
        ("solver=scripted:flaky", "37.5%", "8", "4"),
    }


async def test_a_run_where_every_evaluation_failed_says_its_ranking_means_nothing() -> None:
    good, _ = scripted("good", "right")

    def broken_scorer(expected: str, actual: str) -> float:
        raise KeyError("answer")

    result = await ModelSelector(
        solver_agent,
        {"solver": [good]},
        DATASET,
        broken_scorer,
        algorithm="brute_force",
        cache=False,
    ).select_best()
    assert result.best.failures == 8
    (warning,) = [w for w in result.warnings if "failed" in w]
    assert warning.startswith("Every evaluation failed (scorer raised KeyError x8; first: ")
    assert "so the ranking and the best mean nothing: fix what raised" in warning
    assert "warning: Every evaluation failed" in result.summary()


async def test_a_clean_run_has_no_failure_warning_or_column() -> None:
    good, _ = scripted("good", "right")
    result = await ModelSelector(
        solver_agent, {"solver": [good]}, DATASET, exact, algorithm="brute_force", cache=False
    ).select_best()
    assert not [w for w in result.warnings if "failed" in w]
    assert "failed" not in result.summary().splitlines()[0]


async def test_rows_with_input_and_expected_keys_are_datapoints_and_a_failing_read_is_named() -> (
    None
):
    good, _ = scripted("good", "right")
    rows = [{"input": f"q{i}", "expected": "right", "id": i} for i in range(4)]
    result = await ModelSelector(
        solver_agent, {"solver": [good]}, rows, exact, algorithm="brute_force", cache=False
    ).select_best()
    assert result.best.accuracy == 1.0 and result.best.evaluations == 4

    class Lazy:  # a lazily loaded dataset whose third item cannot be read
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> tuple[str, str]:
            if i == 2:  # the loader's error carries the credential it used
                raise OSError("shard 2 is missing (GET ...?api_key=sk-hf-0123456789abcdef)")
            return f"q{i}", "right"

    with pytest.raises(
        UserError, match="Reading dataset item 2 failed: OSError: shard 2 is"
    ) as info:
        ModelSelector(solver_agent, {"solver": [good]}, Lazy(), exact, cache=False)
    assert "sk-hf" not in str(info.value) and "[REDACTED]" in str(info.value)


async def test_an_async_scorer_is_awaited_and_a_bad_score_is_a_user_error() -> None:
    good, _ = scripted("good", "right")

    async def async_scorer(expected: str, actual: str) -> float:
        return 1.0 if expected == actual else 0.0

    result = await ModelSelector(
        solver_agent,
        {"solver": [good]},
        DATASET,
        async_scorer,
        algorithm="brute_force",
        cache=False,
    ).select_best()
    assert result.best.accuracy == 1.0
    with pytest.raises(UserError, match=r"scores must be in \[0, 1\]"):
        await ModelSelector(
            solver_agent,
            {"solver": [good]},
            DATASET,
            lambda e, a: 5,
            algorithm="brute_force",
            cache=False,
        ).select_best()


async def test_a_budget_stops_the_run_and_still_names_a_winner() -> None:
    models = [scripted(f"m{i}", "right" if i == 2 else "wrong")[0] for i in range(4)]
    selector = ModelSelector(
        solver_agent,
        {"solver": models},
        DATASET,
        exact,
        algorithm="brute_force",
        budget=12,
        cache=False,
    )
    result = await selector.select_best()
    assert result.evaluations == 12
    assert result.budget_exhausted
    assert result.best.evaluations > 0


def test_construction_errors_say_what_is_wrong() -> None:
    good, _ = scripted("good", "right")
    with pytest.raises(UserError, match="empty"):
        ModelSelector(solver_agent, {"solver": [good]}, [], exact, cache=False)
    with pytest.raises(UserError, match="Unknown selection algorithm"):
        ModelSelector(
            solver_agent, {"solver": [good]}, DATASET, exact, algorithm="grid", cache=False
        )
    # a misspelt parameter is named, the nearest valid name suggested and every valid one listed
    for algorithm, params, says in (
        (
            "regret_race",
            {"perfect_lok": 40},
            r"Unknown parameter\(s\) 'perfect_lok' for algorithm 'regret_race': 'perfect_lok' "
            r"\(did you mean 'perfect_look'\?\)\. It accepts: eta, .*perfect_arms, perfect_z, "
            r"perfect_every, max_correlation, complete_look, complete_arms, complete_by, probe, "
            r"probe_rounds, probe_slack, complete_chunk, probe_cheapest\.",
        ),
        ("brute_force", {"seed": 1}, r"for algorithm 'brute_force'\. It accepts: no parameters"),
    ):
        with pytest.raises(UserError, match=says):
            ModelSelector(
                solver_agent,
                {"solver": [good]},
                DATASET,
                exact,
                algorithm=algorithm,
                algorithm_params=params,
                cache=False,
            )
    with pytest.raises(UserError, match="no candidate"):
        ModelSelector(solver_agent, {"solver": []}, DATASET, exact, cache=False)
    for bad, hint in (
        ((q for q in DATASET), "got generator: pass list"),
        ({"q0": "right"}, "got dict."),
        (None, "got NoneType."),
    ):
        with pytest.raises(UserError, match=f"`dataset` must be a sequence .* {hint}"):
            ModelSelector(solver_agent, {"solver": [good]}, bad, exact, cache=False)  # type: ignore[arg-type]
    # every item is checked before anything runs; a two-key dict is not unpacked into its keys
    for bad_item, says in (
        ("oops", "item 8 is not an (input, expected) pair"),
        ({"question": "q", "answer": "a"}, 'item 8 is a mapping without "input" and "expected"'),
        (("q", "a", "extra"), "item 8 is not an (input, expected) pair"),
    ):
        with pytest.raises(UserError, match=re.escape(f"Dataset {says}")):
            ModelSelector(solver_agent, {"solver": [good]}, [*DATASET, bad_item], exact)
    with pytest.raises(UserError, match="`models` must map each step of the agent to its"):
        ModelSelector(solver_agent, [good], DATASET, exact, cache=False)  # type: ignore[arg-type]
    # named by type, not by repr (an object's repr may hold a credential)
    with pytest.raises(
        UserError, match=r"models\['solver'\] must be a list of candidates, got Metered"
    ):
        ModelSelector(solver_agent, {"solver": good}, DATASET, exact, cache=False)  # type: ignore[dict-item]
    with pytest.raises(UserError, match="A step's name must be a string, got 0"):
        ModelSelector(solver_agent, {0: [good]}, DATASET, exact, cache=False)  # type: ignore[dict-item]
    with pytest.raises(UserError, match="budget"):
        ModelSelector(solver_agent, {"solver": [good]}, DATASET, exact, budget="lots", cache=False)  # type: ignore[arg-type]


class _NoModelsArgument:
    def run(self, question: str) -> str:
        return question


class _RunWithoutInput:
    def __init__(self, models: dict[str, Any]) -> None:
        self.models = models

    def run(self) -> str:
        return "right"


class _StaticRun:
    def __init__(self, models: dict[str, Any]) -> None:
        self.models = models

    @staticmethod
    async def run(question: str, **options: Any) -> str:
        return "right"


def test_agent_and_scorer_signatures_are_checked_at_construction() -> None:
    """A wrong signature would make every evaluation fail (and be paid for): it is refused at
    construction, naming the call the selector makes and the signature it found."""
    good, _ = scripted("good", "right")
    for agent, says in (
        (_NoModelsArgument, r"built as _NoModelsArgument\(models\).*__init__ must take"),
        (_RunWithoutInput, r"_RunWithoutInput\.run is called as run\(input\).*\(self\)"),
        (lambda models: "right", r"called as agent\(models, input\); its signature \(models\)"),
    ):
        with pytest.raises(UserError, match=says):
            ModelSelector(agent, {"solver": [good]}, DATASET, exact, cache=False)
    with pytest.raises(UserError, match=r"scorer\(expected, actual\); its signature \(actual\)"):
        ModelSelector(solver_agent, {"solver": [good]}, DATASET, lambda actual: 1.0, cache=False)
    # what fits is accepted: a static or async run, extra keyword-only or defaulted parameters,
    # a builtin whose signature cannot be read
    for agent, scorer in (
        (_StaticRun, exact),
        (lambda models, question, retries=2: "right", lambda e, a, *, strict=False: 1.0),
        (solver_agent, max),
    ):
        ModelSelector(agent, {"solver": [good]}, DATASET, scorer, cache=False)


async def test_results_export_pareto_front_weighting_csv_json_and_plot(tmp_path: Path) -> None:
    # "dear" is also slower, so it is dominated on all three axes (accuracy, cost, latency).
    # The gap must dwarf scheduling noise: with 20 ms, a loaded CI machine once measured "cheap"
    # slower on average and put "dear" on the front.
    best, _ = scripted("dear", "right", input_price=50.0, output_price=50.0, delay=0.25)
    cheap, _ = scripted("cheap", "right", input_price=0.1, output_price=0.1)
    bad, _ = scripted("bad", "wrong", input_price=0.1, output_price=0.1)
    result = await ModelSelector(
        solver_agent,
        {"solver": [best, cheap, bad]},
        DATASET,
        exact,
        algorithm="brute_force",
        cache=False,
        seed=3,
    ).select_best()
    assert result.best.models == {"solver": "scripted:cheap"}  # same accuracy, lower cost
    front = {c.name for c in result.pareto_front()}
    assert "solver=scripted:cheap" in front and "solver=scripted:dear" not in front
    ranked = result.weighted(accuracy=1.0, cost=1.0)
    assert ranked[0][1].name == "solver=scripted:cheap"
    result.to_csv(tmp_path / "r.csv")
    result.to_json(tmp_path / "r.json")
    result.plot_pareto(tmp_path / "p.png")
    assert (tmp_path / "r.csv").read_text().count("\n") == 4
    assert json.loads((tmp_path / "r.json").read_text())["best"]["name"] == "solver=scripted:cheap"
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    # missing folders are made; a path that cannot be written is named, with the reason
    result.to_csv(tmp_path / "out" / "deep" / "r.csv")
    assert (tmp_path / "out" / "deep" / "r.csv").read_text() == (tmp_path / "r.csv").read_text()
    for write in (
        result.to_csv,
        result.to_json,
        lambda p: result.export_config(p, "phi-race"),
        result.plot_pareto,
    ):
        with pytest.raises(UserError, match=f"Cannot write '{tmp_path}': Is a directory"):
            write(tmp_path)
        with pytest.raises(
            UserError, match=r"Cannot write .*r.csv/x'.*r.csv' is a file, not a folder"
        ):
            write(tmp_path / "r.csv" / "x")


async def test_the_same_seed_gives_the_same_selection() -> None:
    def make() -> ModelSelector:
        models = [scripted(f"m{i}", "right" if i in (1, 2) else "wrong")[0] for i in range(4)]

        async def agent(m: dict[str, MeteredModel], q: str) -> Any:
            return await m["solver"].complete(q)

        data = [(f"q{i}", "right" if i % 3 else "x") for i in range(30)]
        return ModelSelector(
            agent, {"solver": models}, data, exact, algorithm="paired_race", seed=7, cache=False
        )

    a, b = await make().select_best(), await make().select_best()
    assert a.best.name == b.best.name
    assert [(c.name, c.evaluations) for c in a.combinations] == [
        (c.name, c.evaluations) for c in b.combinations
    ]


async def test_the_response_cache_makes_a_rerun_free(tmp_path: Path) -> None:
    cache_file = tmp_path / "cache.sqlite"
    good, provider = scripted("good", "right")
    first = await ModelSelector(
        solver_agent, {"solver": [good]}, DATASET, exact, algorithm="brute_force", cache=cache_file
    ).select_best()
    assert provider.calls == len(DATASET)
    good2, provider2 = scripted("good", "right")
    second = await ModelSelector(
        solver_agent,
        {"solver": [good2]},
        DATASET,
        exact,
        algorithm="brute_force",
        cache=ResponseCache(cache_file),
    ).select_best()
    assert provider2.calls == 0
    assert second.cost_usd == 0.0
    assert second.best.cost_usd == pytest.approx(
        first.best.cost_usd
    )  # the combination's price is unchanged
    assert second.best.accuracy == first.best.accuracy


async def test_budget_object_limits_dollars() -> None:
    dear, _ = scripted("dear", "right", input_price=1000.0, output_price=1000.0)
    dear.max_tokens = 50  # worst case ~$0.06 a call, so a call is refused only once $0.30 is paid
    result = await ModelSelector(
        solver_agent,
        {"solver": [dear]},
        DATASET,
        exact,
        algorithm="brute_force",
        budget=Budget(max_cost_usd=0.3),
        cache=False,
        max_concurrent=1,
    ).select_best()
    assert result.budget_exhausted
    # Reserved before each call: two calls of $0.15 fit $0.30, the third is refused unsent.
    assert result.evaluations == 2
    assert result.cost_usd <= 0.3 + 1e-9


async def test_the_sync_wrapper_refuses_to_run_inside_an_event_loop() -> None:
    good, _ = scripted("good", "right")
    selector = ModelSelector(solver_agent, {"solver": [good]}, DATASET, exact, cache=False)
    with pytest.raises(UserError, match="await select_best"):
        selector.select_best_sync()


def test_sync_agents_get_max_concurrent_threads_not_the_default_executors_handful() -> None:
    import threading

    barrier = threading.Barrier(10, timeout=10)

    class Blocking:
        def __init__(self, models: dict[str, MeteredModel]) -> None:
            pass

        def run(self, question: str) -> str:
            barrier.wait()  # only passes when 10 runs are in flight at once
            return "right"

    good, _ = scripted("good", "right")
    data = [(f"q{i}", "right") for i in range(10)]
    result = ModelSelector(
        Blocking,
        {"solver": [good]},
        data,
        exact,
        algorithm="brute_force",
        max_concurrent=10,
        cache=False,
    ).select_best_sync()
    assert result.failures == []
    assert result.best.accuracy == 1.0


async def test_the_default_cache_lives_in_phi_home_and_is_opened_only_by_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHI_HOME", str(tmp_path / "home"))
    good, provider = scripted("good", "right")
    selector = ModelSelector(
        solver_agent, {"solver": [good]}, DATASET, exact, algorithm="brute_force"
    )
    assert not (tmp_path / "home").exists()
    await selector.select_best()
    assert (tmp_path / "home" / "select-cache.sqlite").exists()
    assert selector.cache is not None and len(selector.cache) == len(DATASET) == provider.calls


def test_candidates_take_the_race_settings_syntax_so_one_model_competes_at_two_settings() -> None:
    selector = ModelSelector(
        lambda models, x: x,
        {"solver": ["scripted:m@temperature=0", "scripted:m@temperature=0.9,max_tokens=16"]},
        DATASET,
        exact,
        cache=False,
    )
    cold, hot = selector._handles["solver"].values()
    assert (cold.name, cold.temperature, cold.max_tokens) == ("scripted:m@temperature=0", 0.0, None)
    assert (hot.temperature, hot.max_tokens) == (0.9, 16)
    assert cold.config.spec == hot.config.spec == "scripted:m"
    with pytest.raises(UserError, match="Unknown setting 'heat'"):
        ModelSelector(lambda m, x: x, {"s": ["scripted:m@heat=1"]}, DATASET, exact, cache=False)
    with pytest.raises(UserError, match="must be a number"):
        ModelSelector(lambda m, x: x, {"s": ["scripted:m@seed=x"]}, DATASET, exact, cache=False)


def test_accuracy_interval_reflects_the_sample_even_when_every_datapoint_ran() -> None:
    from phi_core.select._results import wilson_interval

    low, high = wilson_interval(1.0, 8)
    assert high == 1.0 and 0.6 < low < 0.7  # 8/8 correct is not proof of 100 %
    low, high = wilson_interval(0.75, 8)
    assert low < 0.5 < 0.9 < high
    assert wilson_interval(0.5, 0) == (0.0, 1.0)
    narrow = wilson_interval(0.75, 2000)
    assert narrow[1] - narrow[0] < 0.05


async def test_a_seeded_run_gives_every_sampled_call_the_same_seed_again() -> None:
    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        return await models["solver"].complete(f"answer {question}", temperature=0.9)

    async def seeds_of(seed: int | None) -> list[int | None]:
        handle, provider = scripted("s", "right")
        selector = ModelSelector(
            agent,
            {"solver": [handle]},
            DATASET,
            exact,
            algorithm="brute_force",
            seed=seed,
            cache=False,
        )
        await selector.select_best()
        return sorted((r.seed for r in provider.requests), key=str)

    first, again, other, unseeded = (
        await seeds_of(3),
        await seeds_of(3),
        await seeds_of(4),
        await seeds_of(None),
    )
    assert first == again and None not in first and len(set(first)) == len(DATASET)
    assert first != other
    assert unseeded == [None] * len(DATASET)


def test_async_callable_objects_and_partials_are_awaited_not_sent_to_a_thread() -> None:
    import functools

    from phi_core._callables import is_async_callable

    class CallableAgent:
        async def __call__(self, models: dict[str, Any], question: str) -> str:
            return question

    class SyncCallable:
        def __call__(self, models: dict[str, Any], question: str) -> str:
            return question

    async def tagged(tag: str, models: dict[str, Any], question: str) -> str:
        return tag

    assert is_async_callable(CallableAgent())
    assert is_async_callable(functools.partial(tagged, "x"))
    assert is_async_callable(functools.partial(functools.partial(tagged), "x"))
    assert not is_async_callable(SyncCallable())
    assert not is_async_callable(exact)
    assert not is_async_callable(CallableAgent)  # a class is built per combination, then run


async def test_cancelling_a_sync_agent_that_returns_a_coroutine_leaves_none_unawaited(
    strict_loop: Any,
) -> None:
    import gc
    import threading
    import warnings

    started = threading.Event()
    release = threading.Event()
    made: list[Any] = []

    async def answer() -> str:
        return "right"

    def slow_sync_agent(models: dict[str, Any], question: str) -> Any:
        started.set()
        release.wait(5)
        made.append(answer())  # an awaitable handed back from the thread
        return made[-1]

    good, _ = scripted("good", "right")
    selector = ModelSelector(
        slow_sync_agent,
        {"solver": [good]},
        DATASET[:1],
        exact,
        algorithm="brute_force",
        cache=False,
        model_handles=False,
    )
    task = asyncio.create_task(selector.select_best())
    await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        release.set()
        for _ in range(500):  # the thread hands back its coroutine, which must then be closed
            if made and made[0].cr_frame is None:
                break
            await asyncio.sleep(0.01)
        assert made and made[0].cr_frame is None  # closed, not left for the collector
        made.clear()
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


async def test_a_run_past_the_timeout_is_stopped_scores_zero_and_the_rest_go_on(
    strict_loop: list[dict[str, Any]],
) -> None:
    stopped: list[str] = []

    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        answer = await models["solver"].complete(question)  # metered before the hang
        if models["solver"].spec.endswith("stuck") and question in {"q2", "q5"}:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                stopped.append(question)
                raise
        return answer

    stuck, _ = scripted("stuck", "right")
    steady, _ = scripted("steady", "right", input_price=5.0)
    selector = ModelSelector(
        agent,
        {"solver": [stuck, steady]},
        DATASET,
        exact,
        algorithm="brute_force",
        cache=False,
        timeout=0.2,
    )
    result = await asyncio.wait_for(selector.select_best(), 60)
    assert sorted(stopped) == ["q2", "q5"]  # the hung runs were cancelled, not left behind
    assert result.best.models == {"solver": "scripted:steady"}  # 8/8 beats 6/8 despite its price
    by_name = {c.name: c for c in result.combinations}
    assert by_name["solver=scripted:stuck"].accuracy == pytest.approx(6 / 8)
    assert by_name["solver=scripted:stuck"].failures == 2
    rows = [r for r in result.datapoints if r.status != "ok"]
    assert {(r.combination, r.datapoint, r.status, r.score) for r in rows} == {
        ("solver=scripted:stuck", 2, "timeout", 0.0),
        ("solver=scripted:stuck", 5, "timeout", 0.0),
    }
    assert all(r.error and "ran longer than timeout=0.2 s" in r.error for r in rows)
    assert all(r.calls == 1 and r.input_tokens == 100 for r in rows)  # their calls still count
    (warning,) = [w for w in result.warnings if "failed" in w]
    assert "TimeoutError x2" in warning


async def test_an_agent_that_swallows_the_timeouts_cancellation_still_timed_out(
    strict_loop: list[dict[str, Any]],
) -> None:
    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        answer = await models["solver"].complete(question)
        if question == "q4":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                return answer  # answers anyway, after the deadline
        return answer

    good, _ = scripted("good", "right")
    result = await ModelSelector(
        agent, {"solver": [good]}, DATASET, exact, algorithm="brute_force", cache=False, timeout=0.2
    ).select_best()
    (late,) = [r for r in result.datapoints if r.status != "ok"]
    assert (late.datapoint, late.status, late.score) == (4, "timeout", 0.0)
    assert late.error is not None and "ran longer than timeout=0.2 s" in late.error
    assert result.best.accuracy == pytest.approx(7 / 8)


def test_a_sync_agents_timeout_counts_from_when_its_thread_starts() -> None:
    """One thread (max_concurrent=1): the first run hangs past the timeout and keeps the thread
    for a second; the runs queued behind it wait for it without being charged that wait."""
    first = threading.Event()

    def agent(models: dict[str, Any], question: str) -> str:
        if not first.is_set():
            first.set()
            time.sleep(1.0)  # abandoned at 0.4 s, returns at 1 s
        return "right"

    selector = ModelSelector(
        agent,
        {"solver": ["a"]},
        DATASET[:3],
        exact,
        algorithm="brute_force",
        max_concurrent=1,
        cache=False,
        model_handles=False,
        timeout=0.4,
    )
    result = selector.select_best_sync()
    statuses = sorted(r.status for r in result.datapoints)
    assert statuses == ["ok", "ok", "timeout"]
    (late,) = [r for r in result.datapoints if r.status == "timeout"]
    assert late.error is not None and "thread cannot be stopped" in late.error


async def test_sys_exit_in_an_agent_fails_that_run_only(strict_loop: list[dict[str, Any]]) -> None:
    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        if question == "q3":
            raise SystemExit(2)
        return await models["solver"].complete(question)

    good, _ = scripted("good", "right")
    result = await ModelSelector(
        agent, {"solver": [good]}, DATASET, exact, algorithm="brute_force", cache=False
    ).select_best()
    assert [(f.datapoint, f.error) for f in result.failures] == [(3, "SystemExit: 2")]
    assert result.best.accuracy == pytest.approx(7 / 8)


async def test_a_stray_cancelled_error_from_an_agent_is_its_failure_not_a_cancellation(
    strict_loop: list[dict[str, Any]],
) -> None:
    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        if question == "q1":  # e.g. the agent's own inner task was cancelled and it re-raised
            raise asyncio.CancelledError("inner job")
        return await models["solver"].complete(question)

    good, _ = scripted("good", "right")
    result = await ModelSelector(
        agent, {"solver": [good]}, DATASET, exact, algorithm="brute_force", cache=False
    ).select_best()
    ((datapoint, error),) = [(f.datapoint, f.error) for f in result.failures]
    assert datapoint == 1 and error.startswith("CancelledError: inner job")
    assert result.evaluations == 8


async def test_ctrl_c_inside_an_agent_stops_the_run_cleanly_and_keeps_the_journal(
    tmp_path: Path, strict_loop: list[dict[str, Any]]
) -> None:
    finished: list[str] = []
    interrupts = [KeyboardInterrupt()]  # one Ctrl-C

    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        if question == "q6" and interrupts:
            await asyncio.sleep(0.05)  # the others finish first
            raise interrupts.pop()
        answer = await models["solver"].complete(question)
        finished.append(question)
        return answer

    good, _ = scripted("good", "right")

    def build() -> ModelSelector:
        return ModelSelector(
            agent,
            {"solver": [good]},
            DATASET,
            exact,
            algorithm="brute_force",
            cache=False,
            journal=tmp_path / "runs.sqlite",
        )

    with pytest.raises(KeyboardInterrupt):
        await build().select_best()
    assert len(finished) == 7
    # strict_loop checks that no task was left running and no error went unretrieved
    finished.clear()
    resumed = await build().select_best(resume=True)
    assert resumed.resumed == 7 and resumed.evaluations == 8
    assert finished == ["q6"]  # only the interrupted run ran again


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "30", True])
def test_a_bad_timeout_is_refused(bad: Any) -> None:
    good, _ = scripted("good", "right")
    with pytest.raises(UserError, match=r"`timeout` must be a number of seconds > 0"):
        ModelSelector(solver_agent, {"solver": [good]}, DATASET, exact, timeout=bad)


async def test_an_llm_judges_calls_are_paid_by_the_run_not_charged_to_the_combination(
    strict_loop: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    judge, judge_provider = scripted("judge", "1", input_price=10.0, output_price=10.0)
    # the judge "takes" 1000 s of the clock the selector reads (no real waiting, so a loaded
    # machine cannot make the latency check below fail)
    # (per datapoint: another datapoint's judge, running meanwhile, moves only its own clock)
    judged: contextvars.ContextVar[float] = contextvars.ContextVar("judged", default=0.0)
    real_clock = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: real_clock() + judged.get())

    async def llm_judge(expected: str, actual: str) -> float:
        verdict = await judge.complete(f"Is {actual!r} the same as {expected!r}? Answer 1 or 0.")
        judged.set(judged.get() + 1000.0)
        return float(verdict.strip() == "1") * float(expected == actual)

    good, _ = scripted("good", "right")
    result = await ModelSelector(
        solver_agent, {"solver": [good]}, DATASET, llm_judge, algorithm="brute_force", cache=False
    ).select_best()
    assert len(judge_provider.requests) == 8 and result.best.accuracy == 1.0
    agent_cost = 8 * (100 * 1.0 + 50 * 2.0) / 1e6
    judge_cost = 8 * (100 * 10.0 + 50 * 10.0) / 1e6
    # the combination costs what its agent costs; the run paid for the judge as well
    assert result.best.cost_usd == pytest.approx(agent_cost)
    assert result.best.input_tokens == 8 * 100
    assert result.cost_usd == pytest.approx(agent_cost + judge_cost)
    assert result.scoring_cost_usd == pytest.approx(judge_cost)
    assert [r.scoring_cost_usd for r in result.datapoints] == pytest.approx([judge_cost / 8] * 8)
    assert (
        f"${agent_cost + judge_cost:.4f} spent (${judge_cost:.4f} of it scoring)" in result.totals()
    )
    assert result.totals() in result.summary()  # and the CLI's table title
    # nor is the judge's time part of the combination's latency
    assert all(r.latency_s < 1000.0 for r in result.datapoints)


async def test_a_sync_scorer_runs_in_worker_threads_beside_the_others() -> None:
    lock = threading.Lock()
    now, peak = [0], [0]

    def slow_scorer(expected: str, actual: str) -> float:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.05)  # e.g. a sync HTTP call to a judge
        with lock:
            now[0] -= 1
        return float(expected == actual)

    good, _ = scripted("good", "right")
    result = await ModelSelector(
        solver_agent,
        {"solver": [good]},
        DATASET,
        slow_scorer,
        algorithm="brute_force",
        max_concurrent=8,
        cache=False,
    ).select_best()
    assert result.best.accuracy == 1.0
    assert peak[0] > 1  # on the event loop's thread they would run one at a time


async def test_a_hung_judge_is_stopped_by_the_timeout_too(
    strict_loop: list[dict[str, Any]],
) -> None:
    async def judge(expected: str, actual: str) -> float:
        if actual == "stall":
            await asyncio.sleep(3600)  # a judge call that never returns
        return float(expected == actual)

    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        answer = await models["solver"].complete(question)
        return "stall" if question == "q6" else answer

    good, _ = scripted("good", "right")
    result = await asyncio.wait_for(
        ModelSelector(
            agent,
            {"solver": [good]},
            DATASET,
            judge,
            algorithm="brute_force",
            cache=False,
            timeout=0.2,
        ).select_best(),
        60,
    )
    ((datapoint, error),) = [(f.datapoint, f.error) for f in result.failures]
    assert datapoint == 6
    assert (
        error
        == "scorer raised TimeoutError: the scorer ran longer than timeout=0.2 s and was stopped"
    )
    assert result.best.accuracy == pytest.approx(7 / 8)


async def test_a_scorer_that_exits_or_is_interrupted_is_treated_like_an_agent(
    strict_loop: list[dict[str, Any]],
) -> None:
    def exits(expected: str, actual: str) -> float:
        raise SystemExit(4)

    async def interrupted(expected: str, actual: str) -> float:
        raise KeyboardInterrupt

    good, _ = scripted("good", "right")

    def build(scorer: Any) -> ModelSelector:
        return ModelSelector(
            solver_agent, {"solver": [good]}, DATASET, scorer, algorithm="brute_force", cache=False
        )

    result = await build(exits).select_best()
    assert {f.error for f in result.failures} == {"scorer raised SystemExit: 4"}
    with pytest.raises(KeyboardInterrupt):
        await build(interrupted).select_best()


async def test_a_damaged_cache_file_is_reported_in_the_results_warnings(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    path.write_bytes(b"not a database" * 100)
    good, _ = scripted("good", "right")
    result = await ModelSelector(
        solver_agent, {"solver": [good]}, DATASET, exact, algorithm="brute_force", cache=path
    ).select_best()
    (warning,) = [w for w in result.warnings if "was not a database" in w]
    assert warning.startswith(f"The response cache {path} was not a database: it was moved to ")
    assert result.evaluations == 8


@pytest.mark.parametrize(
    ("score", "accepted"),
    [("0.9", False), (b"1", False), (np.bool_(True), True), (np.float32(1), True)],
)
async def test_a_scorer_must_return_a_number_not_text_that_reads_as_one(
    score: object, accepted: bool
) -> None:
    good, _ = scripted("good", "right")
    selector = ModelSelector(
        solver_agent, {"solver": [good]}, DATASET, lambda e, a: score,
        algorithm="brute_force", cache=False,
    )  # fmt: skip
    if accepted:
        assert (await selector.select_best()).best.accuracy == 1.0
    else:
        with pytest.raises(UserError, match="it must return a number"):
            await selector.select_best()


async def test_a_scorer_returning_none_fails_the_datapoint_not_the_run() -> None:
    """``None`` is no verdict: that datapoint scores 0 with the reason, the run goes on, and a
    scorer that never gives one is told apart by the every-evaluation-failed warning."""
    good, _ = scripted("good", "right")
    result = await ModelSelector(
        solver_agent, {"solver": [good]}, DATASET, lambda e, a: None,
        algorithm="brute_force", cache=False,
    ).select_best()  # fmt: skip
    assert result.evaluations == len(DATASET) and result.best.accuracy == 0.0
    assert all("returned None" in (f.error or "") for f in result.failures)
    assert any(w.startswith("Every evaluation failed") for w in result.warnings)


@pytest.mark.parametrize("bad", [None, "x", 1.5, True])
def test_max_concurrent_must_be_a_whole_number(bad: object) -> None:
    good, _ = scripted("good", "right")
    with pytest.raises(UserError, match="max_concurrent must be a whole number"):
        ModelSelector(
            solver_agent, {"solver": [good]}, DATASET, lambda e, a: 1.0, max_concurrent=bad
        )


async def test_a_sync_agent_past_its_timeout_calls_no_model_after_its_run_ended() -> None:
    """Python cannot stop the thread of a sync agent past its timeout, but its model calls can
    be: the call in flight is cancelled when the run ends, later ones are refused, so nothing is
    paid for after select_best() returns and no task of the run is left on the loop."""
    slow, provider = scripted("slow", "right", delay=0.05)
    made_after: list[int] = []
    ended = threading.Event()

    def sync_agent(models: dict[str, MeteredModel], question: str) -> str:
        answer = ""
        for n in range(8):
            try:
                answer = models["solver"].complete_sync(question)
            except RunError:
                return answer
            if ended.is_set():
                made_after.append(n)
        return answer

    result = await ModelSelector(
        sync_agent, {"solver": [slow]}, DATASET[:2], exact,
        algorithm="brute_force", max_concurrent=2, cache=False, journal=False, timeout=0.08,
    ).select_best()  # fmt: skip
    ended.set()
    calls = provider.calls
    assert [r.status for r in result.datapoints] == ["timeout", "timeout"]
    assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await asyncio.sleep(0.3)  # the threads had time to try again
    assert provider.calls == calls and made_after == []


async def test_a_missing_api_key_is_refused_before_any_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHI_HOME", str(tmp_path / "home"))  # no stored key either
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ran: list[Any] = []

    async def agent(models: dict[str, Any], question: str) -> str:
        ran.append(question)
        return await models["solver"].complete(question)

    chosen = ModelSelector(
        agent,
        {"solver": ["openai:gpt-4o-mini", "scripted:a"]},
        [("q", "a")],
        lambda expected, actual: float(expected == actual),
        cache=False,
        journal=False,
    )
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        await chosen.select_best()
    assert ran == []  # refused before the agent ran, as a race refuses before any call
