"""Router and router-state faults: impossible statistics (non-finite, negative counts, an ``XX``
no updates make) are refused wherever they enter — warm starts, merges, loads, parameters,
stores —; a Redis key of the wrong type reads as a state of the wrong shape; previews and
latency history keep to the state's key prefix and a reset forgets the previews; the feature
cache's memory is bounded; and "race only when unsure" fires on varied queries once the
favourite is known, but never between arms whose rewards are genuinely close."""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import sqlite3
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from phi_core.errors import StateCorruptError, UserError
from phi_core.routing import (
    ArmStats,
    EpsilonGreedyRouter,
    HashedFeatures,
    JsonFileStateStore,
    LinearThompsonRouter,
    LinUCBRouter,
    LoggedOutcome,
    MemoryStateStore,
    RankedArm,
    Ranking,
    RedisPreviewCache,
    RedisStateStore,
    SQLitePreviewCache,
    SQLiteStateStore,
    open_route_state,
)
from phi_core.routing.reward import RewardPolicy

from .test_stores import redis_url  # noqa: F401  (the real redis-server fixture)

DIM = 8
NS = "ns"


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=DIM)


def _router_with_arms() -> LinUCBRouter:
    router = LinUCBRouter(DIM)
    router.update(_x(1), "a", 0.5)
    router.add_arm("b")
    return router


def _snapshot(router: LinUCBRouter) -> dict[str, tuple[float, float]]:
    return {a: (router.stats(a).n, float(router.stats(a).xx.sum())) for a in router.arms}


def _impossible(kind: str, dim: int = DIM) -> ArmStats:
    """Finite statistics no updates could have made (or non-finite ones)."""
    good = ArmStats.of(np.ones(dim), 0.5)
    if kind == "nan":
        return ArmStats(xx=good.xx, xr=np.full(dim, np.nan), n=1.0)
    if kind == "inf":
        return ArmStats(xx=np.full((dim, dim), np.inf), xr=np.zeros(dim), n=1.0)
    if kind == "negative-n":
        return ArmStats(xx=good.xx, xr=good.xr, n=-3.0, reward_sum=0.5, reward_sq=0.25)
    if kind == "negative-definite":
        return ArmStats(xx=-5.0 * np.eye(dim), xr=np.zeros(dim), n=1.0, reward_sq=1.0)
    if kind == "singular":  # XX = -λI: A = λI + XX = 0, which no inverse exists of
        return ArmStats(xx=-np.eye(dim), xr=np.zeros(dim), n=1.0, reward_sq=1.0)
    if kind == "negative-squares":
        return ArmStats(xx=good.xx, xr=good.xr, n=1.0, reward_sum=0.5, reward_sq=-4.0)
    raise AssertionError(kind)


IMPOSSIBLE = ["nan", "inf", "negative-n", "negative-definite", "singular", "negative-squares"]


# ---------------------------------------------------------------- non-finite or impossible input


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        (LoggedOutcome(np.ones(DIM), "a", float("nan")), "reward must be a finite number"),
        (LoggedOutcome(np.ones(DIM), "a", 1e9), "reward must be a finite number"),
        (LoggedOutcome(np.ones(DIM), "a", 0.5, float("inf")), "weight must be > 0"),
        (LoggedOutcome(np.ones(DIM), "a", 0.5, -5.0), "weight must be > 0"),
        (LoggedOutcome(np.ones(DIM), "a", 0.5, 0.0), "weight must be > 0"),
        (LoggedOutcome(np.full(DIM, np.nan), "a", 0.5), "NaN or infinity"),
    ],
)
def test_warm_start_checks_every_outcome_as_update_does_and_learns_none_of_a_bad_batch(
    outcome: LoggedOutcome, message: str
) -> None:
    router = _router_with_arms()
    before = _snapshot(router)
    good = LoggedOutcome(np.ones(DIM), "b", 0.9)
    with pytest.raises(UserError, match=message):
        router.warm_start([good, outcome])
    assert _snapshot(router) == before  # not even the good outcome before it


