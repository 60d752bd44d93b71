"""The run log opened read-only (what the web view does): it reads what a writer stored, sees
later writes, never creates, migrates or writes, and refuses what it cannot read with a message
saying what to do."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from phi_core.errors import UserError
from phi_core.runlog import BranchRecord, RunLog, RunQuery, RunRecord, applied_migrations, migrate


def record(prompt: str, model: str, *, strategy: str = "judge", kind: str = "race") -> RunRecord:
    return RunRecord(
        kind=kind,  # type: ignore[arg-type]
        prompt=prompt,
        strategy=strategy,
        status="ok",
        branches=[BranchRecord(index=0, label=model, model=model, status="ok", text="hi")],
    )


def test_a_read_only_log_reads_what_a_writer_stores_and_sees_later_writes(tmp_path: Path) -> None:
    path = tmp_path / "logs.db"
    with RunLog(path) as writer:
        first = writer.write(record("first question", "openai:gpt-4o"))
        with RunLog(path, read_only=True) as reader:
            assert [r.id for r in reader.list_runs()] == [first.id]
            second = writer.write(record("second question", "local:smollm2", strategy="vote"))
            assert [r.id for r in reader.list_runs()] == [second.id, first.id]
            assert reader.get_run(second.id).prompt == "second question"


def test_a_read_only_log_refuses_to_write(tmp_path: Path) -> None:
    path = tmp_path / "logs.db"
    RunLog(path).close()
    with RunLog(path, read_only=True) as reader:
        with pytest.raises(UserError, match="opened read-only"):
            reader.write(record("q", "openai:gpt-4o"))
        with pytest.raises(sqlite3.OperationalError):
            reader._conn.execute("DELETE FROM runs")


def test_a_missing_log_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "logs.db"
    with pytest.raises(UserError, match=r"No run log at .*run one first"):
        RunLog(path, read_only=True)
    assert not path.parent.exists()


def test_an_older_log_is_not_migrated_and_the_error_says_how_to_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "logs.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, upto=2)
    conn.close()
    with pytest.raises(UserError, match=r"missing m003_search.*`phi logs status`"):
        RunLog(path, read_only=True)
    conn = sqlite3.connect(path)
    try:
        assert applied_migrations(conn) == ["m001_initial", "m002_bandit_and_plans"]
    finally:
        conn.close()


def test_a_file_that_is_not_a_run_log_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("just some text, not SQLite\n" * 100)
    with pytest.raises(UserError, match="is not a phi run log"):
        RunLog(path, read_only=True)


def test_offset_count_and_facets_page_and_describe_the_runs(tmp_path: Path) -> None:
    with RunLog(tmp_path / "logs.db") as log:
        written = [
            log.write(record(f"question {i}", model, strategy=strategy))
            for i, (model, strategy) in enumerate(
                [("openai:gpt-4o", "judge"), ("local:smollm2", "vote"), ("openai:gpt-4o", "judge")]
            )
        ]
        newest_first = [r.id for r in reversed(written)]
        pages = [log.list_runs(RunQuery(limit=2, offset=o)) for o in (0, 2, 4)]
        assert [[r.id for r in p] for p in pages] == [newest_first[:2], newest_first[2:], []]
        assert log.list_runs(RunQuery(limit=None, offset=1))[0].id == newest_first[1]
        assert log.count_runs(RunQuery(model="gpt-4o", limit=1)) == 2
        assert log.count_runs() == 3
        facets = log.facets()
        assert facets.models == ["local:smollm2", "openai:gpt-4o"]
        assert facets.strategies == ["judge", "vote"] and facets.kinds == ["race"]
        assert facets.first == written[0].created_at and facets.last == written[-1].created_at
