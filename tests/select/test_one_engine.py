"""Selection speaks the races' language: an evaluation stopped by a timeout or by the budget's
wall clock has the status :func:`~phi_core.outcome.status_of_error_kind` gives (``timeout``) and
the warning says what stopped it; every selection event carries the run's id as its
``loop_id``; the result (``phi select --json``) describes itself with a ``type``, a ``status``,
a ``session_id`` and a ``usage`` object shaped like a race's; and the spec's ``[budget]`` and
``phi select``'s options take every limit of a :class:`~phi_core.metering.Budget`, checked as
``Budget`` checks them and located like every other spec error."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from phi_core.cli.select import command
from phi_core.config import load_select_spec
from phi_core.errors import ConfigError
from phi_core.events import (
    SelectionEnd,
    SelectionEvaluation,
    SelectionStart,
    add_observer,
    remove_observer,
)
from phi_core.metering import Budget
from phi_core.outcome import status_of_error_kind
from phi_core.providers.base import ModelConfig
from phi_core.select import MeteredModel, ModelSelector
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Pricing, Usage

PRICE = Pricing(input=1_000_000.0, output=2_000_000.0)


def handle(name: str, reply: Reply | None = None) -> MeteredModel:
    provider = ScriptedProvider(
        name=name, default=reply or Reply("right", usage=Usage(input=5, output=5))
    )
    config = ModelConfig(provider="scripted", id=name, api="scripted", pricing=PRICE)
    return MeteredModel(config, provider=provider, max_tokens=50)


def slow() -> Reply:
    """A reply that streams for about 2.4 s."""
    return Reply(text=["par", "tial ", "answer ", "more"], delta_delay=0.6)


async def agent(models: dict[str, MeteredModel], question: str) -> str:
    return str(await models["solver"].complete(question))


def exact(expected: Any, actual: Any) -> float:
    return float(expected == actual)


class Events:
    """The selection events every observer sees during the block."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __enter__(self) -> Events:
        add_observer(self.events.append)
        return self

    def __exit__(self, *exc: object) -> None:
        remove_observer(self.events.append)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


# ---------------------------------------------------------------- statuses and the warning


async def test_evaluations_the_budgets_wall_clock_stopped_are_timeouts_as_in_races() -> None:
    # a first run sets up what every run shares (interception), which the clock would count
    await ModelSelector(
        agent, {"solver": [handle("m0")]}, [("q0", "right")], exact, cache=False, journal=False
    ).select_best()
    selector = ModelSelector(
        agent, {"solver": [handle("m0", slow()), handle("m1", slow())]},
        [("q0", "right"), ("q1", "right")], exact, algorithm="brute_force",
        budget=Budget(max_wall_s=1.0), cache=False, journal=False, max_concurrent=4, seed=1,
    )  # fmt: skip
    with Events() as seen:
        result = await asyncio.wait_for(selector.select_best(), 30)
    assert [d.status for d in result.datapoints] == ["timeout"] * 4
    assert {d.error_kind for d in result.datapoints} == {"timeout"}
    assert status_of_error_kind("timeout") == "timeout"
    assert [e.status for e in seen.of(SelectionEvaluation)] == ["timeout"] * 4
    assert all(e.error_kind == "timeout" for e in seen.of(SelectionEvaluation))
    (warning,) = [w for w in result.warnings if w.startswith("Every evaluation")]
    assert warning.startswith("Every evaluation was stopped before it finished")
    assert "the budget's wall clock ran out (max_wall_s=1 s)" in warning
    assert "fix what raised" not in warning
    assert result.budget_exhausted and result.status == "over_budget"


async def test_evaluations_their_own_timeout_stopped_are_not_called_failures_to_fix() -> None:
    async def stalls(models: dict[str, MeteredModel], question: str) -> str:
        await asyncio.sleep(30)
        return "right"

    result = await ModelSelector(
        stalls, {"solver": [handle("m0")]}, [("q0", "right"), ("q1", "right")], exact,
        algorithm="brute_force", cache=False, journal=False, timeout=0.1,
    ).select_best()  # fmt: skip
    assert [d.status for d in result.datapoints] == ["timeout", "timeout"]
    (warning,) = [w for w in result.warnings if w.startswith("Every evaluation")]
    assert warning.startswith("Every evaluation was stopped before it finished")
    assert "they ran longer than timeout=0.1 s" in warning and "a larger timeout" in warning
    assert "fix what raised" not in warning