@pytest.mark.parametrize(
    ("rewards", "weight", "message"),
    [
        ({"a": np.array([np.nan, 0.5])}, 1.0, "rewards of arm 'a' must be finite"),
        ({"a": np.array([np.inf, 0.5])}, 1.0, "rewards of arm 'a' must be finite"),
        ({"b": np.array([0.1, 0.2]), "a": np.array([0.5])}, 1.0, "one per row"),
        ({"a": np.array([0.5, 0.5])}, float("inf"), "weight must be > 0"),
        ({"a": np.array([0.5, 0.5])}, -1.0, "weight must be > 0"),
    ],
)
def test_warm_start_matrix_is_checked_before_any_arm_learns(
    rewards: dict[str, np.ndarray], weight: float, message: str
) -> None:
    router = _router_with_arms()
    before = _snapshot(router)
    with pytest.raises(UserError, match=message):
        router.warm_start_matrix(np.stack([_x(2), _x(3)]), rewards, weight=weight)
    assert _snapshot(router) == before


@pytest.mark.parametrize("kind", IMPOSSIBLE)
def test_merge_load_state_and_add_arm_refuse_impossible_statistics(kind: str) -> None:
    router = _router_with_arms()
    before = _snapshot(router)
    bad = _impossible(kind)
    with pytest.raises(UserError):
        router.merge("a", bad)
    with pytest.raises(UserError):
        router.load_state({"a": router.stats("a"), "b": bad})
    with pytest.raises(UserError):
        router.add_arm("c", bad)
    assert _snapshot(router) == before and router.arms == ["a", "b"]
    ranking = router.rank(_x(4))  # still ranks, with finite numbers
    assert all(math.isfinite(arm.score) for arm in ranking.arms)


def test_a_nan_arm_can_no_longer_rank_first() -> None:
    """The audit's case: a NaN merged into an arm made it rank first."""
    router = LinUCBRouter(DIM)
    router.update(_x(1), "good", 0.9)
    with pytest.raises(UserError):
        router.merge("nan", ArmStats(np.zeros((DIM, DIM)), np.full(DIM, np.nan)))
    assert router.rank(_x(1), ["good"]).order == ["good"]


@pytest.mark.parametrize(
    "make",
    [
        lambda: LinUCBRouter(DIM, alpha=float("nan")),
        lambda: LinUCBRouter(DIM, alpha=float("inf")),
        lambda: LinUCBRouter(DIM, alpha=-1.0),
        lambda: LinUCBRouter(DIM, ridge=float("inf")),
        lambda: LinUCBRouter(DIM, ridge=float("nan")),
        lambda: LinearThompsonRouter(DIM, v=float("nan")),
        lambda: LinearThompsonRouter(DIM, v=float("inf")),
        lambda: EpsilonGreedyRouter(DIM, epsilon=float("nan")),
        lambda: LinUCBRouter(DIM, discount=float("nan")),
        lambda: RewardPolicy(cost_scale_usd=float("inf")),
    ],
)
def test_router_parameters_that_are_not_finite_are_refused(make: Callable[[], object]) -> None:
    with pytest.raises(UserError, match=r"finite|must be"):
        make()


# ---------------------------------------------------------------- impossible stored statistics


def _json_state(path: Path, stats: ArmStats) -> None:
    doc = {"version": 1, "namespaces": {NS: {"a": stats.to_json()}}}
    path.write_text(json.dumps(doc))


def _sqlite_state(path: Path, stats: ArmStats) -> None:
    SQLiteStateStore(path)  # the table
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO router_stats VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                NS,
                "a",
                DIM,
                np.ascontiguousarray(stats.xx, dtype="<f8").tobytes(),
                np.ascontiguousarray(stats.xr, dtype="<f8").tobytes(),
                stats.n,
                stats.reward_sum,
                stats.reward_sq,
                0.0,
            ),
        )


