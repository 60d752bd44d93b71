"""No router update is lost when Redis blinks: a real ``redis-server``, stopped with SIGSTOP for
5 s while 4 processes make 500 updates each (sharing one spool); the final statistics equal the
sum of the updates."""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from phi_core.routing import ArmStats, RedisStateStore, spool_path

from .test_stores import UPDATES, WORKERS, _assert_equal_to_sum, _delta, running_redis

OUTAGE_S = 5.0


def _paced_worker(url: str, worker: int, started: mp.Queue, results: mp.Queue) -> None:  # type: ignore[type-arg]
    store = RedisStateStore(url, socket_timeout=0.5, retry_min_s=0.1, retry_max_s=1.0)
    saw_outage = False
    for i in range(UPDATES):
        if i == 50:
            started.put(worker)
        store.add("ns", "arm", _delta(worker, i))
        saw_outage = saw_outage or store.degraded
        time.sleep(0.01)  # spread the updates over the outage
    flushed = store.flush(timeout=60)
    results.put((worker, saw_outage, flushed, store.pending))


@pytest.mark.server
def test_a_five_second_sigstop_during_four_by_500_updates_loses_none(tmp_path: Path) -> None:
    with running_redis(tmp_path) as (url, proc):
        ctx = mp.get_context("spawn")
        started, results = ctx.Queue(), ctx.Queue()
        procs = [
            ctx.Process(target=_paced_worker, args=(url, w, started, results))
            for w in range(WORKERS)
        ]
        for p in procs:
            p.start()
        for _ in procs:  # every worker is a tenth of the way through its updates
            started.get(timeout=120)
        proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(OUTAGE_S)
        finally:
            proc.send_signal(signal.SIGCONT)
        reports = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert [p.exitcode for p in procs] == [0] * WORKERS
        assert all(flushed and pending == 0 for _, _, flushed, pending in reports), reports
        assert any(saw for _, saw, _, _ in reports), "no worker noticed the outage"
        # The four workers kept the outage's updates in one shared spool; it ends empty.
        assert json.loads(spool_path(url, "phi:router:v1").read_text())["updates"] == []
        _assert_equal_to_sum(RedisStateStore(url).load("ns")["arm"])


@pytest.mark.server
def test_one_warning_per_transition_and_pending_updates_pushed_on_reconnect(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    one = ArmStats.of(np.array([1.0, 2.0]), 1.0)
    with running_redis(tmp_path) as (url, proc):
        store = RedisStateStore(url, socket_timeout=0.3, retry_min_s=0.05, retry_max_s=0.2)
        store.add("ns", "a", one)
        assert store.load("ns")["a"].n == 1
        with caplog.at_level(logging.WARNING):
            proc.send_signal(signal.SIGSTOP)
            try:
                for _ in range(30):
                    store.add("ns", "a", one)
                assert store.degraded and store.pending > 0
                # Reads while degraded: what Redis had, plus what is pending.
                assert store.load("ns")["a"].n == 31
            finally:
                proc.send_signal(signal.SIGCONT)
            time.sleep(0.3)  # past the back-off: the next call reconnects
            store.add("ns", "a", one)
        assert not store.degraded and store.pending == 0
        messages = [r.getMessage() for r in caplog.records]
        assert sum("unreachable" in m for m in messages) == 1, messages
        assert sum("reachable again" in m for m in messages) == 1, messages
        assert RedisStateStore(url).load("ns")["a"].n == 32


@pytest.mark.server
def test_an_update_resent_after_a_timeout_is_counted_once(tmp_path: Path) -> None:
    """The server may run an update after the client gave up on it; re-sending it (same id)
    must not count it twice."""
    one = ArmStats.of(np.array([1.0, 2.0]), 1.0)
    with running_redis(tmp_path) as (url, proc):
        store = RedisStateStore(url, socket_timeout=0.3, retry_min_s=0.05, retry_max_s=0.1)
        store.add("ns", "warm-up", one)  # the script is cached: the next call is one EVALSHA
        proc.send_signal(signal.SIGSTOP)
        try:
            store.add("ns", "a", one)  # sent, then timed out: Redis runs it once it resumes
        finally:
            proc.send_signal(signal.SIGCONT)
        assert store.degraded and store.pending == 1
        time.sleep(0.5)  # Redis has run the buffered update by now
        assert store.flush(timeout=10)
        assert RedisStateStore(url).load("ns")["a"].n == 1


@pytest.mark.server
def test_threads_of_one_process_adding_at_once_count_every_update_once(tmp_path: Path) -> None:
    """A server calls ``add`` from several threads (asyncio.to_thread): the pending list is
    shared, so each update must be pushed exactly once (no IndexError, no double count)."""
    from concurrent.futures import ThreadPoolExecutor

    with running_redis(tmp_path) as (url, _process):
        store = RedisStateStore(url)

        def worker(w: int) -> None:
            for i in range(UPDATES):
                store.add("ns", "arm", _delta(w, i))

        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(worker, range(WORKERS)))
        assert store.pending == 0
        _assert_equal_to_sum(RedisStateStore(url).load("ns")["arm"])
