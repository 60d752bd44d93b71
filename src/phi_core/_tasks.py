"""Structured concurrency helpers shared by the engines.

``asyncio.TaskGroup`` wraps whatever a child raises in a ``BaseExceptionGroup`` and, on Python
3.11, can leave its own cancel request on the calling task when a child fails while the group
waits for the others — later ``Task.cancelling()`` checks then take the caller for a task being
cancelled. :func:`run_all` keeps the group's guarantees (every child awaited or cancelled before
it returns) without either effect.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

__all__ = ["STOPS", "being_cancelled", "is_real_cancellation", "run_all"]

T = TypeVar("T")

STOPS = (KeyboardInterrupt, SystemExit)
"""What a child raises that still stops the whole operation: it is recorded, the other tasks are
ended, then it is raised again. Anything else a task raises is the task's own failure."""


def being_cancelled() -> bool:
    """Whether the current task has a cancel request pending (``Task.cancelling()``)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def is_real_cancellation(exc: BaseException) -> bool:
    """``exc`` is a ``CancelledError`` raised while the current task is being cancelled.

    Any other ``CancelledError`` (a provider, tool or hook raising one although nothing cancelled
    the task) is a fault of whatever raised it, to be captured like any exception.
    """
    return isinstance(exc, asyncio.CancelledError) and being_cancelled()


async def run_all(
    coros: Iterable[Coroutine[Any, Any, T]],
    *,
    pick: Callable[[Sequence[BaseException]], BaseException] | None = None,
) -> list[T]:
    """Run ``coros`` concurrently and return their results in order.

    The first child to fail (any exception, a ``BaseException`` or a stray ``CancelledError``
    included) cancels the others; once every child has ended, a failure is raised as itself —
    ``pick(failures)`` chooses which when several failed (default: the first). A cancellation of
    the caller cancels every child and propagates. No child's failure reaches the task group, so
    the group never cancels the caller: its ``Task.cancelling()`` count is left as it was.
    """
    pending = list(coros)
    results: list[Any] = [None] * len(pending)
    failures: list[BaseException] = []
    tasks: list[asyncio.Task[None]] = []

    async def child(k: int, coro: Coroutine[Any, Any, T]) -> None:
        try:
            results[k] = await coro
        except BaseException as exc:
            if is_real_cancellation(exc):
                raise
            failures.append(exc)
            for task in tasks:
                if task is not asyncio.current_task():
                    task.cancel()

    try:
        async with asyncio.TaskGroup() as group:
            for k, coro in enumerate(pending):
                tasks.append(group.create_task(child(k, coro)))
    finally:
        for coro in pending:  # one whose task was cancelled before it started: no warning
            if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == "CORO_CREATED":
                coro.close()
    if failures:
        raise pick(failures) if pick is not None else failures[0]
    return results
