"""Router updates Redis has not confirmed outlive the process that made them: they are kept in a
spool file, and a later store on the same spool pushes each of them exactly once (real
``redis-server``, stopped with SIGSTOP)."""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from phi_core._paths import user_path
from phi_core.errors import UserError
from phi_core.routing import ArmStats, RedisStateStore, open_route_state
from phi_core.routing._redis import APPLIED_TTL_S, CLAIM_TTL_S, spool_path

from .test_stores import _delta, running_redis

PASSWORD = "s3cret-pw-42"


def _sum(deltas: list[ArmStats]) -> ArmStats:
    total = deltas[0]
    for d in deltas[1:]:
        total = total + d
    return total


def _assert_equal(stats: ArmStats, expected: ArmStats) -> None:
    assert stats.n == expected.n
    assert np.array_equal(stats.xx, expected.xx)
    assert np.array_equal(stats.xr, expected.xr)
    assert stats.reward_sum == expected.reward_sum


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _stopped_worker(url: str, spool: str, started: Any, go_on: Any) -> None:
    """Pushes 10 updates to a live Redis, waits for the outage, makes 40 more, exits unflushed."""
    store = RedisStateStore(url, socket_timeout=0.3, retry_min_s=0.05, retry_max_s=0.2, spool=spool)
    for i in range(10):
        store.add("ns", "arm", _delta(0, i))
    assert not Path(spool).exists(), "a push Redis confirmed must not touch the spool"
    started.put(True)
    go_on.get(timeout=60)
    for i in range(10, 50):
        store.add("ns", "arm", _delta(0, i))
    assert store.degraded and store.pending > 0


