"""The AgentOpt-compatible API: AgentOpt code runs with one changed import."""

from __future__ import annotations

import _thread
import asyncio
import csv
import json
import os
import runpy
import signal
import threading
import time
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from phi_core.agentopt import LLMTracker, ModelSelector, SelectionResults
from phi_core.errors import UserError
from tests.providers.fakes import FakeServer, Recorded, Respond

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Australia": "Canberra", "Canada": "Ottawa",
            "Italy": "Rome", "Brazil": "Brasilia"}  # fmt: skip
USAGE = {"gpt-4o-mini": (40, 8), "gpt-4.1-nano": (30, 6), "gpt-4o": (50, 9)}


def capitals_server(record: Recorded) -> Respond:
    """gpt-4o knows every capital; the small models mistake Australia's and Brazil's."""
    body = record.json
    model = body["model"]
    question = body["messages"][-1]["content"]
    country = next((c for c in CAPITALS if c in question), None)
    if country is None:
        text = "First find the country, then recall its capital."
    elif model != "gpt-4o" and country in ("Australia", "Brazil"):
        text = "Sydney" if country == "Australia" else "Rio de Janeiro"
    else:
        text = f"The capital is {CAPITALS[country]}."
    prompt, completion = USAGE[model]
    return Respond(200, {
        "id": "c", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    })  # fmt: skip


async def test_the_agentopt_quick_start_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeServer(default=capitals_server) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-agentopt-test")
        monkeypatch.chdir(tmp_path)
        # the example is sync (select_best blocks): run it off this loop, which serves the fake API
        await asyncio.to_thread(runpy.run_path, str(EXAMPLES / "agentopt_quickstart.py"))
        sent = len(server.requests)
    out = capsys.readouterr().out
    assert "best: {'planner': " in out and "'solver': 'gpt-4o'}" in out
    # three select_best calls; the second and third were answered from the cache: free
    assert 0 < sent <= 4 * 6 * 2
    assert "selection cost: $0.000000" in out
    rows = list(csv.DictReader((tmp_path / "agentopt_results.csv").open()))
    best = next(r for r in rows if r["is_best"] == "True")
    assert best["model_name"].endswith("solver=gpt-4o") and float(best["accuracy"]) == 1.0
    config = yaml.safe_load((tmp_path / "litellm_config.yaml").read_text())
    assert {e["model_name"] for e in config["model_list"]} == {"planner", "solver"}
    solver = next(e for e in config["model_list"] if e["model_name"] == "solver")
    assert solver["litellm_params"] == {
        "model": "openai/gpt-4o",
        "api_key": "os.environ/OPENAI_API_KEY",
    }


def test_results_carry_agentopt_fields_and_prices_from_model_prices() -> None:
    async def main() -> SelectionResults:
        async with FakeServer(default=capitals_server) as server:
            # a sync agent: select_best() is blocking, so it runs on its own loop in a thread
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="k")

            class Agent:
                def __init__(self, models: dict[str, str]) -> None:
                    self.model = models["solver"]

                def run(self, question: str) -> str:
                    r = client.chat.completions.create(
                        model=self.model, messages=[{"role": "user", "content": question}]
                    )
                    return r.choices[0].message.content or ""

            selector = ModelSelector(
                Agent,
                {"solver": ["gpt-4o-mini", "gpt-4o"]},
                lambda expected, actual: float(expected in actual),
                [(f"What is the capital of {c}?", a) for c, a in CAPITALS.items()],
                method="brute_force",
                model_prices={"gpt-4o": {"input_price": 10.0, "output_price": 30.0}},
                tracker=LLMTracker(cache=False),
                seed=3,
            )
            try:
                return await asyncio.to_thread(selector.select_best, True, 4)
            finally:
                client.close()

    results = asyncio.run(main())
    assert len(results) == 2 and results.results[0].model_name == "solver=gpt-4o"
    best = results.get_best()
    assert best.is_best and best.accuracy == 1.0 and best.num_samples == 6
    # keyed by the model the requests named, as AgentOpt keys them
    assert best.input_tokens == {"gpt-4o": 6 * 50} and best.output_tokens == {"gpt-4o": 6 * 9}
    assert best.price == pytest.approx((50 * 10.0 + 9 * 30.0) / 1e6)  # model_prices win
    mini = next(r for r in results if r.model_name == "solver=gpt-4o-mini")
    assert mini.price == pytest.approx((40 * 0.15 + 8 * 0.60) / 1e6)  # the price table
    assert mini.accuracy == pytest.approx(4 / 6)
    assert sorted(d.datapoint_index for d in best.datapoint_results) == list(range(6))
    assert all(d.score == 1.0 and d.input_tokens == {"gpt-4o": 50} for d in best.datapoint_results)
    assert all(d.total_output_tokens == 9 for d in best.datapoint_results)
    assert results.get_best_combo() == {"solver": "gpt-4o"}
    assert results.selection_cost == pytest.approx(6 * (best.price + mini.price))


