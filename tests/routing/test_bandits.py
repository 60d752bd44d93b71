"""The routers' maths: Sherman–Morrison, UCB ordering, Thompson posterior, arm pool, warm start."""

import numpy as np
import pytest

from phi_core.errors import UserError
from phi_core.routing import (
    ArmStats,
    EpsilonGreedyRouter,
    HashedFeatures,
    LinearThompsonRouter,
    LinUCBRouter,
    LoggedOutcome,
)


def test_sherman_morrison_inverse_matches_direct_inverse_between_refreshes():
    rng = np.random.default_rng(0)
    router = LinUCBRouter(6, ridge=0.5, refresh_every=10_000)
    for _ in range(300):
        router.update(rng.normal(size=6), "a", float(rng.random()))
    direct = np.linalg.inv(router.a_matrix("a"))
    assert np.allclose(router.a_inverse("a"), direct, atol=1e-9)
    theta = direct @ router.stats("a").xr
    x = rng.normal(size=6)
    mean, width = router.estimate(x, "a")
    assert mean == pytest.approx(float(theta @ x))
    assert width == pytest.approx(float(np.sqrt(x @ direct @ x)))


def test_ucb_ranks_the_better_arm_first_once_both_are_well_observed():
    router = LinUCBRouter(2, alpha=1.0)
    x = np.array([1.0, 0.0])
    for _ in range(50):
        router.update(x, "good", 0.9)
        router.update(x, "bad", 0.2)
    ranking = router.rank(x, ["bad", "good"])
    assert ranking.order == ["good", "bad"]
    assert ranking.clearly_ahead()


def test_ucb_prefers_the_uncertain_arm_when_means_are_equal():
    router = LinUCBRouter(2, alpha=2.0)
    x = np.array([1.0, 0.0])
    for _ in range(40):
        router.update(x, "known", 0.5)
    router.update(x, "new", 0.5)
    ranking = router.rank(x, ["known", "new"])
    assert ranking.order[0] == "new"
    assert ranking.arms[0].width > ranking.arms[1].width
    assert not ranking.clearly_ahead()


def test_cold_start_keeps_the_callers_order():
    router = LinUCBRouter(3)
    assert router.rank(np.ones(3), ["m0", "m1", "m2", "m3"]).order == ["m0", "m1", "m2", "m3"]


def test_thompson_posterior_is_the_ridge_solution_and_samples_spread_with_its_variance():
    rng = np.random.default_rng(1)
    router = LinearThompsonRouter(3, v=0.5, ridge=1.0, seed=3)
    xs = rng.normal(size=(200, 3))
    true = np.array([0.3, -0.2, 0.5])
    for x in xs:
        router.update(x, "a", float(true @ x + rng.normal(scale=0.1)))
    mean, cov = router.posterior("a")
    a = np.eye(3) + xs.T @ xs
    assert np.allclose(cov, 0.25 * np.linalg.inv(a))
    assert np.allclose(mean, true, atol=0.05)
    x = np.array([1.0, 0.0, 0.0])
    samples = [router.rank(x, ["a"]).top.score for _ in range(4000)]
    expected_sd = float(np.sqrt(x @ cov @ x))
    assert np.mean(samples) == pytest.approx(
        float(mean @ x), abs=4 * expected_sd / np.sqrt(4000) + 1e-9
    )
    assert np.std(samples) == pytest.approx(expected_sd, rel=0.1)


def test_epsilon_greedy_with_zero_epsilon_is_greedy():
    router = EpsilonGreedyRouter(1, epsilon=0.0)
    router.update(np.ones(1), "a", 0.1)
    router.update(np.ones(1), "b", 0.9)
    assert router.rank(np.ones(1), ["a", "b"]).order == ["b", "a"]


def test_arms_can_be_added_and_retired_without_touching_the_others_statistics():
    router = LinUCBRouter(2)
    x = np.array([1.0, 0.5])
    router.update(x, "a", 1.0)
    before = router.stats("a").xr.copy()
    router.add_arm("b")
    router.retire_arm("a")
    assert router.arms == ["b"]
    assert router.rank(x).order == ["b"]
    router.add_arm("a")
    assert np.array_equal(router.stats("a").xr, before)
    assert set(router.rank(x).order) == {"a", "b"}


def test_warm_start_equals_sequential_updates():
    rng = np.random.default_rng(2)
    logged = [
        LoggedOutcome(rng.normal(size=4), "a" if i % 2 else "b", float(i % 3)) for i in range(60)
    ]
    batch = LinUCBRouter(4)
    batch.warm_start(logged)
    online = LinUCBRouter(4)
    for o in logged:
        online.update(o.features, o.arm, o.reward)
    for arm in ("a", "b"):
        assert np.allclose(batch.a_inverse(arm), online.a_inverse(arm))
        assert np.allclose(batch.stats(arm).xr, online.stats(arm).xr)


