"""plan_race: the one place a race is planned (branches, judge rule, strategy, limits), checked
before any call, for the CLI, race files and the gateway alike."""

from __future__ import annotations

import json

import pytest

from phi_core.config import (
    DEFAULT_BRANCHES,
    EMBEDDED_DEFAULT_STRATEGY,
    BranchSpec,
    RaceSpec,
    bandit_race_from_plan,
    parse_race_spec,
    plan_race,
)
from phi_core.errors import MissingApiKeyError, UserError
from phi_core.metering import Budget
from phi_core.parallel import ParallelLoopResult
from phi_core.race import BanditOptions, BanditRaceResult
from phi_core.routing import MemoryStateStore
from phi_core.testing import Reply, ScriptedProvider


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_the_default_race_is_three_local_configurations_decided_by_the_measured_default() -> None:
    plan = plan_race()
    assert [b.name for b in plan.branches] == ["precise", "teacher", "storyteller"]
    assert {c.max_tokens for c in plan.configs} == {256}
    assert plan.strategy == EMBEDDED_DEFAULT_STRATEGY == "consensus" and plan.judge is None


def test_naming_a_judge_or_racing_a_vendor_model_makes_judge_the_default() -> None:
    assert plan_race(judge="local:smollm2").strategy == "judge"
    assert plan_race(models=["local:smollm2", "scripted:b"]).strategy == "judge"
    spec = parse_race_spec('[judge]\nmodel = "local:smollm2"\n')
    assert plan_race(spec).strategy == "judge"


def test_two_local_branches_keep_the_judge_default_as_no_majority_is_possible() -> None:
    assert plan_race(models=["local:smollm2", "local:smollm2@temperature=0.9"]).strategy == "judge"
    three = ["local:smollm2", "local:smollm2@temperature=0.5", "local:smollm2@temperature=0.9"]
    assert plan_race(models=three).strategy == "consensus"


def test_the_judge_strategy_on_local_branches_has_a_constrained_local_judge() -> None:
    plan = plan_race(strategy="judge")
    assert plan.strategy == "judge" and plan.judge is not None
    assert plan.judge.model == "local:smollm2"
    assert plan.judge_config is not None and plan.judge_config.max_tokens == 1024
    fmt = plan.judge_config.response_format
    assert fmt is not None and fmt.schema_ == {"enum": [1, 2, 3]}


def test_a_vendor_race_is_judged_by_its_first_model_at_temperature_zero() -> None:
    plan = plan_race(models=["scripted:a@temperature=0.9", "scripted:b"], strategy="rubric")
    assert plan.judge == BranchSpec(name="judge", model="scripted:a", temperature=0.0)
    assert plan.judge_config is not None and plan.judge_config.response_format is None


def test_settings_override_the_race_file_and_branches_keep_their_own() -> None:
    spec = parse_race_spec(
        'strategy = "vote"\nmax_tokens = 50\ntimeout = 9\nsystem_prompt = "File."\n'
        '[[branches]]\nname = "a"\nmodel = "scripted:a"\nmax_tokens = 5\n'
        '[[branches]]\nname = "b"\nmodel = "scripted:b"\n'
    )
    plan = plan_race(spec, max_tokens=70, timeout=2, strategy="pick-first")
    assert plan.strategy == "pick-first" and plan.timeout == 2
    assert [c.max_tokens for c in plan.configs] == [5, 70]
    assert [c.system_prompt for c in plan.configs] == ["File.", "File."]
    assert [c.config_id for c in plan.configs] == ["a", "b"]


async def test_a_system_prompt_on_the_default_race_reaches_every_branch_before_its_persona() -> (
    None
):
    seen = ScriptedProvider(default=lambda request: Reply("1"))
    plan = plan_race(system_prompt="Answer in French.", providers={"local:smollm2": seen})
    assert plan.warnings == []
    result = await plan.run("Why is the sky blue?")
    assert isinstance(result, ParallelLoopResult) and result.status == "ok"
    prompts = {r.system_prompt for r in seen.requests if r.system_prompt}
    for default in DEFAULT_BRANCHES:
        assert f"Answer in French.\n\n{default.system_prompt}" in prompts


