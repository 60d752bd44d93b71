"""The outcome of one configuration on one input — the one shape races, bandit races and
selection all report.

A race branch (:class:`~phi_core.parallel.ParallelLoopOutcome`), a bandit race's preview or full
answer (the same branches) and a selection cell (:class:`~phi_core.select.Evaluation`) are all
:class:`Outcome` objects: what ran (``config_id``), how it ended (``status`` plus the classified
``error_kind`` and ``error`` text), what it produced (``text``), and what it cost (``usage``,
``cost_usd``, ``latency_s``). Usage that streamed before a timeout or a cancellation is counted
(estimated when the vendor had not reported it yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .errors import ProviderErrorKind
from .types import Usage

__all__ = [
    "ErrorKind",
    "Outcome",
    "OutcomeStatus",
    "RaceStatus",
    "status_of_error_kind",
]

OutcomeStatus = Literal[
    "ok", "error", "timeout", "cancelled", "rejected", "unverified", "over_budget"
]
"""How a configuration's run ended:

- ``ok``: it completed with an answer;
- ``error``: a model, tool or loop failure (``error_kind`` says which);
- ``timeout``: a deadline or branch timeout stopped it (partial usage kept);
- ``cancelled``: the caller, the race or an early accept stopped it (partial usage kept);
- ``rejected``: an input filter or a ``before_loop`` hook refused it;
- ``unverified``: it completed but its answer failed the configured check;
- ``over_budget``: the budget refused its next call before it was sent.
"""

RaceStatus = Literal["ok", "all_failed", "cancelled", "timeout", "over_budget"]
"""How a race (parallel or bandit) ended: ``ok`` (it has a winner), ``all_failed`` (no
configuration produced an answer), ``cancelled``, ``timeout`` (its total deadline passed first) or
``over_budget`` (its budget refused the calls it still needed)."""

ErrorKind = (
    ProviderErrorKind  # a model call failed
    | Literal["tool", "hook", "limit", "check", "internal"]  # the run failed around the call
)
"""What kind of failure an outcome's ``error`` describes (``None`` when it did not fail)."""


def status_of_error_kind(kind: str | None) -> OutcomeStatus:
    """The outcome status a failure of ``kind`` gives (``error`` for anything not special)."""
    if kind == "timeout":
        return "timeout"
    if kind == "budget":
        return "over_budget"
    if kind == "cancelled":
        return "cancelled"
    return "error"


@dataclass(eq=False, kw_only=True)
class Outcome:
    """What one configuration produced on one input.

    Subclasses add what their engine knows (a race branch's messages and context, a selection
    cell's score); the fields here are what every engine reports the same way.
    """

    config_id: str = ""
    """The configuration's id: a branch's label, an arm's name, a combination's name."""
    status: OutcomeStatus = "ok"
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    latency_s: float = 0.0
    """Wall-clock seconds from the start to the end of this configuration's run."""
    error: str | None = None
    """What went wrong, for every status but ``ok``."""
    error_kind: ErrorKind | None = None
    """The classified kind of ``error`` (a provider error's ``kind``, ``tool``, ``timeout``…)."""
    retry_after: float | None = None
    """Seconds the vendor asked to wait, when the failure was a rate limit that said so."""
    answer: str = ""
    """The answer's text, for engines that do not keep messages (see :attr:`text`)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def text(self) -> str:
        """The final answer's text (empty when there is none)."""
        return self.answer
