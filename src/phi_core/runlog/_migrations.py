"""The run log's schema, as numbered, append-only migrations (``llm``'s way).

Each migration is a function ``m00N_what(conn)``; :data:`MIGRATIONS` lists them in order and
:func:`migrate` applies the ones not yet recorded in the ``_migrations`` table, each in its own
transaction together with its row in that table. A migration is never edited once released: a
change to the schema is a new function at the end of the list.

Schema after every migration::

    runs          one row per run: id, kind (run/race/bandit/select), source (cli/gateway/...),
                  conversation_id, created_at, duration_s, prompt, system, strategy, status,
                  winner, winner_model, text, tokens, cost_usd, verdict (JSON: the decision with
                  rationale, scores, flip rate / trust figures), messages (JSON: the winner's
                  history, what ``-c`` continues from), plan (JSON: the branch specs), warnings
                  and extra (JSON)
    branches      one row per branch (or preview/answer call of a bandit race, or combination of
                  a selection): label, model, phase, status, error, error_kind, text, tokens,
                  cost, latency, score, is_winner, spec (JSON)
    route_events  the router's decisions and updates of a bandit race, in order (JSON payload)
    runs_fts      full-text index over prompt, system, answers and models (FTS5 when this
                  SQLite has it; searches fall back to LIKE otherwise)
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

__all__ = ["MIGRATIONS", "applied_migrations", "fts_available", "migrate"]


def m001_initial(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            source TEXT NOT NULL DEFAULT 'cli',
            conversation_id TEXT,
            created_at TEXT NOT NULL,
            duration_s REAL,
            prompt TEXT NOT NULL,
            system TEXT,
            strategy TEXT,
            status TEXT NOT NULL,
            winner TEXT,
            winner_model TEXT,
            text TEXT,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cost_usd REAL NOT NULL DEFAULT 0,
            verdict TEXT,
            messages TEXT
        )"""
    )
    conn.execute("CREATE INDEX runs_created ON runs(created_at)")
    conn.execute("CREATE INDEX runs_conversation ON runs(conversation_id, created_at)")
    conn.execute(
        """CREATE TABLE branches (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            label TEXT NOT NULL,
            model TEXT NOT NULL,
            status TEXT NOT NULL,
            error TEXT,
            error_kind TEXT,
            text TEXT,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cost_usd REAL NOT NULL DEFAULT 0,
            latency_s REAL,
            PRIMARY KEY (run_id, idx)
        )"""
    )
    conn.execute("CREATE INDEX branches_model ON branches(model)")


def m002_bandit_and_plans(conn: sqlite3.Connection) -> None:
    """Bandit races (router events, preview/answer phases, judge scores) and the plan that
    ``-c`` re-races."""
    conn.execute(
        """CREATE TABLE route_events (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            namespace TEXT NOT NULL DEFAULT '',
            action TEXT,
            timestamp INTEGER,
            payload TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        )"""
    )
    conn.execute("CREATE INDEX route_events_namespace ON route_events(namespace, timestamp)")
    conn.execute("ALTER TABLE branches ADD COLUMN phase TEXT NOT NULL DEFAULT ''")
    conn.execute("ALTER TABLE branches ADD COLUMN score REAL")
    conn.execute("ALTER TABLE branches ADD COLUMN spec TEXT")
    conn.execute("ALTER TABLE branches ADD COLUMN is_winner INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE runs ADD COLUMN plan TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN warnings TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN extra TEXT")


def m003_search(conn: sqlite3.Connection) -> None:
    """A full-text index of every run (prompt, system, every answer, the models), filled from
    the runs already logged."""
    if not fts_available(conn):
        return  # searches use LIKE on this SQLite
    conn.execute("CREATE VIRTUAL TABLE runs_fts USING fts5(run_id UNINDEXED, body)")
    rows = conn.execute(
        """SELECT r.id, r.prompt, coalesce(r.system, ''), coalesce(r.text, ''),
                  coalesce((SELECT group_concat(coalesce(b.text, '') || ' ' || b.model || ' ' ||
                            b.label, ' ') FROM branches b WHERE b.run_id = r.id), '')
           FROM runs r"""
    ).fetchall()
    conn.executemany(
        "INSERT INTO runs_fts(run_id, body) VALUES (?, ?)",
        [(row[0], " ".join(row[1:])) for row in rows],
    )


Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: tuple[Migration, ...] = (m001_initial, m002_bandit_and_plans, m003_search)
"""Every migration, in the order they are applied (append only)."""


def fts_available(conn: sqlite3.Connection) -> bool:
    """Whether this SQLite was built with FTS5."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp._phi_fts_probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    conn.execute("DROP TABLE temp._phi_fts_probe")
    return True


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    """The names of the migrations already applied, in order."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    return [row[0] for row in conn.execute("SELECT name FROM _migrations ORDER BY rowid")]


def migrate(conn: sqlite3.Connection, *, upto: int | None = None) -> list[str]:
    """Apply every migration not yet applied (the first ``upto`` only, when given); returns
    the names applied now. Each runs in one transaction with its ``_migrations`` row, so a
    failure leaves the database at the previous version."""
    done = set(applied_migrations(conn))
    applied: list[str] = []
    for migration in MIGRATIONS[:upto]:
        name = migration.__name__
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it while this one waited for the write lock.
            if conn.execute("SELECT 1 FROM _migrations WHERE name = ?", (name,)).fetchone():
                conn.execute("ROLLBACK")
                continue
            migration(conn)
            conn.execute(
                "INSERT INTO _migrations(name, applied_at) VALUES (?, ?)", (name, time.time())
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied
