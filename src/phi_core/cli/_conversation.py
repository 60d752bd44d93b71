"""The run log and conversations as the commands use them: ``--no-log``, ``-c``, ``--cid``.

:func:`open_session` decides, once per command, whether the run is logged (on by default;
``--no-log``, ``PHI_NO_LOG=1`` or ``phi logs off`` turn it off), which conversation it belongs to
(a new one, or the one ``-c``/``--cid`` continues) and what history the next turn starts from.
A log that cannot be opened or written never fails a run: it is a warning, and the answer is
still printed.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from ..config import DEFAULT_BRANCHES, RaceSpec, load_race_spec
from ..errors import UserError
from ..loop import AgentContext
from ..runlog import (
    Continuation,
    RunLog,
    RunRecord,
    RunRecorder,
    default_log_path,
    find_continuation,
    logging_enabled,
    new_conversation_id,
)
from ..types import AgentMessage
from ._common import warn

__all__ = ["Session", "open_session", "race_spec"]


@dataclass
class Session(AbstractContextManager["Session"]):
    """One command's link to the run log (see the module docstring)."""

    log: RunLog | None
    """Where records go (``None``: this run is not logged)."""
    conversation_id: str
    continuation: Continuation | None = None
    history: list[AgentMessage] = field(default_factory=list)
    """What the next turn continues from (the winner's messages so far)."""
    err: TextIO | None = None
    _reader: RunLog | None = None

    def context(self) -> AgentContext | None:
        """The base context of the next turn (``None``: a fresh conversation)."""
        if not self.history:
            return None
        return AgentContext(messages=[m.model_copy(deep=True) for m in self.history])

    def recorder(self, prompt: str, **kwargs: Any) -> RunRecorder:
        """The sink that records the next turn (it writes only when this run is logged)."""
        # a failed write is reported once, by finish(), as the command's own warning
        return RunRecorder(
            self.log,
            prompt=prompt,
            conversation_id=self.conversation_id,
            log_failures=False,
            **kwargs,
        )

    def finish(
        self, recorder: RunRecorder, result: Any, *, context: AgentContext | None = None
    ) -> RunRecord:
        """The turn's record, written to the log when logging; a failed write is a warning."""
        record = recorder.finish(result, context=context)
        if recorder.error is not None:
            warn(f"this run was not logged: {recorder.error}", self.err)
        return record

    @property
    def logged(self) -> bool:
        return self.log is not None

    def advance(self, messages: list[AgentMessage] | None) -> None:
        """After a turn with an answer: the next one continues from the winner's messages."""
        if messages:
            self.history = list(messages)

    def close(self) -> None:
        for log in {id(x): x for x in (self.log, self._reader) if x is not None}.values():
            log.close()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_session(
    *, no_log: bool, resume: bool, cid: str | None, err: TextIO | None = None
) -> Session:
    """The run log for this command and the conversation it continues (``resume``: the last
    one; ``cid``: that one).

    Raises:
        UserError: ``-c``/``--cid`` found nothing to continue (the message says why).
    """
    writing = not no_log and logging_enabled()
    reading = resume or cid is not None
    log: RunLog | None = None
    if writing or reading:
        try:
            log = RunLog()
        except (sqlite3.Error, OSError) as exc:
            where = default_log_path()
            if reading:
                raise UserError(
                    f"Cannot open the run log {str(where)!r} to continue a conversation ({exc})."
                ) from None
            warn(
                f"the run log {str(where)!r} cannot be opened ({exc}); this run is not logged.", err
            )
    continuation: Continuation | None = None
    if reading and log is not None:
        try:
            continuation = find_continuation(log, cid)
        except UserError:
            log.close()
            raise
    session = Session(
        log=log if writing else None,
        conversation_id=continuation.conversation_id if continuation else new_conversation_id(),
        continuation=continuation,
        history=list(continuation.messages) if continuation else [],
        err=err,
        _reader=log,
    )
    return session


def race_spec(
    config: Path | None, continuation: Continuation | None, *, given_models: bool
) -> RaceSpec:
    """The race file; else, when continuing a conversation that raced and no -m names
    branches, the branches, judge and strategy of its newest race (also when turns run by one
    model came after it); else the defaults."""
    if config is not None:
        return load_race_spec(config)
    race = continuation.last_race if continuation is not None else None
    if race is None or given_models:
        return RaceSpec()
    plan = race.plan or {}
    strategy = plan.get("strategy")
    branches = plan.get("branches") or None
    judge = plan.get("judge")
    if branches == [b.model_dump(mode="json", exclude_none=True) for b in DEFAULT_BRANCHES]:
        # The default race: race the defaults again, with their output limit and judge rule.
        branches = judge = None
    try:
        return RaceSpec.model_validate(
            {
                "branches": branches,
                "judge": judge,
                # A bandit race cannot continue a conversation; the follow-up is judged.
                "strategy": None if strategy == "bandit" else strategy,
            }
        )
    except (UserError, ValueError):
        return RaceSpec()  # a run logged by another version: race the defaults