@pytest.mark.parametrize("kind", ["negative-n", "negative-definite", "singular"])
@pytest.mark.parametrize("fmt", ["json", "sqlite"])
def test_impossible_stored_statistics_are_a_corrupt_state(
    tmp_path: Path, fmt: str, kind: str
) -> None:
    """Reported by a reader and left alone; moved aside by a writer, which starts afresh (they
    used to be shown as n=-3, or to crash every race inverting a singular matrix)."""
    path = tmp_path / f"state.{fmt}"
    (_json_state if fmt == "json" else _sqlite_state)(path, _impossible(kind))
    original = path.read_bytes()
    store_type = JsonFileStateStore if fmt == "json" else SQLiteStateStore
    with pytest.raises(StateCorruptError, match="which no updates make"):
        store_type(path, read_only=True).load(NS)
    assert path.read_bytes() == original
    assert store_type(path).load(NS) == {}
    aside = [p for p in tmp_path.glob(f"state.{fmt}.corrupt-*") if p.suffix != ".sqlite"]
    aside = [p for p in aside if not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1
    if fmt == "json":
        assert aside[0].read_bytes() == original
    router = LinUCBRouter(DIM)
    router.load_state(store_type(path).load(NS))
    router.rank(_x(0), ["a"])  # no LinAlgError


@pytest.mark.parametrize("kind", ["negative-n", "negative-definite", "nan"])
@pytest.mark.parametrize("make", [MemoryStateStore, "json", "sqlite"])
def test_a_store_refuses_to_add_impossible_statistics(
    tmp_path: Path, make: object, kind: str
) -> None:
    if make == "json":
        store = JsonFileStateStore(tmp_path / "state.json")
    elif make == "sqlite":
        store = SQLiteStateStore(tmp_path / "state.sqlite")
    else:
        store = MemoryStateStore()
    store.add(NS, "a", ArmStats.of(np.ones(DIM), 0.5))
    with pytest.raises(UserError, match="it was not stored"):
        store.add(NS, "b", _impossible(kind))
    assert set(store.load(NS)) == {"a"}


@pytest.mark.server
def test_impossible_statistics_in_redis_read_as_a_corrupt_state(
    redis_url: str,  # noqa: F811
) -> None:
    import redis

    store = RedisStateStore(redis_url, spool=None)
    store.add(NS, "a", ArmStats.of(np.ones(DIM), 0.5))
    bad = _impossible("negative-n").to_json()
    bad["xx"] = np.asarray(bad["xx"]).reshape(-1).tolist()
    client = redis.Redis.from_url(redis_url)
    client.set(f"phi:router:v1:{NS}:a", json.dumps(bad))
    with pytest.raises(StateCorruptError, match="negative count"):
        RedisStateStore(redis_url, read_only=True).load(NS)
    client.close()


# ---------------------------------------------------------------- Redis keys of the wrong type


@pytest.mark.server
def test_a_redis_key_of_the_wrong_type_is_a_corrupt_state_and_a_reset_removes_it(
    redis_url: str,  # noqa: F811
) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisStateStore(redis_url, spool=None)
    store.add(NS, "a", ArmStats.of(np.ones(DIM), 0.5))
    key = f"phi:router:v1:{NS}:a"
    client.delete(key)
    client.hset(key, "f", "v")  # a hash where the statistics belong
    for reader in (RedisStateStore(redis_url, read_only=True), store):
        with pytest.raises(StateCorruptError, match=f"Redis key {key} is not router statistics"):
            reader.load(NS)
    store.reset()
    assert store.load(NS) == {} and client.exists(key) == 0
    client.set("phi:router:v1:namespaces", "not a set")
    with pytest.raises(StateCorruptError, match="phi:router:v1:namespaces"):
        RedisStateStore(redis_url, read_only=True).namespaces()
    client.close()


# ---------------------------------------------------------------- previews and key prefixes


@pytest.mark.server
async def test_states_with_different_prefixes_share_neither_previews_nor_latency(
    redis_url: str,  # noqa: F811
) -> None:
    import redis

    from phi_core.types import AssistantMessage

    a = open_route_state(redis_url, key_prefix="teamA", spool=None)
    b = open_route_state(redis_url, key_prefix="teamB", spool=None)
    default = open_route_state(redis_url, spool=None)
    assert a.cache is not None and b.cache is not None and default.cache is not None
    await a.cache.put("req", AssistantMessage(), 1.0)
    assert await a.cache.get("req") is not None
    assert await b.cache.get("req") is None and await default.cache.get("req") is None
    assert a.history is not None and b.history is not None and default.history is not None
    a.history.add("schema", "m", 2.0, 10)
    assert a.history.load("schema", 10) == {"m": [2.0]}
    assert b.history.load("schema", 10) == {} and default.history.load("schema", 10) == {}
    client = redis.Redis.from_url(redis_url)
    keys = sorted(k.decode() for k in client.keys("*"))
    assert keys and all(k.startswith("teamA:") for k in keys), keys
    # the default prefix keeps its latency history where it always was
    default.history.add("schema", "m", 3.0, 10)
    assert client.exists("phi:latency:v1:schema:m") == 1
    client.close()


@pytest.mark.server
def test_clearing_a_redis_states_previews_keeps_links_and_other_prefixes(
    redis_url: str,  # noqa: F811
) -> None:
    import redis

    from phi_core.routing.state import clear_previews

    client = redis.Redis.from_url(redis_url)
    cache = RedisPreviewCache(redis_url)
    for i in range(1500):  # more than one SCAN batch
        cache.set(f"teamA:preview:{i}", {"v": i})
    cache.set("teamA:preview[x]*", {"v": 0})  # glob characters in a key are no wildcard
    cache.set("teamB:preview:1", {"v": 1})
    cache.set("phi:gateway:link:abc", {"v": 2})
    assert clear_previews(redis_url, key_prefix="teamA") == 1500
    assert cache.get("teamA:preview:7") is None
    assert cache.get("teamB:preview:1") == {"v": 1}
    assert cache.get("phi:gateway:link:abc") == {"v": 2}
    assert cache.get("teamA:preview[x]*") == {"v": 0}
    client.close()


@pytest.mark.parametrize("name", ["state.sqlite", "state.json"])
async def test_clearing_a_file_states_previews_keeps_links_and_creates_nothing(
    tmp_path: Path, name: str
) -> None:
    from phi_core.routing.state import clear_previews
    from phi_core.types import AssistantMessage

    path = tmp_path / name
    assert clear_previews(str(path)) == 0
    assert os.listdir(tmp_path) == []  # nothing created where nothing was
    state = open_route_state(str(path))
    assert state.cache is not None
    await state.cache.put("req", AssistantMessage(), 1.0)
    state.cache.store.set("phi:gateway:link:abc", {"v": 1}, 3600)
    assert await state.cache.get("req") is not None
    assert clear_previews(str(path)) == 1
    assert await state.cache.get("req") is None
    assert state.cache.store.get("phi:gateway:link:abc") == {"v": 1}


def test_sqlite_preview_cache_clear_also_drops_expired_entries(tmp_path: Path) -> None:
    cache = SQLitePreviewCache(tmp_path / "c.sqlite")
    cache.set("other", {"v": 1}, ttl_s=-1)  # expired
    cache.set("keep", {"v": 2})
    assert cache.clear("preview:") == 1
    assert cache.get("keep") == {"v": 2}


# ---------------------------------------------------------------- the feature cache


def test_the_feature_cache_holds_no_query_text_and_stays_within_its_budget() -> None:
    """1,500 distinct queries of 108 KB used to keep 157 MB alive (every text a cache key)."""
    features = HashedFeatures(64, cache_bytes=64 * 1024)
    chunk = "?! " * 35_000  # ~100 KB, and quick to featurise: punctuation holds no words
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for i in range(300):
            features(f"question {i}{chunk}")
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 256 * 1024  # the 30 MB of texts are not kept
    assert features._cached_bytes <= 64 * 1024
    # the most recent entries are kept and served identically
    again = features(f"question 299{chunk}")
    assert np.array_equal(again, HashedFeatures(64)(f"question 299{chunk}"))
    assert 0 < len(features._cache) < 300


def test_the_feature_cache_can_be_disabled_and_the_extractor_pickled() -> None:
    features = HashedFeatures(32, cache_bytes=0)
    vector = features("What is the capital of France?")
    assert len(features._cache) == 0
    copy = pickle.loads(pickle.dumps(features))
    assert np.array_equal(copy("What is the capital of France?"), vector)
    with pytest.raises(UserError):
        HashedFeatures(32, cache_bytes=-1)


# ---------------------------------------------------------------- race only when unsure

QUERIES = [
    "What is the capital of {}?",
    "Explain how {} works in two sentences.",
    "Give me three facts about {}.",
    "Translate the word {} into French.",
    "Is {} bigger than a house?",
]
TOPICS = ["France", "photosynthesis", "a bicycle", "the moon", "Python", "tea", "rain", "glass",
          "Peru", "a violin", "TCP", "chess", "honey", "Mars", "a bridge", "salt", "Kenya"]  # fmt: skip


def _query(i: int) -> str:
    return QUERIES[i % len(QUERIES)].format(TOPICS[(i * 7) % len(TOPICS)])


def _gate(
    quality: dict[str, float], rounds: int, *, noise: float = 0.0, flip: int | None = None
) -> tuple[list[bool], list[bool]]:
    """The CLI's defaults (LinUCB, α 1, 64 hashed features, 2 of 3 arms previewed) on varied
    queries, learning as the bandit race does: when the gate fires only the favourite answers
    (weight 1); else the two contenders are previewed and scored, the best answers (weight 1)
    and the other learns from its preview (weight 0.5). Rewards: 0.8·judged quality (± judge
    noise) + 0.2·a random latency term. Whether the gate fired per round — comparing the
    contenders (``clearly_ahead(contenders=2)``) and by the router's own bounds alone."""
    rng = np.random.default_rng(3)
    quality = dict(quality)
    features = HashedFeatures(64)
    router = LinUCBRouter(64, alpha=1.0)
    fired, by_widths = [], []
    for i in range(rounds):
        if i == flip:
            quality["good"] = 0.05
        x = features(_query(i))
        ranking = router.rank(x, list(quality))
        sure = ranking.top.n > 0 and ranking.clearly_ahead(contenders=2)
        fired.append(sure)
        by_widths.append(ranking.top.lower > ranking.arms[1].upper)

        def reward(arm: str) -> float:
            judged = float(np.clip(quality[arm] + rng.normal(0, noise), 0, 1))
            return 0.8 * judged + 0.2 * float(rng.uniform())

        if sure:
            router.update(x, ranking.top.arm, reward(ranking.top.arm))
            continue
        scores = {arm: reward(arm) for arm in ranking.order[:2]}
        best = max(scores, key=lambda arm: scores[arm])
        for arm, score in scores.items():
            router.update(x, arm, score, 1.0 if arm == best else 0.5)
    return fired, by_widths


def test_race_only_when_unsure_fires_on_varied_queries_once_the_favourite_is_known() -> None:
    """With the router's own bounds the gate fired after ~900 varied queries at the earliest
    (47 skips in 1,500): the width of an arm shrinks per direction of the 64-dimensional
    features it has seen, and assumes reward noise of 1."""
    fired, by_widths = _gate({"good": 0.95, "fair": 0.5, "poor": 0.1}, 1300)
    assert sum(fired[-200:]) >= 170, sum(fired[-200:])
    assert sum(by_widths[-200:]) <= 10  # what the router's own bounds alone allowed


@pytest.mark.parametrize(
    "quality",
    [{"good": 0.55, "fair": 0.5, "poor": 0.45}, {"good": 0.5, "fair": 0.5, "poor": 0.5}],
)
def test_race_only_when_unsure_never_skips_between_genuinely_close_arms(
    quality: dict[str, float],
) -> None:
    fired, _ = _gate(quality, 1300, noise=0.15)
    assert sum(fired) == 0


def test_a_favourite_that_degrades_is_raced_again_at_once() -> None:
    fired, _ = _gate({"good": 0.95, "fair": 0.5, "poor": 0.1}, 1400, flip=1300)
    assert sum(fired[1200:1300]) >= 85  # sure before
    assert sum(fired[1300:1400]) <= 10 and not any(fired[1320:1400])  # raced again at once


def test_clearly_ahead_compares_prediction_intervals_and_only_the_contenders() -> None:
    top = RankedArm("a", 1.0, 0.85, 0.16, 800, sd=0.05)
    runner_up = RankedArm("b", 0.72, 0.5, 0.22, 400, sd=0.06)
    unexplored = RankedArm("c", 0.71, 0.15, 0.56, 10, sd=0.4)
    assert top.lower < runner_up.upper  # the router's bounds overlap…
    assert top.interval is not None and top.interval == pytest.approx(0.1, rel=0.05)
    ranking = Ranking([top, runner_up, unexplored], "linucb")
    assert ranking.clearly_ahead(contenders=2)  # …the 95 % intervals do not
    assert not ranking.clearly_ahead()  # the unexplored arm's interval reaches the favourite
    close = RankedArm("b", 0.95, 0.75, 0.22, 400, sd=0.06)
    assert not Ranking([top, close], "linucb").clearly_ahead()
    assert f"95% ±{top.interval:.3f}" in Ranking([top], "linucb").explain()[0]
    unknown = RankedArm("b", 0.72, 0.5, 0.22, 400)  # no sd: the router's bounds alone
    assert not Ranking([top, unknown], "linucb").clearly_ahead()
