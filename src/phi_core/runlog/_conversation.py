"""Continuing a logged conversation (``phi run -c``, ``phi race -c``, ``phi chat -c``).

A conversation is the runs that share a ``conversation_id``. Each run stores the winner's whole
history, so the next turn starts from the last run of the conversation that produced an answer
(a failed or cancelled turn is skipped: its question got no answer to build on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import RunNotFoundError
from ..types import AgentMessage
from ._records import RunRecord, new_run_id
from ._store import RunLog

__all__ = ["Continuation", "find_continuation", "new_conversation_id"]


def new_conversation_id() -> str:
    """A fresh conversation id (sortable by creation time, like a run id)."""
    return new_run_id()


@dataclass(frozen=True)
class Continuation:
    """Where the next turn of a conversation starts."""

    conversation_id: str
    run: RunRecord
    """The run continued from (the conversation's last one with an answer)."""
    messages: list[AgentMessage]
    """The winner's whole history: the next prompt is appended to it."""
    last_race: RunRecord | None = None
    """The conversation's newest race (or bandit race), which ``phi race -c`` races again also
    after turns run by one model (``phi run -c``, ``phi chat -c``)."""

    @property
    def winner_spec(self) -> dict[str, Any] | None:
        """The winning branch as configured (model and settings), if the run recorded it."""
        branch = self.run.winning_branch
        return branch.spec if branch is not None else None

    @property
    def branch_specs(self) -> list[dict[str, Any]]:
        """Every branch the run raced (a single run: its one model)."""
        return list((self.run.plan or {}).get("branches") or [])


def find_continuation(log: RunLog, conversation_id: str | None = None) -> Continuation:
    """The conversation ``conversation_id`` (default: the newest one) and the run to continue.

    Raises:
        RunNotFoundError: the log holds no conversation (or not that one), or none of its runs
            produced an answer.
    """
    cid = conversation_id.strip() if conversation_id else log.last_conversation_id()
    if not cid:
        raise RunNotFoundError(
            f"There is no conversation to continue: the run log {str(log.path)!r} has no runs "
            "yet. Ask something first (without -c); `phi logs status` shows whether runs are "
            "logged."
        )
    runs = log.conversation(cid) or log.conversation(cid.upper())
    if not runs and conversation_id:  # the id of a run, as `phi logs` lists them (or a prefix)
        try:
            found = log.get_run(cid).conversation_id
        except RunNotFoundError:
            found = None
        if found:
            cid, runs = found, log.conversation(found)
    if not runs:
        raise RunNotFoundError(
            f"No conversation {cid!r} in the run log {str(log.path)!r}: give a conversation id "
            "(`phi logs --json` shows each run's `conversation_id`) or the id of any run in it "
            "(`phi logs` lists them; a prefix is enough)."
        )
    cid = runs[0].conversation_id or cid
    last_race = next((r for r in reversed(runs) if r.kind in ("race", "bandit")), None)
    for run in reversed(runs):
        if run.messages:
            return Continuation(cid, run, run.history(), last_race)
    if all(run.kind == "select" for run in runs):
        raise RunNotFoundError(
            f"{cid!r} is a model selection (`phi select`): it answers no question, so there is "
            "nothing to continue. Give the id of a race or run (`phi logs` lists them), or ask "
            "again without -c."
        )
    raise RunNotFoundError(
        f"No run of conversation {cid!r} produced an answer to continue from ({len(runs)} "
        "failed or were cancelled); ask again without -c."
    )
