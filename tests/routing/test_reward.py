"""Reward policy: index attribution, real dollars, latency normalisation, penalties."""

import pytest

from phi_core.errors import UserError
from phi_core.routing import ArmOutcome, LatencyTracker, RewardPolicy


def test_rewards_are_keyed_by_arm_not_by_list_position():
    policy = RewardPolicy(quality_weight=1.0, latency_weight=0.0)
    outcomes = [ArmOutcome("m3", 0.1), ArmOutcome("m0", 0.9), ArmOutcome("m1", 0.4)]
    rewards = policy.rewards(outcomes)
    assert rewards["m0"].reward == pytest.approx(0.9)
    assert rewards["m3"].reward == pytest.approx(0.1)
    assert list(policy.rewards(list(reversed(outcomes)))["m0"].__dict__.values()) == list(
        rewards["m0"].__dict__.values()
    )


def test_cost_term_uses_real_dollars_so_the_price_does_not_cancel():
    policy = RewardPolicy(
        quality_weight=1.0, latency_weight=0.0, cost_weight=1.0, cost_scale_usd=0.01
    )
    cheap = policy.reward(ArmOutcome("cheap", 0.8, cost_usd=0.001))
    dear = policy.reward(ArmOutcome("dear", 0.8, cost_usd=0.009))
    assert cheap.reward - dear.reward == pytest.approx(0.8)


def test_latency_is_normalised_by_pooled_p95_and_query_length():
    tracker = LatencyTracker()
    for v in [1.0] * 95 + [2.0] * 5:
        tracker.record("fast", v)
    for v in [4.0] * 100:
        tracker.record("slow", v)
    policy = RewardPolicy(quality_weight=0.0, latency_weight=1.0, length_threshold=100)
    p95 = tracker.p95()
    assert p95 == pytest.approx(4.0)
    short_fast = policy.reward(
        ArmOutcome("fast", 0.5, latency_s=1.0), query_chars=0, tracker=tracker
    )
    short_slow = policy.reward(
        ArmOutcome("slow", 0.5, latency_s=4.0), query_chars=0, tracker=tracker
    )
    long_slow = policy.reward(
        ArmOutcome("slow", 0.5, latency_s=4.0), query_chars=500, tracker=tracker
    )
    assert short_fast.latency_term == pytest.approx(0.75)
    assert short_slow.latency_term == pytest.approx(0.0)
    assert long_slow.latency_term == pytest.approx(0.5)
    cached = policy.reward(ArmOutcome("slow", 0.5, latency_s=None), tracker=tracker)
    assert cached.latency_term == pytest.approx(0.0)  # the model's own P95 stands in


def test_failed_arms_pay_the_fallback_penalty():
    policy = RewardPolicy()
    ok = policy.reward(ArmOutcome("a", 1.0))
    failed = policy.reward(ArmOutcome("a", 1.0, failed=True))
    assert ok.reward - failed.reward == pytest.approx(0.05)


def test_invalid_weights_fail_at_construction_not_after_the_run():
    with pytest.raises(UserError, match="cost_weight"):
        RewardPolicy(cost_weight=-1)
    with pytest.raises(UserError, match="Two outcomes"):
        RewardPolicy().rewards([ArmOutcome("a", 1.0), ArmOutcome("a", 0.0)])