def test_candidates_reach_the_agent_as_given_and_the_best_combo_names_them() -> None:
    class Llm:
        def __init__(self, model: str, skill: float) -> None:
            self.model = model
            self.skill = skill

    strong, weak = Llm("strong-llm", 1.0), Llm("weak-llm", 0.0)
    seen: list[Any] = []

    class Agent:
        def __init__(self, models: dict[str, Llm]) -> None:
            seen.append(models["solver"])
            self.llm = models["solver"]

        def run(self, x: int) -> int:
            return x if self.llm.skill else -1

    results = ModelSelector(
        Agent,
        {"solver": [weak, strong]},
        lambda e, a: float(e == a),
        [(i, i) for i in range(4)],
        method="arm_elimination",
        tracker=LLMTracker(cache=False),
    ).select_best(parallel=True)
    assert all(m in (strong, weak) for m in seen)
    assert results.get_best_combo() == {"solver": "strong-llm"}  # labels, as AgentOpt's
    assert results.get_best_candidates() == {"solver": strong}
    assert results.get_by_attribute("combination") == results.results
    assert results.get_by_attribute("other") == []
    assert results.get_best().model_name == "solver=strong-llm"
    assert any("No model call was metered" in w for w in results.native.warnings)


def test_candidates_are_named_the_same_in_every_run_and_settings_of_one_model_apart() -> None:
    class Llm:  # a framework object with a model name, a setting and a key
        def __init__(self, model: str, temperature: float, api_key: str = "sk-a") -> None:
            self.model, self.temperature, self.api_key = model, temperature, api_key

    class Opaque:  # nothing to name it by
        pass

    def names(models: dict[str, list[Any]]) -> list[str]:
        selector = ModelSelector(lambda m, x: x, models, lambda e, a: 1.0, [(1, 1)], seed=0)
        return [selector.native.space.name(k) for k in range(len(selector.native.space))]

    assert names({"k": [2, 3, 0.5, None, True]}) == ["k=2", "k=3", "k=0.5", "k=None", "k=True"]
    dicts = [{"model": "gpt-4o", "temperature": 0}, {"model": "gpt-4o", "temperature": 1}]
    assert names({"s": [*dicts, {"model": "gpt-4o-mini"}]}) == [
        "s=gpt-4o@temperature=0",  # the race-settings syntax: an exported config keeps it
        "s=gpt-4o@temperature=1",
        "s=gpt-4o-mini",
    ]
    # only known settings tell candidates apart: a differing key is never shown
    assert names({"s": [Llm("m", 0.5), Llm("m", 1)]}) == [
        "s=m@temperature=0.5",
        "s=m@temperature=1",
    ]
    assert names({"s": [Llm("m", 0, "sk-one"), Llm("m", 0, "sk-two")]}) == ["s=m#1", "s=m#2"]
    # never a memory address: a second process (or object) gets the same names
    assert names({"s": [Opaque(), Opaque()]}) == ["s=Opaque#1", "s=Opaque#2"]
    with pytest.raises(
        UserError, match=r"Step 's' lists a candidate twice: 'gpt-4o' \(items 0 and 1\)"
    ):
        names({"s": [dicts[0], dict(dicts[0])]})
    # a mapping or object without a model name is named by its type, not by its repr
    keyed = [{"endpoint": "a", "api_key": "sk-secret-one"}, {"endpoint": "b", "api_key": "sk-2"}]
    assert names({"s": keyed}) == ["s=dict#1", "s=dict#2"]


