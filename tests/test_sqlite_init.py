"""init_wal: opening a database another process is still initialising waits instead of failing."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from phi_core._sqlite import init_wal

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY)"


def test_init_waits_for_a_lock_longer_than_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of creating the file
    threading.Timer(0.3, lambda: holder.execute("COMMIT")).start()
    late = sqlite3.connect(path, timeout=0.01, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        late.execute("PRAGMA journal_mode=WAL")  # the bare pragma gives up with the busy timeout
    started = time.monotonic()
    init_wal(late, SCHEMA, timeout=5.0)
    assert time.monotonic() - started >= 0.2
    assert late.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert late.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    holder.close()
    late.close()


def test_init_gives_up_after_its_timeout_and_never_retries_other_errors(tmp_path: Path) -> None:
    path = tmp_path / "y.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    late = sqlite3.connect(path, timeout=0.01, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        init_wal(late, SCHEMA, timeout=0.2)
    holder.execute("COMMIT")
    with pytest.raises(sqlite3.OperationalError, match="syntax"):
        init_wal(late, "CREATE TABLOID oops (x)", timeout=5.0)
    holder.close()
    late.close()
