"""State stores and preview caches: atomic additive updates, corruption recovery, degradation."""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing as mp
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from phi_core.errors import UserError
from phi_core.routing import (
    ArmStats,
    JsonFileStateStore,
    LinUCBRouter,
    MemoryPreviewCache,
    MemoryStateStore,
    RedisPreviewCache,
    RedisStateStore,
    SQLitePreviewCache,
    SQLiteStateStore,
    open_state_store,
)

DIM = 4
UPDATES = 500
WORKERS = 4


def _delta(worker: int, i: int) -> ArmStats:
    # Small integers keep every sum exact in binary floating point (and through Lua's cjson).
    x = np.array([1.0, float(worker), float(i % 7), 2.0])
    return ArmStats.of(x, float(i % 3))


def _expected() -> ArmStats:
    total = ArmStats.zeros(DIM)
    for w in range(WORKERS):
        for i in range(UPDATES):
            total = total + _delta(w, i)
    return total


def _sqlite_worker(path: str, worker: int) -> None:
    store = SQLiteStateStore(path)
    for i in range(UPDATES):
        store.add("ns", "arm", _delta(worker, i))


def _redis_worker(url: str, worker: int) -> None:
    store = RedisStateStore(url)
    for i in range(UPDATES):
        store.add("ns", "arm", _delta(worker, i))
    assert not store.degraded


def _run_workers(target, arg: str) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=(arg, w)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * WORKERS


def _assert_equal_to_sum(stats: ArmStats) -> None:
    expected = _expected()
    assert stats.n == WORKERS * UPDATES
    assert np.array_equal(stats.xx, expected.xx)
    assert np.array_equal(stats.xr, expected.xr)
    assert stats.reward_sum == expected.reward_sum


def test_four_processes_updating_one_sqlite_store_lose_no_update(tmp_path: Path):
    path = str(tmp_path / "router.sqlite")
    SQLiteStateStore(path)
    _run_workers(_sqlite_worker, path)
    _assert_equal_to_sum(SQLiteStateStore(path).load("ns")["arm"])


@contextlib.contextmanager
def running_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real ``redis-server`` on a free 127.0.0.1 port: ``(url, process)``."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("redis-server did not start")
            time.sleep(0.05)  # polling a foreign process's port: nothing to await
    try:
        yield f"redis://127.0.0.1:{port}/0", proc
    finally:
        client.close()
        proc.send_signal(signal.SIGCONT)  # in case a test left it stopped
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with running_redis(tmp_path) as (url, _proc):
        yield url


@pytest.mark.server
def test_four_processes_updating_one_redis_store_lose_no_update(redis_url: str):
    _run_workers(_redis_worker, redis_url)
    store = RedisStateStore(redis_url)
    _assert_equal_to_sum(store.load("ns")["arm"])
    assert store.namespaces() == ["ns"]
    store.reset("ns")
    assert store.load("ns") == {}


@pytest.mark.server
def test_redis_preview_cache_expires_entries(redis_url: str):
    cache = RedisPreviewCache(redis_url, ttl_s=60)
    cache.set("k", {"text": "hi"})
    assert cache.get("k") == {"text": "hi"}
    cache.set("k2", {"text": "bye"}, ttl_s=1)
    import redis

    assert 0 < redis.Redis.from_url(redis_url).ttl("k2") <= 1


