"""``ContextWindow``: the context-management state of one run (what the loop calls each turn).

It resolves the compaction settings for the model (its context window, its token counter, the
measured size of the system prompt and tool definitions), measures each request with a
:class:`~phi_core.context.ContextTracker`, runs compaction when the trigger fires, and handles a
context overflow the provider reported anyway:

* :meth:`view` gives the messages to send this turn (compacted when needed);
* :meth:`record` anchors the model's reported usage, when the request was not compacted;
* :meth:`overflowed` learns from an overflow (the window, in this counter's units, is smaller
  than what was just sent, so later turns compact earlier) and says whether a harder compaction
  and one resend can help.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..types import AgentMessage, ToolDefinition, Usage
from .compaction import CompactionConfig, CompactionReport, ContextCompactor
from .tokens import messages_tokens, token_counter_for
from .tracker import ContextTracker

if TYPE_CHECKING:
    from ..events import CompactionReason
    from ..providers.base import ModelConfig

__all__ = ["ContextWindow"]


class ContextWindow:
    """Per-run compaction state; see the module docstring."""

    def __init__(
        self,
        settings: CompactionConfig,
        model: ModelConfig | None,
        *,
        system_prompt: str | None,
        tools: Sequence[ToolDefinition] = (),
    ) -> None:
        self.settings = settings
        self.model = model
        self.tracker = ContextTracker()
        self.sent_tokens = 0
        self.compacted = False
        self._anchor = 0
        self._system_prompt = system_prompt or ""
        self._tools = tools

    async def start(self) -> None:
        """Resolve the settings for the model, load the counter (in a thread: a tokenizer may
        read a file) and measure the system prompt and tool definitions unless
        ``system_prompt_tokens`` was given."""
        settings = self.settings
        changes: dict[str, Any] = {}
        if settings.max_context_tokens is None and self.model is not None:
            changes["max_context_tokens"] = self.model.context_window
        counter = settings.token_counter
        if counter is None:
            counter = changes["token_counter"] = token_counter_for(self.model)
        warm = getattr(counter, "warm", None)
        if warm is not None:
            await asyncio.to_thread(warm)
        if settings.system_prompt_tokens is None:
            changes["system_prompt_tokens"] = counter.count_text(self._system_prompt) + sum(
                counter.count_text(json.dumps(t.model_dump(mode="json"))) for t in self._tools
            )
        if changes:  # one copy: a dataclass copy re-runs the validation
            self.settings = dataclasses.replace(settings, **changes)
        self.tracker = ContextTracker(counter)

    def fits(self, messages: Sequence[AgentMessage]) -> bool:
        """Whether ``messages`` can be sent as they are (the trigger does not fire); when they
        can, the next :meth:`record` anchors the reply's usage to them."""
        tokens = self.measure(messages)
        if self.settings.should_compact(tokens):
            return False
        self.compacted = False
        self.sent_tokens = tokens
        self._anchor = len(messages)
        return True

    def measure(self, messages: Sequence[AgentMessage]) -> int:
        """Tokens of a request carrying ``messages`` (reported usage + estimates)."""
        return self.tracker.estimate_context_tokens(messages, overhead=self.settings.reserved)

    async def view(
        self,
        messages: list[AgentMessage],
        *,
        before_start: Callable[[int, int], Any] | None = None,
        on_started: Callable[[int, int, CompactionReason], None] | None = None,
        on_compacted: Callable[[CompactionReport], Any] | None = None,
        overflow: bool = False,
    ) -> list[AgentMessage] | None:
        """The messages to send, compacted when the trigger fires (or, with ``overflow``,
        compacted harder unconditionally). None when compaction was needed and vetoed or could
        not shrink anything on an overflow."""
        tokens = self.measure(messages)
        settings = self.settings.harder(self.sent_tokens) if overflow else self.settings
        compactor = ContextCompactor(
            settings, before_start=before_start, on_started=on_started, on_compacted=on_compacted
        )
        out = await compactor(
            messages, request_tokens=tokens, reason="overflow" if overflow else "threshold"
        )
        if out is None:
            if overflow:
                return None
            self.compacted = False
            self.sent_tokens = tokens
            self._anchor = len(messages)
            return messages
        after = settings.reserved + messages_tokens(out, settings.counter)
        if overflow and after >= self.sent_tokens:
            return None
        self.compacted = True
        self.tracker.reset()
        self.sent_tokens = after
        return out

    def record(self, usage: Usage) -> None:
        """The reply to the last :meth:`view` reported ``usage``."""
        if not self.compacted:
            self.tracker.record_usage(usage, self._anchor + 1)

    def reset(self) -> None:
        """The working context was rewritten (pruned): estimate everything next time."""
        self.tracker.reset()

    def overflowed(self) -> None:
        """The provider rejected the last request as too long: from now on treat the window (in
        this counter's units) as no larger than what was sent."""
        window = min(self.settings.window, max(self.sent_tokens, 1))
        self.settings = dataclasses.replace(self.settings, max_context_tokens=window)
        self.tracker.reset()
