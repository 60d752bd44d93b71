"""A race and a bandit race answer in one shape: the same ``race_result`` keys with the same
types (the bandit adds its own), and the same loop-id segment for the same configuration."""

from __future__ import annotations

import json
from typing import Any

from phi_core.config import bandit_payload, plan_race
from phi_core.errors import ServerError
from phi_core.events import ParallelLoopStart
from phi_core.loop import AgentContext, AgentLoopConfig
from phi_core.parallel import PickFirstEvaluation, agent_loop_parallel
from phi_core.providers.base import ModelConfig
from phi_core.race import Arm, BanditOptions, BanditRace, BanditRaceResult
from phi_core.routing import HashedFeatures, LinUCBRouter, MemoryStateStore
from phi_core.testing import Fail, Reply, ScriptedProvider

JUDGE_REPLY = json.dumps(
    {
        "scores": [
            {"answer": 1, "reason": "r", "relevance": 0.9, "coverage": 0.9, "faithfulness": 0.9},
            {"answer": 2, "reason": "r", "relevance": 0.2, "coverage": 0.2, "faithfulness": 0.2},
        ]
    }
)
BANDIT_KEYS = {
    "strategy", "text", "verified", "quality", "error", "action", "previews_skipped",
    "contenders", "order", "ranking", "scores", "attempts", "rewards", "usage",
}  # fmt: skip


def providers() -> dict[str, ScriptedProvider]:
    return {
        "scripted:a": ScriptedProvider(name="a", default="Paris is the capital."),
        "scripted:b": ScriptedProvider(name="b", default="It is Paris, France."),
        "scripted:judge": ScriptedProvider(name="judge", default=JUDGE_REPLY),
    }


def kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def assert_shares_the_shape(race: dict[str, Any], bandit: dict[str, Any], where: str) -> None:
    """Every key of ``race`` is in ``bandit`` with a value of the same JSON type."""
    for key, value in race.items():
        assert key in bandit, f"{where}.{key} is missing from the bandit's result"
        assert kind(bandit[key]) == kind(value), (
            f"{where}.{key}: {kind(bandit[key])} in the bandit's result, {kind(value)} in the race's"
        )


async def run_both() -> tuple[dict[str, Any], dict[str, Any]]:
    models = ["scripted:a", "scripted:b"]
    race_plan = plan_race(
        models=models, judge="scripted:judge", strategy="judge", providers=providers()
    )
    raced = await race_plan.run("Capital of France?")
    bandit_plan = plan_race(
        models=models,
        judge="scripted:judge",
        strategy="bandit",
        bandit=BanditOptions(top_k=2),
        providers=providers(),
    )
    banded = await bandit_plan.run("Capital of France?", store=MemoryStateStore())
    assert isinstance(banded, BanditRaceResult) and banded.status == "ok"
    assert banded.previews is not None  # previews and an answer: both kinds of branch row
    return (
        json.loads(json.dumps(race_plan.payload(raced))),
        json.loads(json.dumps(bandit_plan.payload(banded))),
    )


async def test_a_bandit_race_result_has_every_key_of_a_race_result_with_its_type() -> None:
    race, bandit = await run_both()
    assert race["type"] == bandit["type"] == "race_result"
    assert_shares_the_shape(race, bandit, "result")
    assert_shares_the_shape(race["winner"], bandit["winner"], "winner")
    assert_shares_the_shape(race["decision"], bandit["decision"], "decision")
    assert_shares_the_shape(race["total_usage"], bandit["total_usage"], "total_usage")
    for row in bandit["branches"]:
        assert_shares_the_shape(race["branches"][0], row, "branches[]")
    assert set(bandit) >= BANDIT_KEYS  # the bandit's own keys, on top
    assert {"arm", "call", "error_kind"} <= set(bandit["branches"][0])


async def test_the_bandit_result_names_its_winner_and_arms_like_a_race() -> None:
    _, bandit = await run_both()
    winner = bandit["winner"]
    assert winner["name"] == bandit["order"][0]
    assert winner["index"] == ["scripted:a", "scripted:b"].index(winner["name"])
    assert winner["model"] == winner["name"] and winner["text"] == bandit["text"]
    assert winner["loop_id"] == next(
        b["loop_id"] for b in bandit["branches"] if b["call"] == "answer" and b["status"] == "ok"
    )
    for row in bandit["branches"]:
        assert row["name"] == row["arm"] and row["model"] == row["arm"]
        assert row["index"] == ["scripted:a", "scripted:b"].index(row["arm"])
    assert [row["call"] for row in bandit["branches"]] == ["preview", "preview", "answer"]
    assert bandit["decision"]["strategy"] == "bandit"
    assert bandit["decision"]["index"] == winner["index"]
    assert bandit["judge"] == "scripted:judge"
    assert bandit["total_usage"] == bandit["usage"]
    assert bandit["evaluation_usage"]["total"] > 0  # the judge scored the previews
    assert bandit["decision"]["usage"] == bandit["evaluation_usage"]