def test_unreachable_redis_degrades_to_local_with_a_warning(caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStateStore(f"redis://127.0.0.1:{port}/0")
    with caplog.at_level(logging.WARNING):
        store.add("ns", "a", ArmStats.of(np.ones(2), 1.0))
        store.add("ns", "a", ArmStats.of(np.ones(2), 1.0))
    assert store.degraded
    assert store.load("ns")["a"].n == 2
    assert sum("unreachable" in r.message for r in caplog.records) == 1
    cache = RedisPreviewCache(f"redis://127.0.0.1:{port}/0")
    assert cache.get("x") is None  # a miss, not a crash


def test_json_store_writes_atomically_and_reloads_sums(tmp_path: Path):
    store = JsonFileStateStore(tmp_path / "state.json")
    store.add("ns", "a", ArmStats.of(np.ones(3), 1.0))
    store.add("ns", "a", ArmStats.of(np.ones(3), 0.0))
    loaded = store.load("ns")["a"]
    assert loaded.n == 2 and loaded.reward_sum == 1.0
    assert json.loads((tmp_path / "state.json").read_text())["version"] == 1
    assert not [
        p for p in tmp_path.iterdir() if p.name.startswith("state.json.") and "lock" not in p.name
    ]


def test_corrupt_json_state_is_moved_aside_and_learning_restarts(tmp_path: Path, caplog):
    path = tmp_path / "state.json"
    path.write_text('{"version": 1, "namespaces": {"ns": {"a": {"xx": [[1.0]]')  # truncated
    store = JsonFileStateStore(path)
    with caplog.at_level(logging.WARNING):
        assert store.load("ns") == {}
    assert any("moved it to" in r.message for r in caplog.records)
    assert list(tmp_path.glob("state.json.corrupt-*"))
    store.add("ns", "a", ArmStats.of(np.ones(1), 1.0))
    assert store.load("ns")["a"].n == 1


def test_a_json_state_of_another_version_is_not_silently_reused(tmp_path: Path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 99, "namespaces": {}}))
    assert JsonFileStateStore(path).load("ns") == {}
    assert list(tmp_path.glob("state.json.corrupt-*"))


def test_router_restored_from_a_store_ranks_like_the_original(tmp_path: Path):
    store = open_state_store(tmp_path / "r.sqlite")
    router = LinUCBRouter(3)
    rng = np.random.default_rng(0)
    for _ in range(40):
        x = rng.normal(size=3)
        arm = "a" if x[0] > 0 else "b"
        store.add("s", arm, router.update(x, arm, float(x[0] > 0)))
    restored = LinUCBRouter(3)
    restored.load_state(store.load("s"))
    x = np.array([1.0, 0.2, -0.1])
    assert restored.rank(x, ["a", "b"]).order == router.rank(x, ["a", "b"]).order
    assert np.allclose(restored.a_inverse("a"), router.a_inverse("a"))


def test_memory_preview_cache_honours_ttl_and_capacity():
    now = [0.0]
    cache = MemoryPreviewCache(max_entries=2, ttl_s=10, clock=lambda: now[0])
    cache.set("a", {"v": 1})
    cache.set("b", {"v": 2})
    cache.set("c", {"v": 3})
    assert cache.get("a") is None and cache.get("c") == {"v": 3}
    now[0] = 11.0
    assert cache.get("c") is None


def test_sqlite_preview_cache_round_trips_and_expires(tmp_path: Path):
    cache = SQLitePreviewCache(tmp_path / "p.sqlite", ttl_s=60)
    cache.set("k", {"text": "x"})
    assert cache.get("k") == {"text": "x"}
    cache.set("old", {"text": "y"}, ttl_s=-1)
    assert cache.get("old") is None


@pytest.mark.parametrize("kind", ["memory", "json", "sqlite"])
def test_a_store_refuses_to_write_what_it_could_not_read_back(tmp_path: Path, kind: str) -> None:
    """One non-finite arm used to make the next load move the whole file aside, with every
    other arm's learning."""
    store = {
        "memory": MemoryStateStore,
        "json": lambda: JsonFileStateStore(tmp_path / "state.json"),
        "sqlite": lambda: SQLiteStateStore(tmp_path / "state.sqlite"),
    }[kind]()
    x = np.ones(DIM)
    store.add("ns", "good", ArmStats.of(x, 0.7))
    poisoned = ArmStats.of(x, 0.5)
    poisoned.reward_sq = float("inf")
    with pytest.raises(UserError, match="holds NaN or infinity"):
        store.add("ns", "bad", poisoned)
    loaded = store.load("ns")
    assert set(loaded) == {"good"} and loaded["good"].n == 1.0
