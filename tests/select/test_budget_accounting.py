"""A selection's budget counts what was sent and paid (cache hits are free, like
:class:`~phi_core.metering.Meter`), while a combination's price counts every call (cache hits
priced) so the ranking does not depend on the cache; ``SelectionEnd`` reports the paid tokens and
dollars of the same calls with the status the races use (``over_budget``). The CLI and the MCP
server refuse limits that are not finite numbers, saying so and where."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.errors import UserError
from phi_core.events import SelectionEnd, add_observer, remove_observer
from phi_core.mcp_server import RaceTools
from phi_core.metering import Budget
from phi_core.providers.base import ModelConfig
from phi_core.select import Evaluation, MeteredModel, ModelSelector, ResponseCache
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Pricing, Usage

PRICE = Pricing(input=1_000_000.0, output=2_000_000.0)  # $1 an input token, $2 an output one
DATASET = [(f"q{i}", "right") for i in range(6)]
AGENT_CALL_USD = 5 * 1.0 + 5 * 2.0  # 5 input and 5 output tokens
JUDGE_CALL_USD = 10 * 1.0 + 1 * 2.0


def handle(name: str, i: int = 5, o: int = 5) -> tuple[MeteredModel, ScriptedProvider]:
    provider = ScriptedProvider(name=name, default=Reply("right", usage=Usage(input=i, output=o)))
    config = ModelConfig(provider="scripted", id=name, api="scripted", pricing=PRICE)
    return MeteredModel(config, provider=provider, max_tokens=5), provider


async def agent(models: dict[str, Any], question: str) -> str:
    return str(await models["solver"].complete(question))


class Run:
    """Two candidate models (and optionally an LLM judge) over six datapoints."""

    def __init__(self) -> None:
        (self.a, self.pa), (self.b, self.pb) = handle("a"), handle("b")
        self.judge, self.pj = handle("judge", 10, 1)

    async def select(
        self, budget: Budget | None = None, *, cache: Any = False, judge: bool = False
    ) -> tuple[Any, list[SelectionEnd]]:
        async def scorer(expected: Any, actual: Any) -> float:
            if judge:
                await self.judge.complete(f"grade {actual}", max_tokens=1)
            return float(expected == actual)

        ends: list[SelectionEnd] = []

        def observe(event: Any) -> None:
            if isinstance(event, SelectionEnd):
                ends.append(event)

        add_observer(observe)
        try:
            selector = ModelSelector(
                agent, {"solver": [self.a, self.b]}, DATASET, scorer, algorithm="brute_force",
                budget=budget, cache=cache, journal=False, max_concurrent=1, seed=1,
            )  # fmt: skip
            result = await selector.select_best()
        finally:
            remove_observer(observe)
        return result, ends

    @property
    def sent(self) -> int:
        return self.pa.calls + self.pb.calls + self.pj.calls


@pytest.fixture
async def warm(tmp_path: Path) -> tuple[Run, ResponseCache]:
    """A run whose every agent call is in the cache."""
    run, cache = Run(), ResponseCache(tmp_path / "cache.sqlite")
    result, _ = await run.select(cache=cache)
    assert result.evaluations == 12 and run.sent == 12
    return run, cache


@pytest.mark.parametrize(
    "budget", [Budget(max_calls=2), Budget(max_tokens=40), Budget(max_cost_usd=30)]
)
async def test_cache_hits_do_not_count_against_the_budget(
    warm: tuple[Run, ResponseCache], budget: Budget
) -> None:
    run, cache = warm
    result, ends = await run.select(budget, cache=cache)
    assert run.sent == 12  # nothing more was sent: every call was a cache hit
    assert not result.budget_exhausted  # before: stopped after 2 calls' / 40 tokens' worth
    assert result.evaluations == 12 and result.cost_usd == 0.0
    # the price of each combination still counts its cache hits (ranking is cache-independent)
    assert [c.cost_usd for c in result.combinations] == [6 * AGENT_CALL_USD] * 2
    assert ends[-1].status == "ok" and ends[-1].cost_usd == 0.0 and ends[-1].usage.total == 0


async def test_budget_counts_the_calls_sent_judge_included() -> None:
    run = Run()
    result, ends = await run.select(Budget(max_calls=4), judge=True)
    assert result.budget_exhausted
    assert run.sent <= 4  # agent and judge calls together, like the run's Meter
    assert ends[-1].status == "over_budget"


async def test_selection_end_reports_paid_usage_and_cost_of_the_same_calls() -> None:
    run = Run()
    result, ends = await run.select(Budget(max_cost_usd=100), judge=True)
    (end,) = ends
    assert result.budget_exhausted and end.status == "over_budget"  # was "budget"
    agent_calls, judge_calls = run.pa.calls + run.pb.calls, run.pj.calls
    paid = agent_calls * AGENT_CALL_USD + judge_calls * JUDGE_CALL_USD
    assert end.cost_usd == pytest.approx(paid) == pytest.approx(result.cost_usd)
    # tokens of the same calls: the judge's too (before: the agents' only)
    assert end.usage.total == agent_calls * 10 + judge_calls * 11


async def test_selection_end_of_an_unlimited_run_counts_the_judge_tokens() -> None:
    run = Run()
    result, (end,) = await run.select(judge=True)
    assert end.status == "ok" and not result.budget_exhausted
    assert end.usage.total == 12 * 10 + 12 * 11
    assert end.cost_usd == pytest.approx(12 * AGENT_CALL_USD + 12 * JUDGE_CALL_USD)


def test_evaluation_paid_figures_default_to_its_price() -> None:
    usage = Usage(input=5, output=5)
    old = Evaluation(config_id="c", cost_usd=3.0, calls=2, usage=usage)  # a journal row of before
    assert (old.paid, old.paid_calls, old.paid_tokens) == (3.0, 2, 10)
    hit = Evaluation(
        config_id="c", cost_usd=3.0, calls=2, usage=usage, spent_usd=0.0, calls_sent=0,
        usage_sent=Usage(),
    )  # fmt: skip
    assert (hit.paid, hit.paid_calls, hit.paid_tokens) == (0.0, 0, 0)
    assert hit.cost_usd == 3.0


# ---------------------------------------------------------------- limits that are not numbers


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_select_spec_with_an_infinite_max_cost_is_located(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text('{"input": "q", "expected": "a"}\n')
    spec = tmp_path / "spec.toml"
    for value in ("inf", "nan"):
        spec.write_text(
            'dataset = "data.jsonl"\ncache = false\n[steps]\ns = ["scripted:a"]\n'
            f'[prompts]\ns = "{{input}}"\n[budget]\nmax_cost = {value}\n'
        )
        code, out, err = invoke("select", str(spec))
        assert code == 2 and out == ""
        assert f"{spec}:8, key `budget.max_cost`" in err and "finite" in err, err


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"scripted:a": {"default": "A."}, "scripted:b": {"default": "B."}}))
    return str(path)


@pytest.mark.parametrize(
    ("option", "value"),
    [("--max-cost", "nan"), ("--max-cost", "inf"), ("--deadline", "nan"), ("--timeout", "nan")],
)
def test_race_limits_must_be_finite_numbers(script: str, option: str, value: str) -> None:
    code, out, err = invoke(
        "race", "hi", "-m", "scripted:a", "-m", "scripted:b", "--strategy", "pick-first",
        "--script", script, "-n", option, value,
    )  # fmt: skip
    assert code == 2 and out == ""
    text = " ".join(err.split())
    assert option in text and "must be a finite number" in text
    assert "greater than or equal" not in text


def test_mcp_serve_refuses_an_infinite_max_cost_at_startup() -> None:
    code, _, err = invoke("mcp", "serve", "--max-cost", "inf")
    assert code == 2 and "must be a finite number" in " ".join(err.split())
    with pytest.raises(UserError, match="finite"):
        RaceTools({}, max_cost_usd=float("inf"))
    with pytest.raises(UserError, match="finite"):
        RaceTools({}, max_cost_usd=float("nan"))
