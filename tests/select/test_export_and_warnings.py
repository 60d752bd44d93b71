"""What a selection result tells its user: configs exported for models phi-core's catalog does not
know, costs that are unknown (not $0), token counts that were estimated, and what an LM proposer
spent (the AgentOpt audit's findings)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from phi_core.config import load_race_spec
from phi_core.providers.pricing import price_for
from phi_core.select import Arena, Evaluation, ModelSelector, SearchSpace
from phi_core.select._results import SelectionResult, build_result
from phi_core.types import Usage

from .llm_server import LlmServer


class Cells:
    """Cells from fixed per-combination scores, costs, latencies and per-model usage."""

    def __init__(
        self,
        scores: Sequence[float],
        costs: Sequence[float],
        latencies: Sequence[float],
        models: Sequence[str],
    ) -> None:
        self.scores, self.costs, self.latencies, self.models = scores, costs, latencies, models

    async def evaluate(self, batch: Mapping[int, Sequence[int]]) -> dict[int, list[Evaluation]]:
        return {
            k: [
                Evaluation(
                    score=self.scores[k],
                    cost_usd=self.costs[k],
                    latency_s=self.latencies[k],
                    calls=1,
                    usage=Usage(input=10, output=2),
                    model_usage={self.models[k]: Usage(input=10, output=2)},
                )
                for _ in items
            ]
            for k, items in batch.items()
        }


async def brute(
    space: SearchSpace, cells: Cells, unpriced: Sequence[str] = (), n: int = 4
) -> tuple[SelectionResult, Arena]:
    names = [space.name(k) for k in range(len(space))]
    arena = Arena(len(space), n, cells, seed=0, names=names, unpriced=lambda: unpriced)
    await arena.evaluate_prefix(range(len(space)), n)
    result = build_result(
        arena, space, arena.best(), algorithm="brute_force", params={}, pool=None, spent=0.0,
        wall_time=0.0, unpriced=unpriced,
    )  # fmt: skip
    return result, arena


# --------------------------------------------------------------------------- 1. export


async def test_models_the_catalog_does_not_know_are_exported_with_a_guessed_provider(
    tmp_path: Path,
) -> None:
    """AgentOpt's names (``model-a``, ``llama3.1:8b``, a fine-tune, ``vendor/model``) never
    fail the export: the catalog decides what it knows, the rest is guessed from the name and
    the entry says so; every step's model is named in a comment."""
    steps = {
        "planner": "model-a",
        "solver": "llama3.1:8b",
        "critic": "anthropic/claude-3-haiku",
        "writer": "my-finetune@temperature=0.3",
        "checker": "claude-next",
        "judge": "gpt-4o-mini",
    }
    space = SearchSpace({step: [model] for step, model in steps.items()})
    result, _ = await brute(space, Cells([1.0], [0.001], [0.5], ["openai:model-a"]))
    text = result.export_config(tmp_path / "litellm.yaml")
    config = yaml.safe_load(text)
    params = {e["model_name"]: e["litellm_params"] for e in config["model_list"]}
    assert {step: p["model"] for step, p in params.items()} == {
        "planner": "openai/model-a",
        "solver": "openai/llama3.1:8b",
        "critic": "anthropic/claude-3-haiku",  # a provider/ prefix is kept
        "writer": "openai/my-finetune",
        "checker": "anthropic/claude-next",
        "judge": "openai/gpt-4o-mini",  # the catalog's
    }
    assert params["writer"]["temperature"] == 0.3
    assert params["planner"]["api_key"] == "os.environ/OPENAI_API_KEY"
    assert params["critic"]["api_key"] == "os.environ/ANTHROPIC_API_KEY"
    lines = text.splitlines()
    for step, model in steps.items():
        assert any(line.startswith("#") and f"{step} -> {model}" in line for line in lines)
        note = lines[lines.index(f"- model_name: {step}") - 1]
        assert note.startswith("#") and f"step {step} -> {model}" in note
        assert ("guessed" in note) == (step != "judge"), note

    race = result.export_config(tmp_path / "race.toml", "phi-race", step="solver")
    branch = load_race_spec(tmp_path / "race.toml").branches
    assert [(b.name, b.model) for b in branch] == [("llama3.1:8b", "openai:llama3.1:8b")]
    assert "guessed" in race and "OPENAI_BASE_URL" in race
    result.export_config(tmp_path / "race2.toml", "phi-race", step="planner")
    assert [b.model for b in load_race_spec(tmp_path / "race2.toml").branches] == ["openai:model-a"]