def test_agentopt_parameter_names_reach_the_algorithm() -> None:
    selector = ModelSelector(
        lambda models, x: x,
        {"solver": ["a", "b", "c"]},
        lambda e, a: 1.0,
        [(1, 1)] * 5,
        method="matrix_ucb",
        observation_budget_fraction=0.4,
        lambda_cost=0.5,
    )
    native = selector.native
    assert native._algorithm_params == {"budget_fraction": 0.4}
    assert native.objective.cost_weight == 0.5
    with pytest.raises(UserError, match="Unknown selection algorithm"):
        ModelSelector(lambda m, x: x, {"s": ["a"]}, lambda e, a: 1.0, [(1, 1)], method="nope")


def test_agentopts_selector_classes_run_their_method() -> None:
    import phi_core.agentopt as agentopt

    expected = {
        "BaseModelSelector": "auto",
        "BruteForceModelSelector": "brute_force",
        "RandomSearchModelSelector": "random",
        "HillClimbingModelSelector": "hill_climbing",
        "ArmEliminationModelSelector": "arm_elimination",
        "EpsilonLUCBModelSelector": "epsilon_lucb",
        "ThresholdBanditSEModelSelector": "threshold",
        "BayesianOptimizationModelSelector": "bayesian",
        "MatrixUCBModelSelector": "matrix_ucb",
        "MatrixUCBLRFModelSelector": "matrix_ucb_lrf",
        "LMProposalModelSelector": "lm_proposal",
    }
    dataset = [(i, i % 3) for i in range(30)]
    for name, method in expected.items():
        assert name in agentopt.__all__
        selector = getattr(agentopt, name)(
            lambda models, x: x % models["solver"],
            {"solver": [2, 3, 4]},
            lambda e, a: float(e == a),
            dataset,
            seed=1,
            cache=False,
        )
        assert selector.native._algorithm == method, name
        if method in ("auto", "brute_force", "arm_elimination"):  # run the quick ones
            results = selector.select_best(parallel=True, max_concurrent=4)
            assert results.get_best_combo() == {"solver": "3"}, name  # x % 3 == expected
            ran = "regret_race" if method == "auto" else method
            assert results.native.algorithm == ran
    # AgentOpt's parameter names work on the classes too, and the method cannot be changed
    ucb = agentopt.MatrixUCBModelSelector(
        lambda models, x: x, {"solver": ["a", "b", "c"]}, lambda e, a: 1.0, [(1, 1)] * 5,
        observation_budget_fraction=0.4,
    )  # fmt: skip
    assert ucb.native._algorithm_params == {"budget_fraction": 0.4}
    with pytest.raises(UserError, match="ArmEliminationModelSelector always runs 'arm_elim"):
        agentopt.ArmEliminationModelSelector(
            lambda m, x: x, {"s": ["a"]}, lambda e, a: 1.0, [(1, 1)], method="brute_force"
        )


