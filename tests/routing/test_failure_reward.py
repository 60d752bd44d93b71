"""A failed arm is never paid for failing: no latency or cost bonus on a failure.

The defect this covers: a failure's reward was ``w_l·L − fallback_penalty``, so a fast failure
earned up to +0.15 with the defaults and one of unknown latency +0.05 (the neutral 0.5 latency
term), and a bandit race whose every call failed taught the router positive rewards.
"""

from __future__ import annotations

import pytest

from phi_core.errors import ServerError
from phi_core.events import RouteUpdate
from phi_core.loop import AgentLoopConfig
from phi_core.outcome import Outcome
from phi_core.providers import RetryPolicy
from phi_core.providers.base import ModelConfig
from phi_core.race import Arm, BanditRace, RaceSettings, verifier_from_spec
from phi_core.routing import HashedFeatures, LatencyTracker, LinUCBRouter, RewardPolicy
from phi_core.testing import Fail, Reply, ScriptedProvider

DIM = 16
NO_RETRY = RetryPolicy.none()
FAILED = ("error", "unverified", "rejected", "timeout")


def ran(status: str = "ok", *, latency_s: float = 0.0, cost_usd: float = 0.0) -> Outcome:
    return Outcome(config_id="a", status=status, latency_s=latency_s, cost_usd=cost_usd)


def tracker_with(*latencies: float) -> LatencyTracker:
    tracker = LatencyTracker()
    for value in latencies:
        tracker.record("a", value)
    return tracker


POLICIES = [
    RewardPolicy(),
    RewardPolicy(quality_weight=0.5, latency_weight=0.5, cost_weight=1.0),
    RewardPolicy(latency_weight=1.0, fallback_penalty=0.0),
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("status", FAILED)
@pytest.mark.parametrize(
    ("latency_s", "tracker"),
    [
        (0.0, None),  # latency unknown, no history: the latency term would be the neutral 0.5
        (0.001, tracker_with(10.0, 10.0)),  # a very fast failure: latency term 1.0
        (0.0, tracker_with(0.001, 10.0)),  # a cache-hit style 0: the model's own P95 stands in
        (50.0, tracker_with(1.0)),  # a slow failure
    ],
)
@pytest.mark.parametrize("cost_usd", [0.0, 0.5])
@pytest.mark.parametrize("quality", [0.0, 1.0])
def test_a_failure_earns_exactly_the_failure_reward_whatever_its_latency_or_cost(
    policy, status, latency_s, tracker, cost_usd, quality
):
    got = policy.reward(
        ran(status, latency_s=latency_s, cost_usd=cost_usd), quality, tracker=tracker
    )
    assert got.reward == pytest.approx(-policy.fallback_penalty)
    assert got.reward == policy.bounds[0]  # the documented lower bound is what a failure earns
    assert got.reward <= 0
    assert got.penalty == policy.fallback_penalty
    # the parts say what counted
    assert (got.quality, got.latency_term, got.cost_term) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("policy", POLICIES[:2])  # a positive fallback penalty
@pytest.mark.parametrize("quality", [0.0, 0.3, 1.0])
def test_an_unverified_answer_earns_less_than_any_verified_answer_of_equal_quality(policy, quality):
    fast = tracker_with(10.0, 10.0)
    unverified = policy.reward(ran("unverified", latency_s=0.001), quality, tracker=fast)
    for latency_s, tracker in [(0.001, fast), (1e6, fast), (0.0, None)]:
        for cost_usd in (0.0, 1e9):
            verified = policy.reward(
                ran("ok", latency_s=latency_s, cost_usd=cost_usd), quality, tracker=tracker
            )
            assert unverified.reward < verified.reward


def test_answers_that_succeeded_keep_their_latency_and_cost_bonuses():
    policy = RewardPolicy(quality_weight=0.8, latency_weight=0.2, cost_weight=0.0)
    tracker = tracker_with(1.0, 1.0, 1.0)
    fast = policy.reward(ran(latency_s=0.25), 0.5, tracker=tracker)
    assert fast.latency_term == pytest.approx(0.75)
    assert fast.penalty == 0.0
    assert fast.reward == pytest.approx(0.8 * 0.5 + 0.2 * 0.75)


def model(name: str) -> ModelConfig:
    return ModelConfig(provider="test", id=name, api="scripted")


def failing_arm(name: str) -> Arm:
    provider = ScriptedProvider(default=Fail(ServerError(f"{name} is down")), name=name)
    return Arm(name, AgentLoopConfig(model=model(name), provider=provider, retry=NO_RETRY))


def race(arms: list[Arm], **kwargs) -> BanditRace:
    judge = AgentLoopConfig(
        model=model("judge"),
        provider=ScriptedProvider(default=Fail(ServerError("judge is down")), name="judge"),
        retry=NO_RETRY,
    )
    return BanditRace(
        arms, LinUCBRouter(DIM, alpha=0.5), judge=judge, features=HashedFeatures(DIM), **kwargs
    )


async def test_a_bandit_race_whose_every_arm_fails_learns_no_positive_reward():
    r = race([failing_arm(n) for n in "abc"], settings=RaceSettings(top_k=2))
    events: list = []
    result = await r.run("What is 17 * 3?", events=events.append)
    assert result.status == "all_failed"
    assert set(result.rewards) == {"a", "b", "c"}
    for reward in result.rewards.values():
        assert reward.reward == pytest.approx(-0.05)
    (update,) = [e for e in events if isinstance(e, RouteUpdate)]
    assert update.rewards and all(row["reward"] <= 0 for row in update.rewards)
    x = r.features("What is 17 * 3?")
    for name in "abc":
        assert r.router.estimate(x, name)[0] <= 0


async def test_a_bandit_race_whose_answers_all_fail_the_check_learns_no_positive_reward():
    # The first answer (slow) sets the latency reference; the second fails the check fast.
    replies = {"slow": Reply("no code", delay=0.2), "fast": Reply("no code either")}
    arms = [
        Arm(
            n,
            AgentLoopConfig(
                model=model(n), provider=ScriptedProvider(default=replies[n]), retry=NO_RETRY
            ),
        )
        for n in replies
    ]
    settings = RaceSettings(top_k=2, policy="baseline")
    r = race(arms, settings=settings, verify=verifier_from_spec("regex:def f"))
    result = await r.run("Write f.")
    assert result.verified is False
    assert result.attempts == [("slow", "unverified"), ("fast", "unverified")]
    assert set(result.rewards) == {"slow", "fast"}
    assert all(rw.reward == pytest.approx(-0.05) for rw in result.rewards.values())