def test_settings_that_would_do_nothing_come_back_as_warnings() -> None:
    plan = plan_race(
        models=["scripted:a@system=x,max_tokens=3", "scripted:b@system=y,max_tokens=4"],
        system_prompt="ignored",
        max_tokens=99,
        strategy="vote",
        bandit=BanditOptions(),
    )
    assert {w.setting for w in plan.warnings} == {"system_prompt", "max_tokens", "bandit"}
    assert plan.bandit is None
    judged_by_file = plan_race(parse_race_spec('strategy = "vote"\njudge = "scripted:j"'))
    assert [w.setting for w in judged_by_file.warnings] == ["judge"]


def test_an_explicit_judge_with_a_strategy_that_uses_none_is_refused() -> None:
    with pytest.raises(UserError, match="judge has no effect with strategy 'vote'"):
        plan_race(models=["scripted:a"], strategy="vote", judge="scripted:j")


def test_a_judge_without_its_key_is_refused_before_anything_runs() -> None:
    with pytest.raises(MissingApiKeyError, match="OPENAI_API_KEY"):
        plan_race(models=["scripted:a"], judge="openai:gpt-4o")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"strategy": "nope"}, "Unknown strategy 'nope'"),
        ({"timeout": 0}, "timeout must be > 0"),
        ({"max_concurrency": 0}, "max_concurrency must be >= 1"),
        ({"models": ["scripted:a", "scripted:a"], "strategy": "bandit"}, "these repeat"),
    ],
)
def test_bad_settings_are_usage_errors(settings: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        plan_race(**settings)  # type: ignore[arg-type]


async def test_a_planned_race_runs_and_its_payload_names_the_winner() -> None:
    providers = {
        "scripted:a": ScriptedProvider(default="Paris."),
        "scripted:b": ScriptedProvider(default="It is Paris."),
    }
    plan = plan_race(models=["scripted:a", "scripted:b"], strategy="vote", providers=providers)
    result = await plan.run("Capital of France?")
    payload = json.loads(json.dumps(plan.payload(result)))
    assert payload["type"] == "race_result" and payload["status"] == "ok"
    assert payload["winner"]["name"] in ("scripted:a", "scripted:b")
    assert [b["name"] for b in payload["branches"]] == ["scripted:a", "scripted:b"]


def _judge_reply(request: object) -> Reply:
    scores = [
        {"answer": n, "reason": "r", "relevance": s, "coverage": s, "faithfulness": s}
        for n, s in ((1, 0.9), (2, 0.2))
    ]
    return Reply(json.dumps({"scores": scores}))


async def test_a_bandit_plan_goes_through_the_one_seam_and_learns() -> None:
    providers = {
        "scripted:a": ScriptedProvider(default="Answer A."),
        "scripted:b": ScriptedProvider(default="Answer B."),
        "scripted:j": ScriptedProvider(default=_judge_reply),
    }
    plan = plan_race(
        models=["scripted:a", "scripted:b"],
        judge="scripted:j",
        strategy="bandit",
        timeout=7,
        max_concurrency=1,
        budget=Budget(max_cost_usd=5.0),
        bandit=BanditOptions(top_k=2),
        providers=providers,
    )
    race = bandit_race_from_plan(plan, store=MemoryStateStore())
    assert (race.settings.preview_timeout_s, race.settings.answer_timeout_s) == (7, 7)
    assert race.settings.max_concurrency == 1
    assert race.budget is not None and race.budget.max_cost_usd == 5.0
    assert sorted(race.arms) == ["scripted:a", "scripted:b"]
    store = MemoryStateStore()
    result = await plan.run("Q?", store=store)
    assert isinstance(result, BanditRaceResult) and result.status == "ok"
    assert plan.payload(result)["type"] == "race_result"
    assert set(result.rewards) == {"scripted:a", "scripted:b"}
    assert store.namespaces()  # the router's statistics were persisted


def test_race_spec_defaults_mean_the_default_race() -> None:
    assert plan_race(RaceSpec()).labels == plan_race().labels


async def test_a_plans_budget_bounds_the_whole_parallel_race() -> None:
    providers = {
        "scripted:a": ScriptedProvider(default="Paris."),
        "scripted:b": ScriptedProvider(default="Paris."),
    }
    plan = plan_race(
        models=["scripted:a", "scripted:b"],
        strategy="pick-first",
        max_concurrency=1,
        budget=Budget(max_calls=1),
        providers=providers,
    )
    result = await plan.run("Capital of France?")
    assert isinstance(result, ParallelLoopResult)
    assert [o.status for o in result.outcomes] == ["ok", "over_budget"]
    assert plan_race(models=["scripted:a"], budget=Budget()).budget is None  # no limit given
