"""The run journal: every finished cell of a selection run, so an interrupted run can resume.

A run is identified by what decides its cells — the combinations, the dataset, the scorer and
agent (by name), the seed, the algorithm and its parameters, and the objective. Each finished
cell is written (in a worker thread) as it completes; ``select_best(resume=True)`` hands the
recorded cells back instead of running them again, so the algorithm retraces its steps for free
and continues where the run stopped — the same result as an uninterrupted run, also with the
response cache off and for cells whose cost was not a model call. A journal that cannot be read
or written is a warning, never a failed run.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from .._logging import get_logger
from .._paths import user_path
from .._sqlite import init_wal, quarantine
from ._arena import Evaluation

__all__ = ["RunJournal", "default_journal_path", "run_fingerprint"]

logger = get_logger("phi_core.select.journal")
_EVALUATION = TypeAdapter(Evaluation)


def default_journal_path() -> Path:
    """``$PHI_HOME/select-runs.sqlite``."""
    return user_path("select-runs.sqlite")


def _name(obj: Any) -> str:
    """``module.qualname`` of a class or function, or of an object's class (never an address)."""
    target = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(target, '__module__', '?')}.{target.__qualname__}"


def identity(obj: Any) -> str:
    """What a callable (an agent, a scorer) is, for a run's identity: its ``module.qualname``,
    the digest of its source code when Python can read it (an edited agent is another agent),
    and its own ``fingerprint`` when it has one (a spec's prompt chain: its prompts)."""
    parts = [_name(obj)]
    target = obj if hasattr(obj, "__qualname__") else type(obj)
    target = getattr(target, "__func__", target)  # a bound method: its function
    try:
        source = inspect.getsource(target)
    except (OSError, TypeError):  # built in, or typed at a prompt: the name must do
        source = ""
    if source:
        parts.append(hashlib.sha256(source.encode()).hexdigest()[:16])
    own = getattr(obj, "fingerprint", None)
    if isinstance(own, str):
        parts.append(own)
    return "|".join(parts)


def run_fingerprint(
    *,
    combinations: Sequence[str],
    dataset: Sequence[Any],
    agent: Any,
    scorer: Any,
    seed: int | None,
    algorithm: str,
    params: dict[str, Any],
    objective: tuple[float, float],
    timeout: float | None = None,
    models: Sequence[str] = (),
) -> str:
    """The identity of a run: a SHA-256 over what decides its cells and its path — the
    combinations' names and, in ``models``, what each candidate is (provider, model, endpoint,
    settings: an alias pointed elsewhere is another model), the agent and scorer (code
    included), the dataset and the search's settings."""
    digest = hashlib.sha256()
    head: dict[str, Any] = {
        "combinations": list(combinations),
        "models": list(models),
        "agent": identity(agent),
        "scorer": identity(scorer),
        "seed": seed,
        "algorithm": algorithm,
        "params": params,
        "objective": list(objective),
        "n": len(dataset),
    }
    if timeout is not None:  # absent when unset, so the runs journalled before it still resume
        head["timeout"] = timeout
    digest.update(json.dumps(head, sort_keys=True, default=repr).encode())
    for item in dataset:
        digest.update(repr(item).encode())
        digest.update(b"\x00")
    return digest.hexdigest()


class RunJournal:
    """The cells of one run (``run``) in a SQLite file shared by all runs."""

    def __init__(self, path: str | Path, run: str) -> None:
        self.path = str(path)
        self.run = run
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.error: str | None = None
        """Why the journal cannot be used (``None``: it can)."""
        self.set_aside: Path | None = None
        """Where a damaged file found at ``path`` was moved (``None``: none was)."""
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            try:
                self._db = self._open()
            except sqlite3.OperationalError:
                raise
            except sqlite3.DatabaseError as exc:  # garbage or truncated: kept aside, start afresh
                self.set_aside = quarantine(
                    Path(self.path), str(exc), kind="a selection run journal", log=logger
                )
                self._db = self._open()
        except (sqlite3.Error, OSError) as error:
            self.error = str(error) or type(error).__name__
            logger.warning(
                "Selection run journal %s cannot be opened (%s): this run cannot be resumed.",
                self.path,
                error,
            )

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=5.0)
        try:
            init_wal(
                db,
                "CREATE TABLE IF NOT EXISTS cells (run TEXT NOT NULL, combination TEXT NOT NULL,"
                " datapoint INTEGER NOT NULL, evaluation TEXT NOT NULL,"
                " PRIMARY KEY (run, combination, datapoint))",
                timeout=5.0,
            )
        except BaseException:
            db.close()
            raise
        return db

    def load(self) -> dict[tuple[str, int], Evaluation]:
        """The recorded cells of this run, by ``(combination name, dataset index)``."""
        if self._db is None:
            return {}
        try:
            with self._lock:
                rows = self._db.execute(
                    "SELECT combination, datapoint, evaluation FROM cells WHERE run = ?",
                    (self.run,),
                ).fetchall()
        except sqlite3.Error as error:
            self.error = str(error) or type(error).__name__
            logger.warning("Selection run journal %s unreadable (%s).", self.path, error)
            return {}
        out: dict[tuple[str, int], Evaluation] = {}
        for combination, datapoint, data in rows:
            try:
                out[(str(combination), int(datapoint))] = _EVALUATION.validate_json(data)
            except ValueError:
                logger.warning(
                    "Selection run journal: a damaged cell of %s is run again.", combination
                )
        return out

    def record_sync(self, combination: str, datapoint: int, evaluation: Evaluation) -> None:
        if self._db is None:
            return
        data = _EVALUATION.dump_json(evaluation).decode()
        try:
            with self._lock:
                self._db.execute(
                    "INSERT OR REPLACE INTO cells (run, combination, datapoint, evaluation)"
                    " VALUES (?, ?, ?, ?)",
                    (self.run, combination, datapoint, data),
                )
                self._db.commit()
        except sqlite3.Error as error:
            logger.warning("Selection run journal %s not written (%s).", self.path, error)

    async def record(self, combination: str, datapoint: int, evaluation: Evaluation) -> None:
        await asyncio.to_thread(self.record_sync, combination, datapoint, evaluation)

    def close(self) -> None:
        if self._db is not None:
            with self._lock:
                self._db.close()
            self._db = None
