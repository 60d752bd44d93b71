"""The run log's schema: numbered migrations from an empty database and from an older one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from phi_core.runlog import MIGRATIONS, RunLog, RunQuery, applied_migrations, migrate

LATEST = [m.__name__ for m in MIGRATIONS]


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def test_an_empty_database_gets_every_migration_in_order_and_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "logs.db"
    with RunLog(path) as log:
        status = log.status()
    assert (
        status.migrations
        == LATEST
        == [
            "m001_initial",
            "m002_bandit_and_plans",
            "m003_search",
        ]
    )
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert {"runs", "branches", "route_events", "runs_fts", "_migrations"} <= {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        assert {"plan", "warnings", "extra", "messages", "verdict"} <= columns(conn, "runs")
        assert {"phase", "score", "spec", "is_winner"} <= columns(conn, "branches")
    finally:
        conn.close()


def test_a_version_1_database_is_upgraded_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "logs.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, upto=1) == ["m001_initial"]
    # A run as version 1 wrote it (no plan, phases, scores or search index yet).
    conn.execute(
        "INSERT INTO runs (id, kind, created_at, prompt, status, winner, text) VALUES "
        "('01OLDRUN', 'race', '2025-01-02T03:04:05.000Z', 'Why is the sky blue?', 'ok', 'b', "
        "'Rayleigh scattering')"
    )
    conn.execute(
        "INSERT INTO branches (run_id, idx, label, model, status, text) VALUES "
        "('01OLDRUN', 0, 'b', 'openai:gpt-4o', 'ok', 'Rayleigh scattering')"
    )
    conn.close()

    with RunLog(path) as log:
        assert log.status().migrations == LATEST
        old = log.get_run("01OLD")
        assert old.prompt == "Why is the sky blue?"
        assert old.branches[0].phase == "" and old.branches[0].winner is False
        assert old.plan is None and old.warnings == []
        # The search index built by migration 3 covers runs logged before it.
        found = log.list_runs(RunQuery(text="rayleigh"))
        assert [r.id for r in found] == ["01OLDRUN"]
        assert [r.id for r in log.list_runs(RunQuery(model="gpt-4o"))] == ["01OLDRUN"]


def test_opening_again_applies_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "logs.db"
    RunLog(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert migrate(conn) == []
        assert applied_migrations(conn) == LATEST
    finally:
        conn.close()


def test_a_failing_migration_leaves_the_database_at_the_previous_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phi_core.runlog import _migrations

    def m004_broken(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE runs ADD COLUMN half_done TEXT")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(_migrations, "MIGRATIONS", (*MIGRATIONS, m004_broken))
    path = tmp_path / "logs.db"
    with pytest.raises(RuntimeError, match="disk on fire"):
        RunLog(path)
    conn = sqlite3.connect(path)
    try:
        assert applied_migrations(conn) == LATEST
        assert "half_done" not in columns(conn, "runs")  # rolled back with its row
    finally:
        conn.close()