@pytest.mark.server
def test_updates_of_a_process_that_exited_during_an_outage_are_pushed_once_by_the_next(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "spool" / "router.json"
    with running_redis(tmp_path) as (url, proc):
        ctx = mp.get_context("spawn")
        started, go_on = ctx.Queue(), ctx.Queue()
        child = ctx.Process(target=_stopped_worker, args=(url, str(spool), started, go_on))
        child.start()
        started.get(timeout=60)
        proc.send_signal(signal.SIGSTOP)
        try:
            go_on.put(True)
            child.join(timeout=60)  # it exits without flushing, Redis still stopped
        finally:
            proc.send_signal(signal.SIGCONT)
        assert child.exitcode == 0
        left = json.loads(spool.read_text())["updates"]
        # The first update of the outage was sent and timed out: Redis runs it now that it is
        # back, and it is in the spool too — re-pushing it under its id must not count it twice.
        assert any(u["sent"] for u in left), left
        assert spool.stat().st_mode & 0o777 == 0o600
        reader, deadline = RedisStateStore(url, spool=None), time.monotonic() + 10
        while reader.load("ns")["arm"].n < 11 and time.monotonic() < deadline:
            time.sleep(0.05)  # Redis runs the buffered update once it resumes
        assert reader.load("ns")["arm"].n == 11, "Redis ran the update that timed out"
        with caplog.at_level(logging.INFO, logger="phi_core.routing.stores"):
            store = RedisStateStore(url, spool=spool)
            assert store.pending == len(left)
            stats = store.load("ns")["arm"]
        assert store.pending == 0 and not store.degraded
        _assert_equal(stats, _sum([_delta(0, i) for i in range(50)]))
        _assert_equal(RedisStateStore(url, spool=None).load("ns")["arm"], stats)
        assert json.loads(spool.read_text())["updates"] == []
        assert any("an earlier process left in" in r.getMessage() for r in caplog.records)


@pytest.mark.server
def test_two_stores_sharing_a_spool_push_each_update_once(tmp_path: Path) -> None:
    spool = tmp_path / "shared.json"
    with running_redis(tmp_path) as (url, proc):
        admin = redis.Redis.from_url(url)
        options: dict[str, Any] = {"socket_timeout": 0.3, "retry_min_s": 0.05, "spool": spool}
        one, two = RedisStateStore(url, **options), RedisStateStore(url, **options)
        one.add("ns", "warm-up", _delta(9, 0))  # the script is cached: pushes are one EVALSHA
        proc.send_signal(signal.SIGSTOP)
        try:
            for i in range(30):  # interleaved, two arms: entries of both stores in one spool
                one.add("ns", "a", _delta(1, i))
                two.add("ns", "b", _delta(2, i))
        finally:
            proc.send_signal(signal.SIGCONT)
        time.sleep(0.3)  # sends that timed out have run by now
        entries = json.loads(spool.read_text())["updates"]
        assert len(entries) >= 2
        admin.config_resetstat()
        barrier = threading.Barrier(2)

        def flush(store: RedisStateStore) -> bool:
            barrier.wait()
            return store.flush(timeout=10)

        results: list[bool] = []
        threads = [
            threading.Thread(target=lambda s=s: results.append(flush(s))) for s in (one, two)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert results == [True, True]
        stats = admin.info("commandstats")
        calls = sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval"))
        assert calls == len(entries), "each spooled update is pushed by exactly one store"
        assert one.pending == two.pending == 0
        state = RedisStateStore(url, spool=None).load("ns")
        _assert_equal(state["a"], _sum([_delta(1, i) for i in range(30)]))
        _assert_equal(state["b"], _sum([_delta(2, i) for i in range(30)]))


def _entry(uid: str, delta: ArmStats, **fields: Any) -> dict[str, Any]:
    base = {"id": uid, "namespace": "ns", "arm": "a", "delta": delta.to_json(), "sent": False}
    base.update({"first_sent": None, "claim": None, "claimed_at": 0.0})
    base.update(fields)
    return base


@pytest.mark.server
def test_spooled_updates_older_than_the_id_lifetime_or_abandoned_mid_push_are_pushed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sent update older than Redis's memory of its id is pushed with a warning; a claim left
    by a process killed mid-push is taken over once stale; a live claim is left to its owner."""
    one = ArmStats.of(np.array([1.0, 2.0]), 1.0)
    now = time.time()
    spool = tmp_path / "spool.json"
    spool.write_text(
        json.dumps(
            {
                "version": 1,
                "updates": [
                    _entry("old", one, sent=True, first_sent=now - APPLIED_TTL_S - 3600),
                    _entry(
                        "dead",
                        one,
                        sent=True,
                        first_sent=now - 60,
                        claim="gone",
                        claimed_at=now - CLAIM_TTL_S - 1,
                    ),
                    _entry("busy", one, sent=True, first_sent=now, claim="other", claimed_at=now),
                ],
            }
        )
    )
    with running_redis(tmp_path) as (url, _proc):
        with caplog.at_level(logging.WARNING, logger="phi_core.routing.stores"):
            store = RedisStateStore(url, spool=spool)
            assert store.flush(timeout=0.5) is False  # the live claim stays with its owner
        assert RedisStateStore(url, spool=None).load("ns")["a"].n == 2
        assert [u["id"] for u in json.loads(spool.read_text())["updates"]] == ["busy"]
        warned = [
            r.getMessage() for r in caplog.records if "first sent more than" in r.getMessage()
        ]
        assert len(warned) == 1 and "1 router update(s)" in warned[0] and str(spool) in warned[0]


@pytest.mark.server
def test_a_spooled_update_redis_can_never_apply_is_dropped_with_the_error(tmp_path: Path) -> None:
    spool = tmp_path / "spool.json"
    three = ArmStats.of(np.array([1.0, 2.0, 3.0]), 1.0)
    spool.write_text(json.dumps({"version": 1, "updates": [_entry("wrong-dim", three)]}))
    with running_redis(tmp_path) as (url, _proc):
        RedisStateStore(url, spool=None).add("ns", "a", ArmStats.of(np.ones(2), 1.0))
        store = RedisStateStore(url, spool=spool)
        with pytest.raises(UserError, match="another dimension"):
            store.load("ns")
        assert json.loads(spool.read_text())["updates"] == []
        assert RedisStateStore(url, spool=spool).load("ns")["a"].n == 1  # the next run works


@pytest.mark.server
def test_the_spool_of_a_password_protected_redis_never_holds_the_password(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_redis(tmp_path) as (url, proc):
        redis.Redis.from_url(url).config_set("requirepass", PASSWORD)
        secret_url = url.replace("redis://", f"redis://:{PASSWORD}@")
        with caplog.at_level(logging.DEBUG):
            store = RedisStateStore(secret_url, socket_timeout=0.3, retry_min_s=0.05)
            store.add("ns", "a", _delta(0, 0))  # the script is cached
            proc.send_signal(signal.SIGSTOP)
            try:
                for i in range(1, 5):
                    store.add("ns", "a", _delta(0, i))
            finally:
                proc.send_signal(signal.SIGCONT)
            path = store.spool_path
            assert path is not None and path.parent == user_path("router-spool")
            assert path.parent.stat().st_mode & 0o777 == 0o700
            assert path.stat().st_mode & 0o777 == 0o600
            files = list(path.parent.iterdir())
            assert path in files
            for f in files:
                assert PASSWORD not in f.name and PASSWORD.encode() not in f.read_bytes()
            time.sleep(0.3)
            later = RedisStateStore(secret_url)  # same URL, same default spool
            assert later.spool_path == path and later.pending > 0
            _assert_equal(later.load("ns")["a"], _sum([_delta(0, i) for i in range(5)]))
        assert all(PASSWORD not in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------- without a server


def test_the_default_spool_is_named_by_server_and_prefix_never_by_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHI_HOME", str(tmp_path))
    plain = spool_path("redis://10.0.0.5:6380/2", "phi:router:v1")
    assert plain.parent == tmp_path / "router-spool"
    assert plain.name.startswith("10.0.0.5-6380-2-") and plain.suffix == ".json"
    # Credentials do not change the spool (it is the same server) and never reach the name.
    assert spool_path(f"redis://:{PASSWORD}@10.0.0.5:6380/2", "phi:router:v1") == plain
    assert spool_path(f"redis://bob:{PASSWORD}@10.0.0.5:6380/2", "phi:router:v1") == plain
    assert spool_path("redis://10.0.0.5:6380?db=2", "phi:router:v1") == plain
    assert spool_path("redis://h", "p") == spool_path("redis://h:6379/0", "p")
    unix = spool_path(f"unix:///run/redis.sock?db=1&password={PASSWORD}", "phi:router:v1")
    assert unix.name.startswith("run-redis.sock-1-")
    assert PASSWORD not in str(unix)
    others = {
        spool_path("redis://10.0.0.5:6380/3", "phi:router:v1"),
        spool_path("redis://10.0.0.5:6381/2", "phi:router:v1"),
        spool_path("redis://10.0.0.6:6380/2", "phi:router:v1"),
        spool_path("redis://10.0.0.5:6380/2", "team-b:router"),
        spool_path("unix:///run/redis.sock?db=2", "phi:router:v1"),
        unix,
        plain,
    }
    assert len(others) == 7


def _unreachable(spool: Path | None, **options: Any) -> RedisStateStore:
    return RedisStateStore(f"redis://127.0.0.1:{_free_port()}/0", spool=spool, **options)


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[]", b'{"version": 1, "updates": [{"id": "x"}]}', b"\xff\xfe"],
    ids=["garbage", "list", "entry-of-wrong-shape", "not-utf8"],
)
def test_a_spool_that_cannot_be_read_is_moved_aside_with_a_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    spool = tmp_path / "spool.json"
    spool.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        store = _unreachable(spool)
        assert store.pending == 0
        store.add("ns", "a", ArmStats.of(np.ones(2), 1.0))  # the spool works again
    aside = list(tmp_path.glob("spool.json.corrupt-*"))
    assert [p.read_bytes() for p in aside] == [content]  # kept for inspection, not dropped
    assert any(str(spool) in r.getMessage() and "spool" in r.getMessage() for r in caplog.records)
    assert len(json.loads(spool.read_text())["updates"]) == 1


def test_a_spool_that_cannot_be_written_warns_once_and_keeps_updates_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    spool = blocker / "spool.json"
    with caplog.at_level(logging.WARNING):
        store = _unreachable(spool)
        for _ in range(3):
            store.add("ns", "a", ArmStats.of(np.ones(2), 1.0))
    assert store.spool_path is None
    # the first was sent (it may have reached Redis: its own id), the next two merged
    assert store.load("ns")["a"].n == 3 and store.pending == 2
    messages = [r.getMessage() for r in caplog.records if "Cannot use the router" in r.getMessage()]
    assert len(messages) == 1 and str(spool) in messages[0]


def test_updates_made_while_redis_is_down_are_in_the_spool_when_add_returns(tmp_path: Path) -> None:
    spool = tmp_path / "spool.json"
    store = _unreachable(spool, retry_min_s=60)
    for arm, reward in [("a", 1.0), ("b", 0.5), ("a", 0.5), ("b", 0.25), ("a", 0.125)]:
        store.add("ns", arm, ArmStats.of(np.ones(2), reward))
    updates = json.loads(spool.read_text())["updates"]
    # The first was sent (it failed: it keeps its own id); later ones merge per arm.
    assert [(u["arm"], u["sent"], u["delta"]["n"], u["delta"]["reward_sum"]) for u in updates] == [
        ("a", True, 1.0, 1.0),
        ("b", False, 2.0, 0.75),
        ("a", False, 2.0, 0.625),
    ]
    later = RedisStateStore(store.url, spool=spool, retry_min_s=60)
    assert later.pending == 3 and later.degraded
    # Answered locally from the spool while Redis is down.
    assert {arm: s.n for arm, s in later.load("ns").items()} == {"a": 3, "b": 2}


def test_a_read_only_or_spool_less_store_writes_no_spool() -> None:
    for store in (
        RedisStateStore(f"redis://127.0.0.1:{_free_port()}/0", read_only=True),
        _unreachable(None),
    ):
        assert store.spool_path is None
    store = _unreachable(None)
    store.add("ns", "a", ArmStats.of(np.ones(2), 1.0))
    assert store.pending == 1
    assert not user_path("router-spool").exists()


def test_open_route_state_passes_the_spool_to_a_redis_store(tmp_path: Path) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{_free_port()}/0"
    default = open_route_state(url, preview_cache=False, key_prefix="team-b").store
    chosen = open_route_state(url, preview_cache=False, spool=tmp_path / "s.json").store
    memory = open_route_state(url, preview_cache=False, spool=None).store
    assert isinstance(default, RedisStateStore) and isinstance(chosen, RedisStateStore)
    assert default.spool_path == spool_path(url, "team-b") != spool_path(url, "phi:router:v1")
    assert chosen.spool_path == tmp_path / "s.json"
    assert isinstance(memory, RedisStateStore) and memory.spool_path is None


@pytest.mark.server
def test_reset_forgets_the_spooled_updates_of_the_namespace_it_resets(tmp_path: Path) -> None:
    one = ArmStats.of(np.array([1.0, 2.0]), 1.0)
    spool = tmp_path / "spool.json"
    updates = [_entry("x1", one, namespace="x"), _entry("y1", one, namespace="y")]
    spool.write_text(json.dumps({"version": 1, "updates": updates}))
    with running_redis(tmp_path) as (url, _proc):
        store = RedisStateStore(url, spool=spool)
        store.reset("x")
        assert [u["id"] for u in json.loads(spool.read_text())["updates"]] == ["y1"]
        assert store.load("y")["a"].n == 1 and store.load("x") == {}
        assert RedisStateStore(url, spool=None).namespaces() == ["y"]
