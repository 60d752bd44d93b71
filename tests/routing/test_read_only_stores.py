"""Router state stores opened read-only (the web view): they read what a writer added, create
no file, take no lock, never move a corrupt file aside, and refuse updates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from phi_core.errors import UserError
from phi_core.routing.bandits import ArmStats
from phi_core.routing.stores import JsonFileStateStore, SQLiteStateStore, open_state_store


def delta(reward: float) -> ArmStats:
    return ArmStats.of(np.array([1.0, 0.5]), reward)


@pytest.mark.parametrize("name", ["state.sqlite", "state.json"])
def test_a_read_only_store_reads_what_the_writer_added(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    writer = open_state_store(path)
    writer.add("ns", "openai:gpt-4o", delta(0.8))
    writer.add("ns", "openai:gpt-4o", delta(0.4))
    before = sorted(p.name for p in tmp_path.iterdir())
    reader = open_state_store(path, read_only=True)
    assert reader.namespaces() == ["ns"]
    stats = reader.load("ns")["openai:gpt-4o"]
    assert stats.n == 2 and stats.reward_sum == pytest.approx(1.2)
    with pytest.raises(UserError, match="read-only"):
        reader.add("ns", "openai:gpt-4o", delta(1.0))
    with pytest.raises(UserError, match="read-only"):
        reader.reset()
    assert open_state_store(path).load("ns")["openai:gpt-4o"].n == 2
    if name.endswith(".json"):  # no lock file, no temporary file
        assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("name", ["state.sqlite", "state.json"])
def test_a_missing_state_is_an_error_and_is_not_created(tmp_path: Path, name: str) -> None:
    with pytest.raises(UserError, match=r"No router state at .*--strategy bandit"):
        open_state_store(tmp_path / name, read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_json_state_is_reported_and_left_where_it_is(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{not json")
    reader = JsonFileStateStore(path, read_only=True)
    with pytest.raises(UserError, match="unreadable"):
        reader.namespaces()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    assert path.read_text() == "{not json"


def test_a_sqlite_file_without_router_statistics_reads_as_empty(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "other.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE unrelated (x)").connection.close()
    reader = SQLiteStateStore(path, read_only=True)
    assert reader.namespaces() == [] and reader.load("ns") == {}