async def test_stopped_evaluations_among_failed_ones_are_told_apart() -> None:
    async def raises_or_stalls(models: dict[str, MeteredModel], question: str) -> str:
        if question == "q0":
            raise ValueError("broken agent")
        await asyncio.sleep(30)
        return "right"

    result = await ModelSelector(
        raises_or_stalls, {"solver": [handle("m0")]}, [("q0", "right"), ("q1", "right")], exact,
        algorithm="brute_force", cache=False, journal=False, timeout=0.1,
    ).select_best()  # fmt: skip
    assert sorted(d.status for d in result.datapoints) == ["error", "timeout"]
    (warning,) = [w for w in result.warnings if w.startswith("Every evaluation")]
    assert "fix what raised and run again." in warning
    assert (
        "1 of them did not fail on their own but were stopped: they ran longer than "
        "timeout=0.1 s (more time: a larger timeout)." in warning
    )


async def test_an_evaluation_that_raised_is_still_an_error_to_fix() -> None:
    async def raises(models: dict[str, MeteredModel], question: str) -> str:
        raise ValueError("broken agent")

    result = await ModelSelector(
        raises, {"solver": [handle("m0")]}, [("q0", "right")], exact,
        algorithm="brute_force", cache=False, journal=False,
    ).select_best()  # fmt: skip
    (row,) = result.datapoints
    assert (row.status, row.error_kind) == ("error", None)
    (warning,) = [w for w in result.warnings if w.startswith("Every evaluation")]
    assert "fix what raised and run again" in warning and "stopped" not in warning


# ---------------------------------------------------------------- resuming after the budget


async def test_a_run_resumed_after_the_budget_stopped_it_runs_the_refused_cells(
    tmp_path: Path,
) -> None:
    a, b = handle("a"), handle("b")

    def selector(budget: Budget | None) -> ModelSelector:
        return ModelSelector(
            agent, {"solver": [a, b]}, [(f"q{i}", "right") for i in range(3)], exact,
            algorithm="brute_force", budget=budget, cache=False, journal=tmp_path / "j.sqlite",
            max_concurrent=1, seed=1,
        )  # fmt: skip

    first = await selector(Budget(max_calls=2)).select_best()
    assert first.budget_exhausted and first.evaluations == 2
    again = await selector(None).select_best(resume=True)
    assert not again.budget_exhausted and again.evaluations == 6
    assert again.resumed == 2  # the two that ran; not the ones the budget refused


async def test_a_run_resumed_after_the_budgets_wall_clock_runs_the_cells_it_cut(
    tmp_path: Path,
) -> None:
    await ModelSelector(  # set up what every run shares first (see above)
        agent, {"solver": [handle("m0")]}, [("q0", "right")], exact, cache=False, journal=False
    ).select_best()

    def cut_then_fast(name: str) -> MeteredModel:
        provider = ScriptedProvider(
            [slow(), slow()], name=name, default=Reply("right", usage=Usage(input=5, output=5))
        )
        config = ModelConfig(provider="scripted", id=name, api="scripted", pricing=PRICE)
        return MeteredModel(config, provider=provider, max_tokens=50)

    m0, m1 = cut_then_fast("m0"), cut_then_fast("m1")

    def selector(budget: Budget | None) -> ModelSelector:
        return ModelSelector(
            agent, {"solver": [m0, m1]}, [("q0", "right"), ("q1", "right")], exact,
            algorithm="brute_force", budget=budget, cache=False, journal=tmp_path / "j.sqlite",
            max_concurrent=4, seed=1,
        )  # fmt: skip

    first = await asyncio.wait_for(selector(Budget(max_wall_s=1.0)).select_best(), 30)
    assert len(first.failures) == len(first.datapoints) == 4  # all cut by the wall clock
    again = await selector(None).select_best(resume=True)
    assert again.resumed == 0  # cut short by the budget, so run again
    assert [d.status for d in again.datapoints] == ["ok"] * 4 and again.best.accuracy == 1.0


