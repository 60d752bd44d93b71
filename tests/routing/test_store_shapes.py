"""A router state of the wrong shape: quarantined (moved aside, with a warning) by stores that
write, only reported — never moved or changed — by read-only opening (``phi route show``); real
SQLite causes (disk full, locked) surface by name."""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.errors import StateCorruptError, StateStoreError, UserError
from phi_core.routing import ArmStats, JsonFileStateStore, SQLiteStateStore, open_state_store

GOOD_ARM = ArmStats.of(np.array([1.0, 2.0]), 1.0).to_json()

JSON_SHAPES = {
    "empty list": [],
    "null": None,
    "a string": "router state",
    "an arm that is a string": {"version": 1, "namespaces": {"ns": {"a": "oops"}}},
    "an arm that is a list": {"version": 1, "namespaces": {"ns": {"a": []}}},
    "an arm that is null": {"version": 1, "namespaces": {"ns": {"a": None}}},
    "a namespace that is a list": {"version": 1, "namespaces": {"ns": []}},
    "namespaces that are a string": {"version": 1, "namespaces": "ns"},
    "xx of the wrong size": {
        "version": 1,
        "namespaces": {"ns": {"a": {**GOOD_ARM, "xx": [[1.0]]}}},
    },
    "a count that is text": {"version": 1, "namespaces": {"ns": {"a": {**GOOD_ARM, "n": "3"}}}},
    "an unrelated document": {"name": "my-app", "dependencies": {}},
}
FOREIGN = {"an unrelated document"}
"""Shapes that are not a damaged router state but someone else's file: reported, never moved."""


def _snapshot(path: Path) -> tuple[bytes, int, list[str]]:
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent))


def _write_json(tmp_path: Path, value: object) -> Path:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(value))
    os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    return path


@pytest.mark.parametrize("shape", sorted(JSON_SHAPES))
def test_a_json_state_of_the_wrong_shape_is_reported_read_only_and_left_alone(
    tmp_path: Path, shape: str
) -> None:
    path = _write_json(tmp_path, JSON_SHAPES[shape])
    before = _snapshot(path)
    store = open_state_store(path, read_only=True)
    with pytest.raises(StateCorruptError, match="is not a router state") as caught:
        store.namespaces()
    assert caught.value.path == str(path)
    assert "left unchanged" in str(caught.value)
    assert _snapshot(path) == before, "read-only opening moved, changed or created a file"