async def test_a_bandit_result_built_without_its_plan_has_the_same_shape() -> None:
    # `phi race --strategy bandit --json` prints bandit_payload(result) without the plan
    _, planned = await run_both()
    bandit_plan = plan_race(
        models=["scripted:a", "scripted:b"],
        judge="scripted:judge",
        strategy="bandit",
        bandit=BanditOptions(top_k=2),
        providers=providers(),
    )
    result = await bandit_plan.run("Capital of France?", store=MemoryStateStore())
    assert isinstance(result, BanditRaceResult)
    alone = json.loads(json.dumps(bandit_payload(result)))
    assert list(alone) == list(planned)
    assert alone["winner"]["name"] == result.winner


async def test_race_branch_rows_carry_the_error_kind() -> None:
    given = {
        "scripted:a": ScriptedProvider(name="a", default=Fail(ServerError("boom"))),
        "scripted:b": ScriptedProvider(name="b", default="It is Paris, France."),
    }
    plan = plan_race(models=["scripted:a", "scripted:b"], strategy="pick-first", providers=given)
    payload = plan.payload(await plan.run("Capital of France?"))
    rows = {row["name"]: row for row in payload["branches"]}
    assert rows["scripted:a"]["status"] == "error" and rows["scripted:a"]["error_kind"] == "server"
    assert rows["scripted:b"]["error_kind"] is None


def segments(loop_ids: list[str], session_id: str) -> list[str]:
    return [loop_id[len(session_id) + 1 : loop_id.rindex(".")] for loop_id in loop_ids]


async def test_one_configuration_gets_one_loop_id_segment_in_a_race_and_a_bandit_race() -> None:
    race, bandit = await run_both()
    race_segments = {
        row["name"]: segments([row["loop_id"]], race["session_id"])[0] for row in race["branches"]
    }
    assert race_segments == {"scripted:a": "scripted.a", "scripted:b": "scripted.b"}
    for row in bandit["branches"]:
        assert segments([row["loop_id"]], bandit["session_id"]) == [race_segments[row["name"]]]


def config(config_id: str | None, model_id: str, **changes: Any) -> AgentLoopConfig:
    model = ModelConfig(provider="scripted", id=model_id, api="scripted")
    provider = ScriptedProvider(name=model_id, default=Reply(f"from {model_id}"))
    return AgentLoopConfig(model=model, provider=provider, config_id=config_id, **changes)


async def test_a_config_id_is_the_same_segment_in_a_race_and_a_bandit_race() -> None:
    starts: list[ParallelLoopStart] = []

    def keep(event: Any) -> None:
        if isinstance(event, ParallelLoopStart):
            starts.append(event)

    configs = [config("a:b", "x"), config(None, "y")]
    await agent_loop_parallel("q", AgentContext(), configs, PickFirstEvaluation(), events=keep)
    race_ids = starts[0].config_ids
    assert race_ids == ["a:b", "scripted.y"]

    starts.clear()
    arms = [Arm("first", configs[0]), Arm("second", configs[1])]
    bandit = BanditRace(arms, LinUCBRouter(16), features=HashedFeatures(16))
    assert bandit.config_ids == {"first": "a:b", "second": "scripted.y"}
    result = await bandit.run("q", events=keep)
    assert result.status == "ok"
    assert starts[0].config_ids == [bandit.config_ids[result.winner or ""]]
    assert segments(starts[0].loop_ids, result.session_id) == starts[0].config_ids


async def test_the_router_still_learns_under_the_arm_names_not_the_segments() -> None:
    # the persisted keys (router statistics, latency history, run log) are the arm names: a
    # new loop-id segment orphans no learned state
    store = MemoryStateStore()
    plan = plan_race(
        models=["scripted:a", "scripted:b"],
        judge="scripted:judge",
        strategy="bandit",
        bandit=BanditOptions(top_k=2),
        providers=providers(),
    )
    result = await plan.run("Capital of France?", store=store)
    assert isinstance(result, BanditRaceResult)
    (namespace,) = store.namespaces()
    assert set(store.load(namespace)) == {"scripted:a", "scripted:b"}
    assert set(result.rewards) == {"scripted:a", "scripted:b"}


def test_two_arms_of_one_model_keep_the_race_segment_and_stay_apart() -> None:
    cold, hot = config(None, "m", temperature=0.0), config(None, "m", temperature=1.0)
    bandit = BanditRace(
        [Arm("cold", cold), Arm("hot", hot)], LinUCBRouter(16), features=HashedFeatures(16)
    )
    # the first keeps the race's segment; the second is told apart (the live view maps
    # a loop's segment to its arm)
    assert bandit.config_ids == {"cold": "scripted.m", "hot": "scripted.m-1"}