async def test_control_characters_in_names_leave_the_exported_configs_readable(
    tmp_path: Path,
) -> None:
    """A line break or another control character in a step or model name stays inside its
    comment line (escaped) or its quoted value: both files still load, with the names intact."""
    space = SearchSpace({"sol\nver": ["gpt-4o\n- model_name: evil", "odd\x1bname\u2028x"]})
    cells = Cells([1.0, 0.5], [0.001, 0.001], [0.5, 0.5], ["openai:gpt-4o", "openai:odd"])
    result, _ = await brute(space, cells)
    text = result.export_config(tmp_path / "litellm.yaml")
    config = yaml.safe_load(text)
    [entry] = config["model_list"]
    assert entry["model_name"] == "sol\nver"
    header = text.split("model_list:")[0].splitlines()
    assert header and all(line.startswith("#") for line in header), header
    race = result.export_config(tmp_path / "race.toml", "phi-race")
    assert all(line.startswith("#") for line in race.split("[[branches]]")[0].splitlines() if line)
    branches = load_race_spec(tmp_path / "race.toml").branches
    assert [b.name for b in branches] == ["gpt-4o\n- model_name: evil"]


# --------------------------------------------------------------------------- 2. unknown cost


async def test_an_unpriced_combination_shows_na_and_never_wins_the_front_on_cost() -> None:
    """model-x has no price: its $0 is unknown, not free. It does not push the equally
    accurate, equally fast, priced model-a off the Pareto front, and the summary says n/a."""
    space = SearchSpace({"solver": ["model-a", "model-x", "model-b"]})
    cells = Cells(
        [1.0, 1.0, 0.5],
        [0.001, 0.0, 0.0005],
        [0.5, 0.5, 0.1],
        ["openai:model-a", "openai:model-x", "openai:model-b"],
    )
    result, _ = await brute(space, cells, unpriced=["openai:model-x"])
    assert {c.name for c in result.pareto_front()} == {
        "solver=model-a",
        "solver=model-x",
        "solver=model-b",  # less accurate, but cheaper than model-a and faster than both
    }
    assert result.best.pareto
    rows = {line.split()[1]: line for line in result.summary().splitlines()[1:4]}
    assert " n/a " in rows["solver=model-x"] and "$" not in rows["solver=model-x"]
    assert "$0.00100" in rows["solver=model-a"]
    by_name = {c.name: c for c in result.combinations}
    assert by_name["solver=model-x"].unpriced_models == ["openai:model-x"]
    assert not by_name["solver=model-x"].cost_known and by_name["solver=model-a"].cost_known
    # an unknown cost is compared on accuracy and latency: a less accurate one is dominated
    worse = Cells([1.0, 0.5], [0.001, 0.0], [0.5, 0.5], ["openai:model-a", "openai:model-x"])
    result, _ = await brute(
        SearchSpace({"solver": ["model-a", "model-x"]}), worse, ["openai:model-x"]
    )
    assert [c.name for c in result.pareto_front()] == ["solver=model-a"]


async def test_an_unpriced_combination_never_wins_a_tie_on_cost() -> None:
    """Ties go to the cheaper combination, and an unknown cost is not cheaper than a known
    one: the priced model wins at equal accuracy and latency, in the algorithms' pick
    (`Arena.best`), the ranking and the result. Between unknown costs, latency and the name
    decide."""
    space = SearchSpace({"solver": ["model-a", "my-finetune"]})
    cells = Cells([1.0, 1.0], [0.001, 0.0], [0.5, 0.5], ["openai:model-a", "openai:my-finetune"])
    result, arena = await brute(space, cells, unpriced=["openai:my-finetune"])
    assert arena.cost_unknown(1) and not arena.cost_unknown(0)
    assert arena.best() == 0 and sorted(range(2), key=arena.rank_key) == [0, 1]
    assert result.best.name == "solver=model-a"
    assert [c.name for c in result.evaluated()] == ["solver=model-a", "solver=my-finetune"]
    both = ["openai:model-a", "openai:my-finetune"]
    result, arena = await brute(space, Cells([1.0, 1.0], [0.001, 0.0], [0.5, 0.1], both), both)
    assert arena.best() == 1 and result.best.name == "solver=my-finetune"  # clearly faster


async def test_when_every_combination_is_unpriced_the_front_is_on_accuracy_and_latency() -> None:
    space = SearchSpace({"solver": ["local-a", "local-b", "local-c"]})
    cells = Cells(
        [1.0, 1.0, 0.5], [0.0] * 3, [0.5, 2.0, 0.1], ["openai:local-a", "openai:local-b", "x:c"]
    )
    unpriced = ["openai:local-a", "openai:local-b", "x:c"]
    result, _ = await brute(space, cells, unpriced=unpriced)
    plain, _ = await brute(space, cells)
    assert [c.name for c in result.pareto_front()] == [c.name for c in plain.pareto_front()]
    assert {c.name for c in result.pareto_front()} == {"solver=local-a", "solver=local-c"}
    assert result.best.name == plain.best.name == "solver=local-a"
    assert all(c.cost_usd == 0.0 for c in result.combinations)


async def test_a_domination_cycle_through_an_unknown_cost_keeps_the_best_on_the_front() -> None:
    """Equal accuracy; priced p1 > p2 > ... on cost with each slightly (not clearly) slower, and
    the unpriced u clearly faster than p1 and clearly slower than the last: without care every
    combination is dominated by another one. The front is not empty and holds the best."""
    lat = [1.0, 2.0, 1.55, 1.2, 0.92, 0.7]
    cost = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    names = ["u", "p1", "p2", "p3", "p4", "p5"]
    space = SearchSpace({"solver": names})
    cells = Cells([1.0] * 6, cost, lat, [f"openai:{n}" for n in names])
    result, arena = await brute(space, cells, unpriced=["openai:u"])
    unknown = {0}
    assert all(any(arena.dominates(j, k, unknown) for j in range(6)) for k in range(6))  # the cycle
    front = result.pareto_front()
    assert front and result.best in front and result.best.is_best


