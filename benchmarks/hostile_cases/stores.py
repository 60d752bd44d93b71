"""Hostile cases: router state of the wrong shape, and a Redis that blinks (issue 15, point 4).

*Wrong shape*: a state file that is not a router state (JSON ``[]``, ``null``, a string or a
list where an arm's statistics belong, unrelated JSON; garbage, truncated or reshaped SQLite).
Opened read-only (as ``phi route show`` does) it is ``blocked`` when the store reports it
(:class:`~phi_core.errors.StateCorruptError`) and the file's bytes, its mtime and the folder are
unchanged; ``lost`` when the file was moved or changed, ``leaked`` when a raw exception escaped.
Opened by a writer (a bandit race) it is ``contained`` when the original bytes are kept aside,
the store works again from empty statistics and one warning was logged; ``lost`` otherwise.

*Outage*: a real ``redis-server`` (127.0.0.1, free port) is stopped with SIGSTOP while worker
processes add statistics; ``contained`` when the final statistics equal the sum of every update,
``lost`` when any is missing or counted twice. Skipped (no rows) without ``redis-server``.

Run through ``benchmarks/hostile.py --only stores`` or ``python benchmarks/hostile_cases/stores.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing as mp
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from phi_core.errors import StateCorruptError
from phi_core.routing import ArmStats, RedisStateStore, SQLiteStateStore, open_state_store

Verdict = tuple[str, str]
ARM = ArmStats.of(np.array([1.0, 2.0]), 1.0).to_json()


def _doc(namespaces: Any) -> bytes:
    return json.dumps({"version": 1, "namespaces": namespaces}).encode()


JSON_SHAPES: dict[str, bytes] = {
    "[]": b"[]",
    "null": b"null",
    "a bare string": b'"router"',
    "a number": b"42",
    "truncated": _doc({"ns": {"a": ARM}})[:-9],
    "arm is a string": _doc({"ns": {"a": "oops"}}),
    "arm is a list": _doc({"ns": {"a": [1, 2]}}),
    "arm is null": _doc({"ns": {"a": None}}),
    "namespace is a list": _doc({"ns": []}),
    "xx too small": _doc({"ns": {"a": {**ARM, "xx": [[1.0]]}}}),
    "xx holds text": _doc({"ns": {"a": {**ARM, "xx": [["a", "b"], ["c", "d"]]}}}),
    "count is text": _doc({"ns": {"a": {**ARM, "n": "many"}}}),
    "count is NaN": _doc({"ns": {"a": {**ARM, "n": float("nan")}}}),
    "unrelated JSON": b'{"name": "my-app", "dependencies": {"left-pad": "1.0"}}',
    "binary": bytes(range(256)),
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
}


def _sqlite_good(path: Path) -> None:
    store = SQLiteStateStore(path)
    for i in range(30):
        store.add("ns", f"arm{i}", ArmStats.of(np.arange(6, dtype=float), 1.0))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")


def _sqlite_truncated(path: Path) -> None:
    _sqlite_good(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 + 7])


def _sqlite_garbage(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\0" + os.urandom(4000))


def _sqlite_zeros(path: Path) -> None:
    path.write_bytes(b"\0" * 8192)


def _sqlite_bad_blob(path: Path) -> None:
    _sqlite_good(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE router_stats SET xr = 'text' WHERE arm = 'arm7'")


def _sqlite_bad_dim(path: Path) -> None:
    _sqlite_good(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE router_stats SET dim = -3 WHERE arm = 'arm2'")


def _sqlite_foreign(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE router_stats (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO router_stats (body) VALUES ('x')")


SQLITE_SHAPES: dict[str, Callable[[Path], None]] = {
    "truncated": _sqlite_truncated,
    "garbage after the header": _sqlite_garbage,
    "all zeros": _sqlite_zeros,
    "a blob that is text": _sqlite_bad_blob,
    "a negative dimension": _sqlite_bad_dim,
    "a foreign router_stats table": _sqlite_foreign,
}


def _snapshot(path: Path) -> tuple[bytes, int, list[str]]:
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent))


def _read_all(store: Any) -> None:
    for namespace in store.namespaces():
        store.load(namespace)


def _read_only(path: Path) -> Verdict:
    before = _snapshot(path)
    try:
        _read_all(open_state_store(path, read_only=True))
        outcome = "no error: a state of the wrong shape was read as valid"
        verdict = "leaked"
    except StateCorruptError as exc:
        outcome, verdict = f"reported: {str(exc)[:120]}", "blocked"
    except Exception as exc:
        outcome, verdict = f"raw {type(exc).__name__}: {exc}", "leaked"
    if _snapshot(path) != before:
        return "lost", f"the file or its folder changed; {outcome}"
    return verdict, outcome


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _writer(path: Path) -> Verdict:
    original = path.read_bytes()
    handler = _Warnings()
    logger = logging.getLogger("phi_core.routing.stores")
    logger.addHandler(handler)
    try:
        store = open_state_store(path)
        _read_all(store)
        store.add("ns", "fresh", ArmStats.of(np.ones(2), 1.0))
        fresh = open_state_store(path).load("ns")
    except Exception as exc:
        return "leaked", f"raw {type(exc).__name__}: {exc}"
    finally:
        logger.removeHandler(handler)
    aside = [p for p in path.parent.glob(path.name + ".corrupt-*") if p.suffix not in (".lock",)]
    kept = any(p.read_bytes() == original for p in aside) or _same_rows(aside, original, path)
    warned = sum("is not a router state" in m for m in handler.messages)
    ok = kept and warned == 1 and set(fresh) == {"fresh"}
    detail = f"moved aside: {len(aside)}, original kept: {kept}, warnings: {warned}"
    return ("contained" if ok else "lost"), detail


def _same_rows(aside: list[Path], original: bytes, path: Path) -> bool:
    """A database switched to WAL mode before its bad row was read: same rows, other header."""
    copy = path.with_name("original-copy.sqlite")
    copy.write_bytes(original)
    try:
        for candidate in aside:
            if candidate.name.endswith(("-wal", "-shm")):
                continue
            try:
                with sqlite3.connect(candidate) as a, sqlite3.connect(copy) as b:
                    if list(a.iterdump()) == list(b.iterdump()):
                        return True
            except sqlite3.Error:
                continue
        return False
    finally:
        copy.unlink()


def _shape_cases(folder: Path) -> list[dict[str, str]]:
    rows = []
    for k, (name, data) in enumerate(JSON_SHAPES.items()):
        for mode, check in (("read-only", _read_only), ("writer", _writer)):
            where = folder / f"json-{k}-{mode}"
            where.mkdir()
            path = where / "state.json"
            path.write_bytes(data)
            result, detail = check(path)
            rows.append({"class": f"wrong shape ({mode})", "case": f"JSON {name}",
                         "result": result, "detail": detail[:400]})  # fmt: skip
    for k, (name, make) in enumerate(SQLITE_SHAPES.items()):
        for mode, check in (("read-only", _read_only), ("writer", _writer)):
            where = folder / f"sqlite-{k}-{mode}"
            where.mkdir()
            path = where / "state.sqlite"
            make(path)
            result, detail = check(path)
            rows.append({"class": f"wrong shape ({mode})", "case": f"SQLite {name}",
                         "result": result, "detail": detail[:400]})  # fmt: skip
    return rows


# ---------------------------------------------------------------------------- outage


def _delta(worker: int, i: int) -> ArmStats:
    return ArmStats.of(np.array([1.0, float(worker), float(i % 5)]), float(i % 2))


def _worker(url: str, worker: int, updates: int, started: Any, done: Any) -> None:
    store = RedisStateStore(url, socket_timeout=0.5, retry_min_s=0.1, retry_max_s=1.0)
    for i in range(updates):
        if i == updates // 10:
            started.put(worker)
        store.add("ns", "arm", _delta(worker, i))
        time.sleep(0.01)
    done.put((worker, store.flush(timeout=60)))


def _outage(folder: Path, workers: int, updates: int, stop_s: float) -> Verdict:
    binary = shutil.which("redis-server")
    assert binary is not None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_for(url)
        ctx = mp.get_context("spawn")
        started, done = ctx.Queue(), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(url, w, updates, started, done))
                 for w in range(workers)]  # fmt: skip
        for p in procs:
            p.start()
        for _ in procs:
            started.get(timeout=120)
        server.send_signal(signal.SIGSTOP)
        time.sleep(stop_s)
        server.send_signal(signal.SIGCONT)
        flushed = [done.get(timeout=180)[1] for _ in procs]
        for p in procs:
            p.join(timeout=60)
        got = RedisStateStore(url).load("ns").get("arm")
    finally:
        server.send_signal(signal.SIGCONT)
        server.terminate()
        server.wait(timeout=10)
    expected = ArmStats.zeros(3)
    for w in range(workers):
        for i in range(updates):
            expected = expected + _delta(w, i)
    n = got.n if got is not None else 0
    equal = got is not None and np.array_equal(got.xx, expected.xx) and got.n == expected.n
    detail = f"{n:g} of {expected.n:g} updates in Redis, flushed: {flushed}"
    return ("contained" if equal else "lost"), detail


def _wait_for(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            client.close()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _outage_cases(folder: Path) -> list[dict[str, str]]:
    if shutil.which("redis-server") is None:
        return []
    rows = []
    for workers, updates, stop_s in ((4, 500, 5.0), (2, 300, 1.0)):
        result, detail = _outage(folder, workers, updates, stop_s)
        rows.append({"class": "Redis outage", "result": result, "detail": detail,
                     "case": f"SIGSTOP {stop_s:g} s during {workers} x {updates} updates"})  # fmt: skip
    return rows


async def run_cases() -> list[dict[str, str]]:
    def run() -> list[dict[str, str]]:
        with tempfile.TemporaryDirectory(prefix="phi-hostile-stores-") as folder:
            return _shape_cases(Path(folder)) + _outage_cases(Path(folder))

    return await asyncio.to_thread(run)


if __name__ == "__main__":
    for row in asyncio.run(run_cases()):
        print(f"{row['result']:9} {row['class']:22} {row['case']}: {row['detail']}")