def test_agentopts_newer_methods_take_their_agentopt_parameter_names() -> None:
    lrf = ModelSelector(
        lambda models, x: x,
        {"solver": ["a", "b", "c"]},
        lambda e, a: 1.0,
        [(1, 1)] * 5,
        method="matrix_ucb_lrf",
        warmup_percentage=0.1,
        regularizer_weight=0.2,
        sample_fraction=0.5,
        device="cpu",
    )
    assert lrf.native._algorithm_params == {
        "warmup_fraction": 0.1,
        "regularizer": 0.2,
        "budget_fraction": 0.5,
    }
    prices = {"a": {"input_price": 1.0, "output_price": 2.0}}
    lm = ModelSelector(
        lambda models, x: x,
        {"solver": ["a", "b"]},
        lambda e, a: 1.0,
        [(1, 1)] * 5,
        method="lm_proposal",
        proposer_model="openai:gpt-4.1",
        model_prices=prices,
        node_descriptions={"solver": "answers"},
    )
    assert lm.native._algorithm_params == {
        "proposer": "openai:gpt-4.1",
        "model_prices": prices,
        "node_descriptions": {"solver": "answers"},
    }
    with pytest.raises(UserError, match=r"device='cuda' is not available"):
        ModelSelector(
            lambda m, x: x, {"s": ["a"]}, lambda e, a: 1.0, [(1, 1)],
            method="matrix_ucb_lrf", device="cuda",
        )  # fmt: skip
    with pytest.raises(UserError, match=r"proposer_model='openai:gpt-4\.1'"):
        ModelSelector(
            lambda m, x: x, {"s": ["a"]}, lambda e, a: 1.0, [(1, 1)],
            method="lm_proposal", proposer_client=object(),
        )  # fmt: skip


def test_a_tracker_tracks_calls_outside_a_selection() -> None:
    async def main() -> LLMTracker:
        async with (
            FakeServer(default=capitals_server) as server,
            openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k") as client,
        ):
            tracker = LLMTracker(
                cache=False, model_prices={"gpt-4o": {"input_price": 1, "output_price": 1}}
            )
            tracker.start()
            try:
                for dp in range(2):
                    with tracker.track(data_id=dp, combo_id="solver=gpt-4o"):
                        await client.chat.completions.create(
                            model="gpt-4o", messages=[{"role": "user", "content": "France?"}]
                        )
            finally:
                tracker.stop()
            await client.chat.completions.create(  # after stop(): not tracked
                model="gpt-4o", messages=[{"role": "user", "content": "Japan?"}]
            )
            return tracker

    tracker = asyncio.run(main())
    assert tracker.get_usage(combo_id="solver=gpt-4o") == {"gpt-4o": (100, 18)}
    assert tracker.get_usage(data_id=1) == {"gpt-4o": (50, 9)}
    assert [r.data_id for r in tracker.get_records()] == [0, 1]