@pytest.mark.parametrize("shape", sorted(set(JSON_SHAPES) - FOREIGN))
def test_a_json_state_of_the_wrong_shape_is_quarantined_by_a_writer(
    tmp_path: Path, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write_json(tmp_path, JSON_SHAPES[shape])
    original = path.read_bytes()
    store = JsonFileStateStore(path)
    with caplog.at_level(logging.WARNING):
        store.add("ns", "a", ArmStats.of(np.ones(2), 1.0))
    aside = list(tmp_path.glob("state.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == original, "moved aside, byte for byte"
    assert sum("is not a router state" in r.message for r in caplog.records) == 1
    assert store.load("ns")["a"].n == 1, "learning restarted from empty statistics"


def _sqlite_state(tmp_path: Path) -> Path:
    path = tmp_path / "state.sqlite"
    store = SQLiteStateStore(path)
    for i in range(20):
        store.add("ns", f"arm{i}", ArmStats.of(np.arange(8, dtype=float), 1.0))
    with sqlite3.connect(path) as conn:  # fold the write-ahead log in: one self-contained file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    return path


def _garbage(tmp_path: Path) -> Path:
    path = tmp_path / "state.sqlite"
    path.write_bytes(b"this is not a database\n" * 200)
    return path


def _truncated(tmp_path: Path) -> Path:
    path = _sqlite_state(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 + 100])
    return path


def _bad_row(tmp_path: Path) -> Path:
    path = _sqlite_state(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE router_stats SET xx = x'0102' WHERE arm = 'arm3'")
    return path


def _foreign_table(tmp_path: Path) -> Path:
    path = tmp_path / "state.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE router_stats (id INTEGER, payload TEXT)")
    return path


SQLITE_SHAPES = {
    "garbage": _garbage,
    "truncated": _truncated,
    "a row of the wrong shape": _bad_row,
    "a foreign router_stats table": _foreign_table,
}


def _dump(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


def _read_everything(store: object) -> None:
    assert isinstance(store, SQLiteStateStore)
    for namespace in store.namespaces():
        store.load(namespace)


@pytest.mark.parametrize("shape", sorted(SQLITE_SHAPES))
def test_a_sqlite_state_of_the_wrong_shape_is_reported_read_only_and_left_alone(
    tmp_path: Path, shape: str
) -> None:
    path = SQLITE_SHAPES[shape](tmp_path)
    before = _snapshot(path)
    with pytest.raises(StateCorruptError, match="is not a router state"):
        _read_everything(open_state_store(path, read_only=True))
    assert _snapshot(path) == before, "read-only opening moved, changed or created a file"


@pytest.mark.parametrize("shape", sorted(SQLITE_SHAPES))
def test_a_sqlite_state_of_the_wrong_shape_is_quarantined_by_a_writer(
    tmp_path: Path, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = SQLITE_SHAPES[shape](tmp_path)
    original = path.read_bytes()
    copy = tmp_path / "original.bin"
    copy.write_bytes(original)
    with caplog.at_level(logging.WARNING):
        store = SQLiteStateStore(path)
        _read_everything(store)
        store.add("ns", "fresh", ArmStats.of(np.ones(2), 1.0))
    aside = [
        p for p in tmp_path.glob("state.sqlite.corrupt-*") if not p.name.endswith(("-wal", "-shm"))
    ]
    assert len(aside) == 1
    # Moved aside as it was: the same bytes, or (a database opened in WAL mode before its bad
    # row was read) the same content.
    assert aside[0].read_bytes() == original or _dump(aside[0]) == _dump(copy)
    assert sum("is not a router state" in r.message for r in caplog.records) == 1
    assert SQLiteStateStore(path).load("ns")["fresh"].n == 1


def test_read_only_opening_of_a_healthy_sqlite_state_reads_it_without_touching_it(
    tmp_path: Path,
) -> None:
    path = _sqlite_state(tmp_path)
    before = _snapshot(path)
    store = open_state_store(path, read_only=True)
    assert store.namespaces() == ["ns"] and len(store.load("ns")) == 20
    assert _snapshot(path) == before


@pytest.mark.parametrize("name", ["state.json", "state.sqlite"])
def test_phi_route_show_reports_a_bad_state_and_leaves_it_exactly_as_it_was(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    path.write_bytes(
        b'{"dependencies": {"left-pad": "1.0"}}' if name.endswith("json") else b"\0" * 300
    )
    os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    before = _snapshot(path)
    for command in (["route", "show"], ["route", "export"], ["route", "show", "--json"]):
        result = CliRunner().invoke(app, [*command, "--state", str(path)])
        assert result.exit_code == 1, result.output
        assert "is not a router state" in result.output
        assert "Traceback" not in result.output
        assert _snapshot(path) == before, f"{command} changed the directory or the file"


def test_phi_route_reset_moves_a_bad_state_aside_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("[]")
    result = CliRunner().invoke(app, ["route", "reset", "--state", str(path), "-y"])
    assert result.exit_code == 0, result.output
    assert [p.read_text() for p in tmp_path.glob("state.json.corrupt-*")] == ["[]"]
    assert json.loads(path.read_text()) == {"version": 1, "namespaces": {}}


class _FullDiskStore(SQLiteStateStore):
    """Test double: a SQLite state whose database may not grow (``max_page_count``), which is
    how SQLite reports a full disk (SQLITE_FULL)."""

    full = False

    def _connect(self) -> Iterator[sqlite3.Connection]:  # type: ignore[override]
        manager = super()._connect()
        conn = manager.__enter__()
        if self.full:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages}")
        return _Closing(manager, conn)  # type: ignore[return-value]


class _Closing:
    def __init__(self, manager: object, conn: sqlite3.Connection) -> None:
        self.manager, self.conn = manager, conn

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.manager.__exit__(*exc)  # type: ignore[attr-defined]


def test_a_full_disk_is_reported_as_a_full_disk(tmp_path: Path) -> None:
    store = _FullDiskStore(tmp_path / "state.sqlite")
    store.full = True
    big = ArmStats.of(np.arange(200, dtype=float), 1.0)  # 320 KB of statistics: needs new pages
    with pytest.raises(StateStoreError) as caught:
        store.add("ns", "a", big)
    message = str(caught.value)
    assert "disk full" in message and "cannot rollback" not in message
    assert not isinstance(caught.value, StateCorruptError)


def test_a_locked_state_is_reported_as_locked(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    SQLiteStateStore(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StateStoreError, match="locked") as caught:
            SQLiteStateStore(path, timeout=0.2).add("ns", "a", ArmStats.of(np.ones(2), 1.0))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "another process" in str(caught.value)
    assert not list(tmp_path.glob("*.corrupt-*")), "a locked state is not corrupt"


def test_phi_route_show_on_an_unreachable_redis_says_so_instead_of_showing_nothing() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(app, ["route", "show", "--state", f"redis://127.0.0.1:{port}/0"])
    assert result.exit_code == 1, result.output
    assert "cannot be reached" in result.output and "Traceback" not in result.output


def _another_programs_database(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE questions (id INTEGER, text TEXT)")


FOREIGN_FILES = {
    "race.toml": b'strategy = "judge"\n[[branches]]\nmodel = "openai:gpt-4o-mini"\n',
    "questions.jsonl": b'{"input": "2+2", "expected": "4"}\n{"input": "3+3", "expected": "6"}\n',
    "package.json": b'{"name": "my-app", "dependencies": {}}',
    "items.json": b'[{"input": "2+2"}]',
    "notes": b"[]",
    "data.db": _another_programs_database,
}


@pytest.mark.parametrize("name", sorted(FOREIGN_FILES))
def test_a_writer_refuses_a_file_that_is_not_a_router_state_and_leaves_it_alone(
    tmp_path: Path, name: str
) -> None:
    """A --state naming the wrong file (a race file, a dataset, another program's JSON or
    database) is refused, naming it; it is never moved aside and replaced by a state."""
    path = tmp_path / name
    content = FOREIGN_FILES[name]
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        content(path)
    before = _snapshot(path)
    with pytest.raises(UserError) as caught:
        store = open_state_store(path)
        store.add("ns", "a", ArmStats.of(np.ones(2), 1.0))
    assert not isinstance(caught.value, StateStoreError)
    assert f"{path} is not a router state (it " in str(caught.value)
    assert "left unchanged" in str(caught.value)
    assert _snapshot(path) == before, "the file was moved, changed, or something made beside it"


@pytest.mark.parametrize("name", ["race.toml", "questions.jsonl"])
def test_phi_race_and_route_reset_refuse_a_state_that_is_someone_elses_file(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    content = FOREIGN_FILES[name]
    assert isinstance(content, bytes)
    path.write_bytes(content)
    before = _snapshot(path)
    race = [
        "race", "Q?", "-m", "scripted:a", "-m", "scripted:b", "--strategy", "bandit",
        "--state", str(path),
    ]  # fmt: skip
    for args in (race, ["route", "reset", "-y", "--state", str(path)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert f"{path} is not a router state" in " ".join(result.stderr.split())
        assert _snapshot(path) == before, f"{args[0]} moved, changed or made a file"