# ---------------------------------------------------------------- ids and the result's shape


async def test_every_selection_event_carries_the_runs_id_as_its_loop_id() -> None:
    selector = ModelSelector(
        agent, {"solver": [handle("a"), handle("b")]}, [("q0", "right"), ("q1", "right")],
        exact, algorithm="brute_force", cache=False, journal=False,
    )  # fmt: skip
    with Events() as seen:
        result = await selector.select_best()
    events = seen.of(SelectionStart) + seen.of(SelectionEvaluation) + seen.of(SelectionEnd)
    assert len(events) == 1 + 4 + 1
    assert result.session_id
    assert {(e.loop_id, e.session_id) for e in events} == {(result.session_id,) * 2}


async def test_the_result_describes_itself_in_the_races_words() -> None:
    selector = ModelSelector(
        agent, {"solver": [handle("a"), handle("b")]}, [(f"q{i}", "right") for i in range(3)],
        exact, algorithm="brute_force", cache=False, journal=False, max_concurrent=1,
        budget=Budget(max_calls=4),
    )  # fmt: skip
    with Events() as seen:
        result = await selector.select_best()
    (end,) = seen.of(SelectionEnd)
    data = json.loads(result.to_json())
    assert data["type"] == "selection_result"
    assert data["session_id"] == result.session_id == end.session_id
    assert data["status"] == "over_budget" == end.status
    assert data["usage"] == end.usage.model_dump(mode="json")
    assert data["usage"] == Usage(input=20, output=20).model_dump(mode="json")  # 4 calls sent
    assert data["cost_usd"] == pytest.approx(end.cost_usd)
    row = data["datapoints"][0]
    assert row["usage"] == Usage(input=5, output=5).model_dump(mode="json")
    assert (row["input_tokens"], row["output_tokens"]) == (5, 5)  # kept for older readers
    best = data["best"]
    assert best["usage"]["input"] == best["input_tokens"] and best["usage"]["total"] > 0


# ---------------------------------------------------------------- the CLI

AGENT = """
from phi_core.providers.base import ModelConfig
from phi_core.select import MeteredModel
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Pricing, Usage

HANDLE = MeteredModel(
    ModelConfig(provider="scripted", id="x", api="scripted", pricing=Pricing(input=1e6, output=1e6)),
    provider=ScriptedProvider(name="x", default=Reply("yes", usage=Usage(input=5, output=5))),
    max_tokens=5,
)


async def agent(models, question):
    return await HANDLE.complete(question)
"""


def make_app() -> typer.Typer:
    app = typer.Typer()
    app.command()(command)
    return app


def write_spec(tmp_path: Path, budget: str = "") -> Path:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "data.jsonl").write_text(
        "\n".join(json.dumps({"input": f"q{i}", "expected": "yes"}) for i in range(3))
    )
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'dataset = "data.jsonl"\nagent = "agent.py:agent"\nalgorithm = "brute_force"\n'
        "seed = 1\ncache = false\nmax_concurrent = 1\n"
        '[steps]\nsolver = ["scripted:a", "scripted:b"]\n' + budget
    )
    return spec


def test_phi_select_json_is_one_line_shaped_like_a_race_result(tmp_path: Path) -> None:
    done = CliRunner().invoke(make_app(), [str(write_spec(tmp_path)), "--json", "-n"])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert len(lines) == 1  # one JSON object on one line, as `phi race --json` ends
    payload = json.loads(lines[0])
    assert payload["type"] == "selection_result" and payload["status"] == "ok"
    assert payload["session_id"] and payload["run_id"] is None and payload["conversation_id"]
    assert set(payload["usage"]) == set(Usage().model_dump())
    assert payload["usage"]["total"] == 6 * 10  # 2 combinations x 3 items, one call each
    assert payload["best"]["name"] and payload["evaluations"] == 6  # the fields of before