def test_discount_forgets_old_rewards_but_keeps_the_ridge_prior():
    router = LinUCBRouter(1, ridge=1.0, discount=0.5)
    x = np.ones(1)
    for _ in range(20):
        router.update(x, "a", 0.0)
    for _ in range(5):
        router.update(x, "a", 1.0)
    assert router.estimate(x, "a")[0] > 0.9 * (router.stats("a").n / (1 + router.stats("a").n))
    assert router.a_matrix("a")[0, 0] >= 1.0


def test_stats_are_additive_so_merged_workers_equal_one_worker():
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(30, 3))
    one = LinUCBRouter(3)
    w1, w2 = LinUCBRouter(3), LinUCBRouter(3)
    for i, x in enumerate(xs):
        one.update(x, "a", float(i))
        (w1 if i % 2 else w2).update(x, "a", float(i))
    merged = LinUCBRouter(3)
    merged.merge("a", w1.stats("a") + w2.stats("a"))
    assert np.allclose(merged.a_inverse("a"), one.a_inverse("a"))
    assert merged.stats("a").n == 30


def test_bad_inputs_are_rejected_with_clear_messages():
    with pytest.raises(UserError, match="ridge must be > 0"):
        LinUCBRouter(3, ridge=0)
    router = LinUCBRouter(3)
    with pytest.raises(UserError, match="dimension 2, the router expects 3"):
        router.update(np.ones(2), "a", 1.0)
    with pytest.raises(UserError, match="finite"):
        router.update(np.ones(3), "a", float("nan"))
    # stored statistics of another dimension name the arm and what to do, and change nothing
    router.update(np.ones(3), "kept", 1.0)
    with pytest.raises(UserError) as caught:
        router.load_state({"old": ArmStats.of(np.ones(2), 0.5)})
    assert "arm 'old' are 2-dimensional" in str(caught.value)
    assert "another feature extractor" in str(caught.value) and "phi route reset" in str(
        caught.value
    )
    with pytest.raises(UserError, match="arm 'b' are 4-dimensional"):
        router.merge("b", ArmStats.of(np.ones(4), 0.5))
    assert router.stats("kept").n == 1 and "old" not in router.arms
    with pytest.raises(UserError, match="at least one arm"):
        router.rank(np.ones(3), [])


def test_hashed_features_are_deterministic_fixed_length_and_see_intent():
    f = HashedFeatures(64)
    a = f("Which is right?\nA) one\nB) two\nC) three\nD) four")
    assert a.shape == (64,)
    assert np.array_equal(
        a, HashedFeatures(64)("Which is right?\nA) one\nB) two\nC) three\nD) four")
    )
    assert a[-1] == 1.0  # bias
    assert a[-5] == 1.0  # many choices
    code = f("Write a python function to reverse a list.")
    assert code[-4] == 1.0 and code[-5] == 0.0
    assert float(a @ code) < float(a @ a)


def test_arm_stats_round_trip_through_json():
    s = ArmStats.of(np.array([1.0, 2.0]), 0.5)
    back = ArmStats.from_json(s.to_json())
    assert np.array_equal(back.xx, s.xx) and back.reward_sum == 0.5


def test_embedding_features_project_any_encoder_to_the_router_dimension_deterministically():
    from phi_core.routing import EmbeddingFeatures

    def encoder(text: str) -> np.ndarray:
        return np.array([len(text), text.count("a"), 1.0] * 128, dtype=float)

    f = EmbeddingFeatures(16, encoder=encoder)
    v = f("banana")
    assert v.shape == (16,) and v[-1] == 1.0
    assert np.isclose(np.linalg.norm(v[:-1]), 1.0)
    assert np.array_equal(v, EmbeddingFeatures(16, encoder=encoder)("banana"))
    assert f.schema.startswith("minilm") and "dim=16" in f.schema


@pytest.mark.parametrize("router_type", [LinUCBRouter, LinearThompsonRouter, EpsilonGreedyRouter])
@pytest.mark.parametrize(
    ("reward", "weight", "message"),
    [
        (0.5, float("nan"), "weight must be > 0"),
        (0.5, float("inf"), "weight must be > 0"),
        (1e200, 1.0, "reward must be a finite number within"),
        (None, 1.0, "reward must be a number, got None"),
        ("0.5", 1.0, "reward must be a number"),
    ],
)
def test_an_update_that_would_poison_an_arm_is_refused(
    router_type: type, reward: object, weight: float, message: str
) -> None:
    router = router_type(3)
    router.update(np.ones(3), "a", 0.5)
    with pytest.raises(UserError, match=message):
        router.update(np.ones(3), "a", reward, weight)
    stats = router.stats("a")
    assert stats.n == 1.0 and np.isfinite(stats.reward_sq)  # the arm is as it was