def test_csv_columns_follow_agentopt(tmp_path: Path) -> None:
    results = ModelSelector(
        lambda models, x: x,
        {"solver": ["a", "b"]},
        lambda e, a: float(e == a),
        [(1, 1), (2, 2)],
        method="brute_force",
        tracker=LLMTracker(cache=False),
    ).select_best()
    results.to_csv(tmp_path / "new" / "r.csv")  # a missing folder is made
    with pytest.raises(UserError, match=f"Cannot write '{tmp_path}': Is a directory"):
        results.to_csv(tmp_path)
    (tmp_path / "new" / "r.csv").rename(tmp_path / "r.csv")
    header = (tmp_path / "r.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["model_name", "accuracy", "latency_seconds"]
    row = next(csv.DictReader((tmp_path / "r.csv").open()))
    assert json.loads(row["input_tokens"]) == {} and row["price"] == "0.0"


def test_building_the_agent_is_neither_latency_nor_a_block_on_other_runs() -> None:
    """AgentOpt times only `run()`: an agent whose `__init__` is slow (an SDK client, a graph)
    reports the latency of its runs, and a sync agent is built in the worker thread that runs
    it, so building blocks no other run."""
    built_on: list[str] = []

    class SlowToBuild:
        def __init__(self, models: dict[str, str]) -> None:
            time.sleep(0.2)
            built_on.append(threading.current_thread().name)
            self.model = models["solver"]

        def run(self, x: int) -> int:
            time.sleep(0.01)
            return x

    results = ModelSelector(
        SlowToBuild,
        {"solver": ["a", "b"]},
        lambda e, a: e == a,
        [(i, i) for i in range(4)],
        method="brute_force",
        tracker=LLMTracker(cache=False),
    ).select_best(parallel=True, max_concurrent=8)
    assert all(0.01 <= r.latency_seconds < 0.15 for r in results), [
        r.latency_seconds for r in results
    ]
    assert len(built_on) == 8 and all(n.startswith("phi-select") for n in built_on)


def test_an_async_agent_is_built_on_the_loop_and_timed_from_its_run() -> None:
    class AsyncAgent:
        def __init__(self, models: dict[str, str]) -> None:
            asyncio.get_running_loop()  # an async agent may bind to the loop when built
            time.sleep(0.2)

        async def run(self, x: int) -> int:
            await asyncio.sleep(0.01)
            return x

    results = ModelSelector(
        AsyncAgent,
        {"solver": ["a"]},
        lambda e, a: e == a,
        [(i, i) for i in range(2)],
        method="brute_force",
        tracker=LLMTracker(cache=False),
    ).select_best()
    [only] = results.results
    assert only.accuracy == 1.0 and 0.01 <= only.latency_seconds < 0.15


def test_a_scorer_returning_none_fails_that_datapoint_and_the_run_goes_on() -> None:
    def eval_fn(expected: int, actual: int) -> float | None:
        return None if expected == 2 else float(expected == actual)

    results = ModelSelector(
        lambda models, x: x,
        {"solver": ["a"]},
        eval_fn,
        [(i, i) for i in range(4)],
        method="brute_force",
        tracker=LLMTracker(cache=False),
    ).select_best()
    [only] = results.results
    assert only.accuracy == pytest.approx(3 / 4)
    [failed] = [d for d in only.datapoint_results if d.error]
    assert failed.datapoint_index == 2 and failed.score == 0.0
    assert "returned None" in (failed.error or "")
    assert any("1 of 4 evaluations failed" in w for w in results.native.warnings)


def test_a_tracker_with_cache_dir_none_keeps_its_cache_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AgentOpt's `cache_dir=None`: an in-memory cache; nothing is written to disk, and a second
    tracker starts empty."""
    monkeypatch.setenv("PHI_HOME", str(tmp_path / "home"))

    async def main() -> int:
        async with (
            FakeServer(default=capitals_server) as server,
            openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k") as client,
        ):
            for _ in range(2):  # two trackers, each asking twice
                tracker = LLMTracker(cache_dir=None)
                tracker.start()
                try:
                    for dp in range(2):
                        with tracker.track(data_id=dp, combo_id="solver=gpt-4o"):
                            await client.chat.completions.create(
                                model="gpt-4o", messages=[{"role": "user", "content": "France?"}]
                            )
                finally:
                    tracker.stop()
            return len(server.requests)

    assert asyncio.run(main()) == 2  # each tracker's repeat came from its own memory
    assert not (tmp_path / "home").exists() or not list((tmp_path / "home").rglob("*.sqlite*"))
    assert LLMTracker().cache_setting() is True  # left out: the file in $PHI_HOME


class _Blocked:
    """An agent whose runs wait until `release` is set; `started` counts the runs begun."""

    started: list[int]
    first: threading.Event
    release: threading.Event

    @classmethod
    def fresh(cls) -> type[_Blocked]:
        return type("Blocked", (cls,), {
            "started": [], "first": threading.Event(), "release": threading.Event()
        })  # fmt: skip

    def __init__(self, models: dict[str, str]) -> None:
        del models

    def run(self, x: int) -> int:
        self.started.append(x)
        self.first.set()
        self.release.wait(10)
        return x


def _interrupt_once_running(agent: type[_Blocked], how: Any) -> threading.Thread:
    def interrupt() -> None:
        if agent.first.wait(10):
            how()

    thread = threading.Thread(target=interrupt)
    thread.start()
    return thread


def _runs_begun_after_release(agent: type[_Blocked]) -> int:
    """Let the blocked runs finish, wait for the selection's threads, count the runs begun."""
    agent.release.set()
    for thread in threading.enumerate():
        if thread.name.startswith(("phi-select", "phi-agentopt")):
            thread.join(10)
    return len(agent.started)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("outer", ["notebook", "asyncio.run"])
def test_ctrl_c_stops_a_blocking_selection_called_inside_a_running_loop(outer: str) -> None:
    """Sync `select_best()` inside `async def` runs on a loop of its own in a thread. Ctrl-C
    stops that run at once, not after the whole grid: in a notebook (a KeyboardInterrupt in the
    waiting thread) and under `asyncio.run` (whose first Ctrl-C cancels the main task)."""
    agent = _Blocked.fresh()
    selector = ModelSelector(
        agent,
        {"solver": ["a", "b"]},
        lambda e, a: 1.0,
        [(i, i) for i in range(10)],
        method="brute_force",
        tracker=LLMTracker(cache=False),
    )

    async def cell() -> SelectionResults:
        return selector.select_best(parallel=True, max_concurrent=2)

    if outer == "notebook":  # ipykernel: a running loop, Python's own SIGINT handler
        interrupter = _interrupt_once_running(agent, _thread.interrupt_main)
        loop = asyncio.new_event_loop()
        try:
            with pytest.raises(KeyboardInterrupt):
                loop.run_until_complete(cell())
        finally:
            loop.close()
    else:
        interrupter = _interrupt_once_running(agent, lambda: os.kill(os.getpid(), signal.SIGINT))
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(cell())
    interrupter.join()
    assert agent.first.is_set() and not agent.release.is_set()  # interrupted mid-run
    assert not [t for t in threading.enumerate() if t.name == "phi-agentopt" and t.is_alive()]
    assert _runs_begun_after_release(agent) == 2  # the two running then; nothing after


def _two_step_results() -> SelectionResults:
    return ModelSelector(
        lambda models, x: x,
        {"planner": ["gpt-4o-mini"], "solver": ["gpt-4o", "gpt-4o-mini"]},
        lambda e, a: float(e == a),
        [(1, 1), (2, 2)],
        method="brute_force",
        tracker=LLMTracker(cache=False),
    ).select_best()


def test_export_config_takes_agentopts_call_and_writes_a_phi_race_config_for_a_step(
    tmp_path: Path,
) -> None:
    """AgentOpt's `export_config(path, api_key_env_vars)` still writes LiteLLM YAML; the
    `phi race` config is asked for with `format=` or second (as the error message says), with
    `step=` for an agent of several steps."""
    results = _two_step_results()
    litellm = yaml.safe_load(results.export_config(tmp_path / "a.yaml", {"openai": "MY_KEY"}))
    assert litellm["model_list"][0]["litellm_params"]["api_key"] == "os.environ/MY_KEY"
    with pytest.raises(UserError, match="say which one to race") as raised:
        results.export_config(tmp_path / "r.toml", format="phi-race")
    assert "export_config(path, 'phi-race', step='...')" in str(raised.value)
    # the call the message suggests works, and so does its keyword form
    for text in (
        results.export_config(tmp_path / "r1.toml", "phi-race", step="solver"),
        results.export_config(tmp_path / "r2.toml", format="phi-race", step="solver"),
    ):
        assert "[[branches]]" in text and "step 'solver'" in text
    assert (tmp_path / "r1.toml").read_text() == (tmp_path / "r2.toml").read_text()
    with pytest.raises(UserError, match=r"`api_key_env_vars`.*'litellm', 'phi-race'"):
        results.export_config(tmp_path / "x", "yaml")
    with pytest.raises(UserError, match="two formats"):
        results.export_config(tmp_path / "x", "phi-race", format="litellm")


@pytest.mark.parametrize("bad", [None, 0, 2.5, "4"])
def test_a_bad_max_concurrent_is_a_usage_error_that_says_what_is_wanted(bad: Any) -> None:
    selector = ModelSelector(
        lambda models, x: x,
        {"solver": ["a"]},
        lambda e, a: 1.0,
        [(1, 1)],
        method="brute_force",
        tracker=LLMTracker(cache=False),
    )
    with pytest.raises(UserError, match=f"max_concurrent must be .*>= 1, got {bad!r}"):
        selector.select_best(parallel=True, max_concurrent=bad)
