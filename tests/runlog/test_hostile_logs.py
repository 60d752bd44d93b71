"""The run log and `phi logs` against hostile input: a garbage, truncated or damaged logs.db, a
search holding a NUL or text that is not UTF-8, arguments that are not UTF-8, and a PHI_HOME
that is a file. Each is a clear error naming what was wrong and how to fix it (exit 2 on the
command line), never a traceback."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core._paths import user_dir
from phi_core.cli import app
from phi_core.errors import RunNotFoundError, UserError
from phi_core.runlog import (
    RunLog,
    RunQuery,
    RunRecord,
    default_log_path,
    log_status,
    open_run_log,
    set_logging_enabled,
)

GARBAGE = b"this is not a database at all, just garbage text padding padding padding\n"


@pytest.fixture(autouse=True)
def _logging_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHI_NO_LOG", raising=False)


def phi(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _fill(path: Path, runs: int = 60) -> None:
    with RunLog(path) as log:
        log.write_many(
            [
                RunRecord(kind="run", prompt=f"question {i} " + "x" * 2000, status="ok")
                for i in range(runs)
            ]
        )


def _truncated(path: Path) -> Path:
    _fill(path)
    with open(path, "r+b") as f:
        f.truncate(40000)
    return path


def _damaged_inside(path: Path) -> Path:
    """A log that opens (header, schema and migrations intact) but whose ``runs`` table is
    garbage: the damage shows only once runs are read."""
    _fill(path)
    with sqlite3.connect(path) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xa5" * size)
    return path


def _dropped(path: Path, table: str = "runs") -> Path:
    """A log whose ``table`` was dropped after the migrations made it (by hand, another tool)."""
    _fill(path, runs=3)
    with sqlite3.connect(path) as conn:
        conn.execute(f"DROP TABLE {table}")
    conn.close()
    return path


def _says_what_to_do(message: str, path: Path) -> None:
    assert str(path) in message
    assert "is not a readable phi run log" in message
    assert "Move it aside" in message and "`phi logs path`" in message


# ---------------------------------------------------------------- a corrupt logs.db


@pytest.mark.parametrize("make", ["garbage", "truncated", "damaged inside", "a dropped table"])
def test_a_corrupt_log_is_a_clear_error_naming_the_file(tmp_path: Path, make: str) -> None:
    path = tmp_path / "logs.db"
    if make == "garbage":
        path.write_bytes(GARBAGE)
    elif make == "truncated":
        _truncated(path)
    elif make == "a dropped table":
        _dropped(path)
    else:
        _damaged_inside(path)
    with pytest.raises(UserError) as caught, open_run_log(path) as log:
        log.list_runs(RunQuery(limit=None))
        log.last_run()
    _says_what_to_do(str(caught.value), path)


def test_a_log_damaged_inside_opens_and_then_says_so_on_reading(tmp_path: Path) -> None:
    path = _damaged_inside(tmp_path / "logs.db")
    with RunLog(path) as log:
        for read in (lambda: log.list_runs(RunQuery()), log.last_run, log.facets):
            with pytest.raises(UserError) as caught:
                read()
            _says_what_to_do(str(caught.value), path)


def test_opening_a_garbage_log_directly_still_raises_the_sqlite_error(tmp_path: Path) -> None:
    # `phi run` (and the MCP server) catch it, warn and run unlogged
    path = tmp_path / "logs.db"
    path.write_bytes(GARBAGE)
    with pytest.raises(sqlite3.DatabaseError, match="not a database"):
        RunLog(path)


def test_log_status_of_a_garbage_log_says_it_is_not_a_run_log(tmp_path: Path) -> None:
    path = tmp_path / "logs.db"
    path.write_bytes(GARBAGE)
    with pytest.raises(UserError, match="not a readable phi run log"):
        log_status(path)
    assert path.read_bytes() == GARBAGE  # nothing moved or rewritten


@pytest.mark.parametrize(
    ("make", "command"),
    [
        (make, command)
        for make in ("garbage", "truncated", "damaged inside", "a dropped table")
        for command in ([], ["-q", "question"], ["show"], ["status"])
        # status counts the runs through an index: it cannot see a damaged table
        if (make, command) != ("damaged inside", ["status"])
    ],
)
def test_phi_logs_on_a_corrupt_log_exits_2_with_one_clear_line(
    make: str, command: list[str]
) -> None:
    path = default_log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if make == "garbage":
        path.write_bytes(GARBAGE)
    elif make == "truncated":
        _truncated(path)
    elif make == "a dropped table":
        _dropped(path)
    else:
        _damaged_inside(path)
    result = phi("logs", *command)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # not a traceback
    assert result.output.startswith("Error: ")
    _says_what_to_do(" ".join(result.output.split()), path)


@pytest.mark.parametrize("table", ["runs", "branches", "route_events"])
def test_a_log_missing_a_table_says_so_once_on_opening_and_is_left_alone(
    tmp_path: Path, table: str
) -> None:
    path = _dropped(tmp_path / "logs.db", table)
    before = path.read_bytes()
    with pytest.raises(sqlite3.DatabaseError, match=f"no such table: {table}"):
        RunLog(path)  # a writer: `phi run` warns once and runs unlogged
    with pytest.raises(UserError) as caught:
        RunLog(path, read_only=True)  # the web view
    _says_what_to_do(str(caught.value), path)
    assert path.read_bytes() == before  # the user's record: nothing moved or recreated


def test_a_table_dropped_while_the_log_is_open_is_a_clear_error_on_reading(
    tmp_path: Path,
) -> None:
    path = tmp_path / "logs.db"
    _fill(path, runs=2)
    with RunLog(path) as log:
        with sqlite3.connect(path) as other:
            other.execute("DROP TABLE runs")
        other.close()
        for read in (lambda: log.list_runs(RunQuery()), log.last_run):
            with pytest.raises(UserError) as caught:
                read()
            _says_what_to_do(str(caught.value), path)


def test_a_run_on_a_log_missing_a_table_warns_once_and_answers(tmp_path: Path) -> None:
    path = _dropped(default_log_path())
    script = tmp_path / "script.json"
    script.write_text('{"scripted:a": {"default": "Paris."}}')
    result = CliRunner().invoke(app, ["run", "hi", "-m", "scripted:a", "--script", str(script)])
    assert result.exit_code == 0, result.output
    assert "Paris." in result.stdout
    assert result.stderr.count("no such table") == 1, result.stderr
    assert "this run is not logged" in result.stderr
    assert "Traceback" not in result.output and path.is_file()


# ---------------------------------------------------------------- NUL and invalid Unicode


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"text": "\x00"}, "text contains a NUL character (at position 0)"),
        ({"text": "a\x00b"}, "text contains a NUL character (at position 1)"),
        ({"text": "\ud800"}, "text is not valid UTF-8 text"),
        ({"status": "\ud800"}, "status is not valid UTF-8 text"),
        ({"model": "\udcff"}, "model is not valid UTF-8 text (byte 0xff at position 0)"),
        ({"conversation_id": "\x00"}, "conversation_id contains a NUL character"),
    ],
)
def test_a_query_holding_a_nul_or_a_lone_surrogate_is_refused(
    tmp_path: Path, fields: dict[str, str], said: str
) -> None:
    _fill(tmp_path / "logs.db", runs=2)
    with pytest.raises(UserError) as caught, RunLog(tmp_path / "logs.db") as log:
        log.list_runs(RunQuery(**fields))  # type: ignore[arg-type]
    assert said in str(caught.value)


def test_ordinary_odd_search_text_still_searches(tmp_path: Path) -> None:
    _fill(tmp_path / "logs.db", runs=2)
    with RunLog(tmp_path / "logs.db") as log:
        for text in ("\x01", "'", "\\", "NOT", "^", "é", '"'):
            assert log.list_runs(RunQuery(text=text)) == []
        assert len(log.list_runs(RunQuery(text="question 1"))) == 1


def test_a_run_id_that_is_not_utf8_is_not_found_saying_why(tmp_path: Path) -> None:
    _fill(tmp_path / "logs.db", runs=1)
    with (
        RunLog(tmp_path / "logs.db") as log,
        pytest.raises(RunNotFoundError, match="not valid UTF-8 text"),
    ):
        log.get_run("01\udcff")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["logs", "-q"], "-q/--query"),
        (["logs", "--status"], "--status"),
        (["logs", "--cid"], "--cid"),
        (["logs", "-m"], "-m/--model"),
        (["logs", "-s"], "-s/--strategy"),
        (["logs", "show"], "The run id"),
    ],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error(args: list[str], flag: str) -> None:
    _fill(default_log_path(), runs=1)
    done = subprocess.run(
        [sys.executable, "-c", "from phi_entry import phi; phi()", *args, b"\xff"],
        capture_output=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, err
    assert "Traceback" not in err
    assert f"{flag} is not valid UTF-8 text (byte 0xff at position 0)" in err


def test_an_argument_that_is_not_utf8_is_refused_before_the_log_is_read() -> None:
    # as typer hands it over when bytes are not UTF-8 (surrogateescape)
    result = phi("logs", "-q", "caf\udce9")
    assert result.exit_code == 2, result.output
    assert "-q/--query is not valid UTF-8 text (byte 0xe9 at position 3)" in result.output


# ---------------------------------------------------------------- PHI_HOME is a file


@pytest.fixture
def home_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.write_text("x\n")
    monkeypatch.setenv("PHI_HOME", str(home))
    return home


def test_turning_logging_off_with_phi_home_a_file_says_it_must_be_a_folder(
    home_is_a_file: Path,
) -> None:
    said = f"PHI_HOME ({str(home_is_a_file)!r}) is not a folder"
    with pytest.raises(UserError, match=re.escape(said)):
        set_logging_enabled(False)
    # what mkdir raised before (callers treat it as an OSError), now saying what to do
    with pytest.raises(FileExistsError, match=re.escape(said)):
        user_dir(create=True)
    for command in (["off"], ["on"], ["status"], []):
        result = phi("logs", *command)
        assert result.exit_code == 2, (command, result.output)
        assert isinstance(result.exception, SystemExit)
        text = " ".join(result.output.split())
        assert f"Error: {said}" in text, command
        assert "Point PHI_HOME at a folder" in text
    assert home_is_a_file.read_text() == "x\n"


# ---------------------------------------------------------------- wording


def test_status_after_logs_off_reads_without_nested_parentheses() -> None:
    assert phi("logs", "off").exit_code == 0
    result = phi("logs", "status")
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first == "Logging is off: `phi logs off` turned it off; `phi logs on` turns it back on."
    assert phi("logs", "on").exit_code == 0
    assert phi("logs", "status").output.startswith("Logging is on.")
