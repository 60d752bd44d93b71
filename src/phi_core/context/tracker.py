"""``ContextTracker``: how big the context is, from the model's own report plus estimates.

A provider reports how many input tokens a request really had. The tracker keeps the last such
report, anchored at the position in the working context it covers (the request's messages and
the reply). The size of the next request is then that real count plus an estimate of only what
was added since, which is both more accurate and cheaper than estimating everything again. When
there is no report yet, or the working context was rewritten (compacted or pruned) so the report
no longer describes it, the tracker falls back to a full estimate (``overhead`` for the system
prompt and tool definitions plus every message).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..types import AgentMessage, Usage
from .tokens import HEURISTIC, TokenCounter, messages_tokens

__all__ = ["ContextTracker"]


class ContextTracker:
    """Real usage of the last request plus estimates for the messages added after it."""

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter = counter or HEURISTIC
        self._reported: int | None = None
        self._anchor = 0

    @property
    def has_usage(self) -> bool:
        """Whether a real report anchors the estimate."""
        return self._reported is not None

    def record_usage(self, usage: Usage, message_count: int) -> None:
        """The request that produced ``usage`` covered the first ``message_count`` messages of
        the working context (its reply included). Zero usage (a provider that reports none) is
        ignored."""
        total = usage.input + usage.cache_read + usage.cache_write + usage.output
        if total > 0:
            self._reported = total
            self._anchor = message_count

    def reset(self) -> None:
        """Forget the report (after the working context was rewritten)."""
        self._reported = None
        self._anchor = 0

    def estimate_context_tokens(
        self, messages: Sequence[AgentMessage], *, overhead: int = 0
    ) -> int:
        """Tokens of a request carrying ``messages`` (plus ``overhead`` when estimating all)."""
        if self._reported is not None and self._anchor <= len(messages):
            return self._reported + messages_tokens(messages[self._anchor :], self.counter)
        return overhead + messages_tokens(messages, self.counter)