@pytest.mark.parametrize(
    ("option", "value", "calls"),
    [
        ("--max-calls", "2", 2),
        ("--max-total-tokens", "25", 2),
        ("--max-cost", "25", 2),  # $10 a call
        ("--max-evaluations", "2", 2),
    ],
)
def test_phi_select_takes_the_budgets_limits(
    tmp_path: Path, option: str, value: str, calls: int
) -> None:
    done = CliRunner().invoke(
        make_app(), [str(write_spec(tmp_path)), "--json", "-n", option, value]
    )
    assert done.exit_code == 0, done.output
    payload = json.loads(done.stdout)
    assert payload["status"] == "over_budget" and payload["budget_exhausted"]
    assert payload["usage"]["total"] == calls * 10


def test_phi_select_deadline_is_the_budgets_wall_clock(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    agent_file = tmp_path / "agent.py"
    agent_file.write_text(
        agent_file.read_text().replace('Reply("yes",', 'Reply(["y", "es"], delta_delay=0.5,')
    )
    done = CliRunner().invoke(make_app(), [str(spec), "--json", "-n", "--deadline", "0.3"])
    payload = json.loads(done.stdout)  # the result is printed, and the run fails:
    assert payload["status"] == "over_budget"
    assert {row["status"] for row in payload["datapoints"]} == {"timeout"}
    # nothing was measured, so nothing is recommended (as a race whose every branch failed)
    assert done.exit_code == 1 and "so no combination can be recommended" in done.stderr


@pytest.mark.parametrize(
    ("option", "value"), [("--max-calls", str(10**16)), ("--max-total-tokens", str(10**16))]
)
def test_phi_select_refuses_a_limit_budget_refuses_naming_the_option(
    tmp_path: Path, option: str, value: str
) -> None:
    done = CliRunner().invoke(make_app(), [str(write_spec(tmp_path)), "-n", option, value])
    assert done.exit_code == 2 and done.stdout == ""
    assert f"{option} must be" in " ".join(done.stderr.split())


# ---------------------------------------------------------------- the spec's [budget]


def test_the_specs_budget_takes_every_limit_of_a_budget(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "[budget]\nmax_cost = 2\nmax_total_tokens = 1000\nmax_calls = 30\ndeadline = 90\n"
        "max_evaluations = 5\n",
    )
    selector = load_select_spec(spec).selector()
    assert selector.budget == Budget(
        max_tokens=1000, max_cost_usd=2.0, max_wall_s=90.0, max_calls=30
    )
    assert selector.max_evaluations == 5


def test_the_specs_budget_takes_the_budgets_own_names_too(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "[budget]\nmax_tokens = 1000\nmax_wall_s = 90\nmax_cost_usd = 1\n")
    assert load_select_spec(spec).selector().budget == Budget(
        max_tokens=1000, max_cost_usd=1.0, max_wall_s=90.0
    )
    # an option replaces the file's value, under either name
    replaced = load_select_spec(spec, budget={"deadline": 5.0, "max_calls": 3}).selector()
    assert replaced.budget == Budget(max_tokens=1000, max_cost_usd=1.0, max_wall_s=5.0, max_calls=3)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("max_calls = 0", "max_calls"),
        ("max_calls = 2.5", "max_calls"),
        ("max_calls = true", "max_calls"),
        ("max_total_tokens = 10_000_000_000_000_000", "max_total_tokens"),
        ('max_total_tokens = "many"', "max_total_tokens"),
        ("deadline = 0", "deadline"),
        ("deadline = nan", "deadline"),
        ("max_wall_s = -1", "max_wall_s"),
        ("max_cost = inf", "max_cost"),
        ("max_evaluations = 1.5", "max_evaluations"),
    ],
)
def test_a_budget_limit_budget_would_refuse_is_located(tmp_path: Path, line: str, key: str) -> None:
    spec = write_spec(tmp_path, "[budget]\n" + line + "\n")
    with pytest.raises(ConfigError, match=r"must be (a|>)") as info:
        load_select_spec(spec).selector()
    assert (info.value.file, info.value.line, info.value.key) == (str(spec), 10, f"budget.{key}")
