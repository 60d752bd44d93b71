"""Faults of the router state and its companions: a reset reaches a running router (a reload
makes its statistics exactly the store's), a SQLite state corrupted while in use is moved aside
and recreated with every table it holds (and the log says so truthfully), feedback links are
claimed atomically in every store and an unreachable Redis is an error, not a miss; and the
``phi route`` commands' usage errors (a bad Redis URL, an unreachable Redis with
``--namespace``, ``-o -``)."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.errors import ConfigError, StateStoreError, UserError
from phi_core.loop import AgentLoopConfig
from phi_core.providers.base import ModelConfig
from phi_core.race import Arm, BanditRace
from phi_core.routing import (
    ArmStats,
    HashedFeatures,
    LinUCBRouter,
    MemoryPreviewCache,
    MemoryStateStore,
    RedisPreviewCache,
    SQLitePreviewCache,
    SQLiteStateStore,
)
from phi_core.routing.state import clear_previews, open_route_state
from phi_core.routing.stores import open_state_store
from phi_core.testing import ScriptedProvider

from .test_stores import running_redis

DIM = 16


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=DIM)


def _race(store: MemoryStateStore) -> BanditRace:
    arms = [
        Arm(
            name,
            AgentLoopConfig(
                model=ModelConfig(provider="test", id=name, api="scripted"),
                provider=ScriptedProvider([], name=name),
            ),
        )
        for name in ("a", "b")
    ]
    return BanditRace(arms, LinUCBRouter(DIM), features=HashedFeatures(DIM), store=store)


# ---------------------------------------------------------------- a reset reaches a router


def test_load_state_makes_the_router_exactly_the_stores_absent_arms_go_back_to_the_prior():
    router = LinUCBRouter(DIM)
    for i in range(5):
        router.update(_x(i), "a", 1.0)
        router.update(_x(i + 10), "b", 0.2)
    kept = router.stats("a")
    router.load_state({"a": kept})
    assert router.stats("a").n == 5
    assert router.stats("b").n == 0 and not router.stats("b").xx.any()
    assert np.allclose(router.a_inverse("b"), np.eye(DIM))  # the prior's
    assert router.arms == ["a", "b"]  # still in the pool
    router.load_state({})
    assert router.stats("a").n == 0


async def test_a_reset_store_reaches_a_running_bandit_race_at_its_next_load():
    store = MemoryStateStore()
    race = _race(store)
    namespace = race.namespace
    for i in range(3):
        store.add(namespace, "a", ArmStats.of(_x(i), 1.0))
    await race.load()
    assert race.router.stats("a").n == 3
    store.reset()  # `phi route reset` from another process
    await race.load()
    assert race.router.stats("a").n == 0
    assert race.router.rank(_x(0), ["a", "b"]).top.n == 0


# ---------------------------------------------------------------- SQLite corrupted in use


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _corrupt(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(1000)
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def test_a_sqlite_state_corrupted_in_use_is_recreated_with_every_table_and_logged_truly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    path = tmp_path / "state.sqlite"
    state = open_route_state(str(path), cache_ttl_s=60)
    assert state.cache is not None and state.history is not None
    state.store.add("ns", "a", ArmStats.of(_x(0), 1.0))
    state.cache.store.set("k", {"v": 1})
    state.history.add("ns", "m", 0.5, 10)
    for i in range(200):  # enough pages that a truncation damages them
        state.cache.store.set(f"filler-{i}", {"text": "x" * 200})
    _corrupt(path)
    with caplog.at_level(logging.WARNING):
        assert state.store.load("ns") == {}  # moved aside, starting afresh: no exception
    assert {"router_stats", "previews", "latency_samples"} <= _tables(path)
    assert list(tmp_path.glob("state.sqlite.corrupt-*"))
    text = caplog.text
    assert "moved it to" in text and "left unchanged" not in text
    # every companion works on the new file at once
    state.cache.store.set("k2", {"v": 2})
    assert state.cache.store.get("k2") == {"v": 2}
    state.history.add("ns", "m", 0.7, 10)
    assert state.history.load("ns", 10) == {"m": [0.7]}
    state.store.add("ns", "a", ArmStats.of(_x(1), 0.5))
    assert state.store.load("ns")["a"].n == 1


def test_sqlite_companions_recreate_their_tables_when_the_file_is_replaced(tmp_path: Path):
    path = tmp_path / "state.sqlite"
    state = open_route_state(str(path), cache_ttl_s=60)
    assert state.cache is not None and state.history is not None
    state.history.add("ns", "m", 0.5, 10)
    path.unlink()
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    sqlite3.connect(path).close()  # an empty file took its place
    state.cache.store.set("k", {"v": 1})
    assert state.cache.store.get("k") == {"v": 1}
    assert state.history.load("ns", 10) == {}
    state.history.add("ns", "m", 0.25, 10)
    state.store.add("ns", "a", ArmStats.of(_x(0), 1.0))
    assert state.store.load("ns")["a"].n == 1
    SQLiteStateStore(path).reset()
    assert SQLiteStateStore(path).namespaces() == []


# ---------------------------------------------------------------- atomic claims of links


def test_sqlite_claim_is_won_once_by_many_threads_and_instances(tmp_path: Path):
    path = tmp_path / "links.sqlite"
    caches = [SQLitePreviewCache(path, ttl_s=60) for _ in range(4)]
    results: list[dict[str, object] | None] = []
    lock = threading.Lock()

    def claim(i: int) -> None:
        found = caches[i % 4].claim("scored:1", {"score": i}, 60)
        with lock:
            results.append(found)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r is None]
    assert len(winners) == 1
    first = caches[0].read("scored:1")
    assert first is not None
    assert all(r == first for r in results if r is not None)
    # an expired claim can be made again
    caches[0].write("scored:2", {"score": 0}, 0.001)
    import time

    time.sleep(0.01)
    assert caches[1].claim("scored:2", {"score": 1}, 60) is None
    caches[1].delete("scored:2")
    assert caches[2].read("scored:2") is None


def test_memory_claim_is_won_once():
    cache = MemoryPreviewCache()
    assert cache.claim("k", {"v": 1}) is None
    assert cache.claim("k", {"v": 2}) == {"v": 1}
    cache.delete("k")
    assert cache.claim("k", {"v": 3}) is None


@pytest.mark.server
def test_redis_links_claim_once_and_an_outage_is_an_error_not_a_miss(tmp_path: Path):
    with running_redis(tmp_path) as (url, proc):
        caches = [RedisPreviewCache(url, ttl_s=60) for _ in range(2)]
        assert caches[0].claim("scored:1", {"score": 1}, 60) is None
        assert caches[1].claim("scored:1", {"score": 2}, 60) == {"score": 1}
        caches[0].write("link:1", {"arm": "a"}, 60)
        assert caches[1].read("link:1") == {"arm": "a"}
        proc.terminate()
        proc.wait(timeout=10)
        assert caches[0].get("link:1") is None  # previews: an outage is a miss
        caches[0].set("p", {"x": 1})  # and a write that is skipped
        for action in (
            lambda: caches[0].read("link:1"),
            lambda: caches[0].write("link:2", {"arm": "a"}, 60),
            lambda: caches[0].claim("scored:2", {"score": 1}, 60),
        ):
            with pytest.raises(StateStoreError, match="cannot be reached"):
                action()


# ---------------------------------------------------------------- phi route usage errors


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_route_with_a_malformed_redis_url_is_a_usage_error_without_its_password():
    for command in ("show", "export"):
        code, out, err = invoke(
            "route", command, "--state", "redis://:hunter2@127.0.0.1:notaport/0"
        )
        assert code == 2, (out, err)
        assert "Traceback" not in err and "hunter2" not in err
        assert "redis://:***@127.0.0.1:notaport/0" in err and "not a valid Redis URL" in err
    code, _, err = invoke("route", "reset", "--state", "redis://127.0.0.1:notaport/0", "--yes")
    assert code == 2 and "not a valid Redis URL" in err


def test_route_reset_of_a_namespace_on_an_unreachable_redis_says_so(tmp_path: Path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    url = f"redis://:pw@127.0.0.1:{port}/0"
    code, out, err = invoke("route", "reset", "--state", url, "--namespace", "x", "--yes")
    assert code == 1, (out, err)
    assert "unreachable" in err and "nothing was reset" in err
    assert "There is no namespace" not in err and ":pw@" not in err


def test_route_export_to_dash_writes_stdout_not_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    state = tmp_path / "state.sqlite"
    SQLiteStateStore(state).add("ns", "a", ArmStats.of(_x(0), 1.0))
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke("route", "export", "--state", str(state), "-o", "-")
    assert code == 0, err
    assert json.loads(out)["namespaces"]["ns"]["a"]["n"] == 1
    assert not (tmp_path / "-").exists()
    code, plain, _ = invoke("route", "export", "--state", str(state))
    assert code == 0 and json.loads(plain) == json.loads(out)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis://127.0.0.1:abc/0", "Port could not be cast to integer value as 'abc'"),
        ("redis://[::1", "Invalid IPv6 URL"),
        ("redis://127.0.0.1:6379/0?socket_timeout=soon", "socket_timeout"),
    ],
)
def test_every_way_of_opening_a_malformed_redis_state_is_a_user_error(url: str, why: str):
    """One check where router state is opened: every caller (race, parallel-agents, serve,
    view, MCP) gets the URL, what is wrong and the form to write, never redis-py's ValueError."""
    openers = [
        lambda: open_route_state(url),
        lambda: open_state_store(url),
        lambda: open_state_store(url, read_only=True),
        lambda: RedisPreviewCache(url),
        lambda: clear_previews(url),
    ]
    for opener in openers:
        with pytest.raises(UserError) as caught:
            opener()
        message = str(caught.value)
        assert f"{url} is not a valid Redis URL" in message and why in message
        assert "redis://[:password@]host:port/db" in message


def test_a_malformed_redis_url_hides_its_password():
    with pytest.raises(UserError) as caught:
        open_route_state("redis://:hunter2@127.0.0.1:abc/0")
    assert "hunter2" not in str(caught.value)
    assert "redis://:***@127.0.0.1:abc/0 is not a valid Redis URL" in str(caught.value)


def test_a_gateway_refuses_a_malformed_redis_state_before_it_listens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from phi_core.gateway import Gateway, GatewayConfig, load_gateway_config

    path = tmp_path / "gateway.toml"
    path.write_text('[gateway]\nlog_content = false\nstate = "redis://127.0.0.1:abc"\n')
    with pytest.raises(ConfigError) as located:
        load_gateway_config(path)
    assert (located.value.line, located.value.key) == (3, "gateway.state")
    assert "not a valid Redis URL" in str(located.value)
    monkeypatch.setenv("PHI_ROUTER_STATE", "redis://[::1")  # the state from the environment
    with pytest.raises(UserError, match=r"redis://\[::1 is not a valid Redis URL"):
        Gateway(GatewayConfig(), run_log=None)
