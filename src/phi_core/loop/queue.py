"""Steering and follow-up queues with phi-core's two modes."""

from __future__ import annotations

import threading
from collections import deque
from typing import Literal

from ..types import AgentMessage, UserMessage

__all__ = ["MessageQueue", "QueueMode"]

QueueMode = Literal["one_at_a_time", "all"]


class MessageQueue:
    """A thread-safe queue whose :meth:`get` is a steering / follow-up getter for the loop.

    ``one_at_a_time`` (the default) hands out one message per poll; ``all`` drains the queue.
    """

    def __init__(self, mode: QueueMode = "one_at_a_time") -> None:
        if mode not in ("one_at_a_time", "all"):
            raise ValueError(f"mode must be 'one_at_a_time' or 'all', got {mode!r}.")
        self.mode: QueueMode = mode
        self._items: deque[AgentMessage] = deque()
        self._lock = threading.Lock()

    def push(self, message: AgentMessage | str) -> None:
        item = UserMessage.text(message) if isinstance(message, str) else message
        with self._lock:
            self._items.append(item)

    def get(self) -> list[AgentMessage]:
        with self._lock:
            if not self._items:
                return []
            if self.mode == "one_at_a_time":
                return [self._items.popleft()]
            items = list(self._items)
            self._items.clear()
            return items

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
