"""Reward policy: index attribution, real dollars, bounded terms, latency normalisation, penalties."""

import math

import pytest

from phi_core.errors import UserError
from phi_core.outcome import Outcome
from phi_core.routing import LatencyTracker, MemoryLatencyHistory, RewardPolicy


def ran(arm: str, *, latency_s: float = 0.0, cost_usd: float = 0.0, failed: bool = False):
    return Outcome(
        config_id=arm, latency_s=latency_s, cost_usd=cost_usd, status="error" if failed else "ok"
    )


def test_rewards_are_keyed_by_arm_not_by_list_position():
    policy = RewardPolicy(quality_weight=1.0, latency_weight=0.0)
    graded = [(ran("m3"), 0.1), (ran("m0"), 0.9), (ran("m1"), 0.4)]
    rewards = policy.rewards(graded)
    assert rewards["m0"].reward == pytest.approx(0.9)
    assert rewards["m3"].reward == pytest.approx(0.1)
    assert policy.rewards(list(reversed(graded)))["m0"] == rewards["m0"]


def test_cost_term_is_monotone_in_real_dollars_so_the_price_does_not_cancel():
    policy = RewardPolicy(
        quality_weight=1.0, latency_weight=0.0, cost_weight=1.0, cost_scale_usd=0.01
    )
    free = policy.reward(ran("free"), 0.8)
    cheap = policy.reward(ran("cheap", cost_usd=0.001), 0.8)
    at_scale = policy.reward(ran("scale", cost_usd=0.01), 0.8)
    dear = policy.reward(ran("dear", cost_usd=0.09), 0.8)
    assert free.cost_term == 1.0
    assert at_scale.cost_term == pytest.approx(0.5)
    assert cheap.cost_term == pytest.approx(0.01 / 0.011)
    assert free.reward > cheap.reward > at_scale.reward > dear.reward


@pytest.mark.parametrize("cost", [0.0, 1e-6, 0.5, 6.7, 1e9])
@pytest.mark.parametrize("failed", [False, True])
def test_the_reward_stays_within_the_documented_bounds_whatever_a_call_costs(cost, failed):
    # The defect this replaces: cost weight 0.5 once gave -1.6.
    policy = RewardPolicy(quality_weight=0.8, latency_weight=0.2, cost_weight=0.5)
    low, high = policy.bounds
    tracker = LatencyTracker()
    tracker.record("a", 1.0)
    for quality in (0.0, 1.0):
        for latency in (0.0, 0.5, 1e6):
            value = policy.reward(
                ran("a", cost_usd=cost, latency_s=latency, failed=failed), quality, tracker=tracker
            ).reward
            assert low - 1e-12 <= value <= high + 1e-12
            assert math.isfinite(value)
    assert (low, high) == (pytest.approx(-0.05), pytest.approx(1.5))


def test_latency_is_normalised_by_pooled_p95_and_query_length():
    tracker = LatencyTracker()
    for v in [1.0] * 95 + [2.0] * 5:
        tracker.record("fast", v)
    for v in [4.0] * 100:
        tracker.record("slow", v)
    policy = RewardPolicy(quality_weight=0.0, latency_weight=1.0, length_threshold=100)
    assert tracker.p95() == pytest.approx(4.0)
    short_fast = policy.reward(ran("fast", latency_s=1.0), 0.5, query_chars=0, tracker=tracker)
    short_slow = policy.reward(ran("slow", latency_s=4.0), 0.5, query_chars=0, tracker=tracker)
    long_slow = policy.reward(ran("slow", latency_s=4.0), 0.5, query_chars=500, tracker=tracker)
    assert short_fast.latency_term == pytest.approx(0.75)
    assert short_slow.latency_term == pytest.approx(0.0)
    assert long_slow.latency_term == pytest.approx(0.5)
    cached = policy.reward(ran("slow", latency_s=0.0), 0.5, tracker=tracker)
    assert cached.latency_term == pytest.approx(0.0)  # the model's own P95 stands in


def test_latency_history_persists_between_trackers():
    history = MemoryLatencyHistory()
    first = LatencyTracker(window=3, history=history, namespace="ns")
    for v in (1.0, 2.0, 3.0, 4.0):
        first.record("m", v)
    second = LatencyTracker(window=3, history=history, namespace="ns")
    assert second.p95("m") is None
    second.load()
    assert second.snapshot() == {"m": [2.0, 3.0, 4.0]}
    other = LatencyTracker(window=3, history=history, namespace="elsewhere")
    other.load()
    assert other.snapshot() == {}


def test_failed_arms_pay_the_fallback_penalty():
    # A failure earns the penalty alone: it once kept the latency term (0.2 x 0.5 unknown), so it
    # sat only 0.05 below a success and a failure of unknown latency earned +0.05.
    policy = RewardPolicy()
    ok = policy.reward(ran("a"), 1.0)
    failed = policy.reward(ran("a", failed=True), 1.0)
    assert failed.reward == pytest.approx(-0.05) and failed.penalty == pytest.approx(0.05)
    assert ok.reward - failed.reward == pytest.approx(0.8 + 0.2 * 0.5 + 0.05)


def test_invalid_weights_and_qualities_fail_clearly():
    with pytest.raises(UserError, match="cost_weight"):
        RewardPolicy(cost_weight=-1)
    with pytest.raises(UserError, match="Two outcomes"):
        RewardPolicy().rewards([(ran("a"), 1.0), (ran("a"), 0.0)])
    with pytest.raises(UserError, match=r"quality of arm 'a' must be in \[0, 1\]"):
        RewardPolicy().reward(ran("a"), 1.5)