# --------------------------------------------------------------------------- 3. estimated tokens


@pytest.mark.parametrize("include_usage", [False, True])
async def test_streams_without_usage_are_counted_in_a_warning(include_usage: bool) -> None:
    async with LlmServer() as server:
        client = server.openai(max_retries=0)

        class Agent:
            def __init__(self, models: dict[str, str]) -> None:
                self.model = models["solver"]

            async def run(self, question: str) -> str:
                extra: dict[str, Any] = (
                    {"stream_options": {"include_usage": True}} if include_usage else {}
                )
                stream = await client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": "user", "content": question}],
                    stream=True,
                    **extra,
                )
                return "".join(
                    [c.choices[0].delta.content or "" async for c in stream if c.choices]
                )

        result = await ModelSelector(
            Agent,
            {"solver": ["gpt-4o-mini", "gpt-4o"]},
            [(f"q{i}", "right") for i in range(3)],
            lambda expected, actual: float(expected == actual),
            algorithm="brute_force",
            cache=False,
            journal=False,
            model_handles=False,
        ).select_best()
    estimated = [w for w in result.warnings if "estimated" in w]
    if include_usage:
        assert not estimated and not result.warnings
        return
    assert len(estimated) == 1, result.warnings
    assert estimated[0].startswith("6 of 6 intercepted model calls")
    assert 'stream_options={"include_usage": True}' in estimated[0]
    assert "cost is an estimate" in estimated[0]
    assert any(line == f"warning: {estimated[0]}" for line in result.summary().splitlines())


# --------------------------------------------------------------------------- 4. the proposer


def gpt_4o_dollars(billed: Sequence[Any]) -> float:
    price = price_for("openai", "gpt-4o")
    assert price is not None
    return sum(b.input * price.input + b.output * price.output for b in billed) / 1e6


@pytest.mark.parametrize("agent_calls", [False, True])
async def test_the_proposers_calls_are_in_the_cost_and_not_a_silent_run(
    agent_calls: bool, monkeypatch: pytest.MonkeyPatch, strict_loop: Any
) -> None:
    async with LlmServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        client = server.openai(api_key="sk-test")

        class Agent:
            def __init__(self, models: dict[str, str]) -> None:
                self.model = models["solver"]

            async def run(self, question: str) -> str:
                if not agent_calls:  # pure Python: no model call at all
                    return "right" if self.model == "model-a" else "wrong"
                reply = await client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": question}]
                )
                return reply.choices[0].message.content or ""

        result = await ModelSelector(
            Agent,
            {"solver": ["model-a", "model-b", "model-c"]},
            [(f"q{i}", "right") for i in range(4)],
            lambda expected, actual: float(expected == actual.strip()),
            algorithm="lm_proposal",
            algorithm_params={
                "proposer": "openai:gpt-4o",
                "budget_fraction": 0.5,
                "per_round": 1,
                "attempts": 1,
            },
            cache=False,
            journal=False,
            model_handles=False,
            model_prices={
                m: {"input_price": 1.0, "output_price": 2.0}
                for m in ("model-a", "model-b", "model-c")
            },
            seed=0,
        ).select_best()
    proposer = [b for b in server.reported if b.model == "gpt-4o"]
    assert len(proposer) == 2
    proposing = gpt_4o_dollars(proposer)
    agents = sum(c.cost_usd for c in result.combinations)
    assert proposing > 0 and result.cost_usd == pytest.approx(agents + proposing)
    assert not any("No model call was metered" in w for w in result.warnings)
    unseen = [w for w in result.warnings if "No model call of the agent was metered" in w]
    if agent_calls:
        assert agents > 0 and not unseen
    else:
        assert agents == 0 and len(unseen) == 1
        assert "2 calls of the algorithm's proposer" in unseen[0]
        assert "were not seen" in unseen[0]
    assert result.proposal_cost_usd == pytest.approx(proposing)
    assert "proposing" in result.totals()
    assert json.loads(result.to_json())["proposal_cost_usd"] == result.proposal_cost_usd


async def test_a_result_stored_before_the_new_fields_still_loads() -> None:
    """A result JSON without ``unpriced_models`` and ``proposal_cost_usd`` (an older run) loads."""
    space = SearchSpace({"solver": ["a"]})
    cells = Cells([1.0], [0.0], [0.1], ["openai:a"])
    result, _ = await brute(space, cells)
    data = json.loads(result.to_json())
    for item in (data["best"], *data["combinations"]):
        item.pop("unpriced_models")
    data.pop("proposal_cost_usd")
    again = SelectionResult.model_validate(data)
    assert again.best.cost_known and again.proposal_cost_usd == 0.0
    assert np.isclose(again.cost_usd, result.cost_usd)
