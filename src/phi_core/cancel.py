"""Cooperative cancellation: a :class:`CancelToken` with child tokens, and a scope that turns a
token's cancellation into asyncio cancellation of the task doing the work.

A token can be cancelled from any coroutine (or from another thread with
:meth:`CancelToken.cancel_threadsafe`). Cancelling a token cancels all of its children, never its
parent. Inside ``async with token.scope() as scope:`` the current task is cancelled as soon as the
token is, so an ``await`` on a network stream, a tool or a back-off sleep stops at once; on exit the
scope swallows that cancellation and sets ``scope.cancelled`` so the caller can finish cleanly
(for the agent loop: stop reason ``aborted`` and exactly one ``AgentEnd``). A cancellation that
came from elsewhere (the task itself was cancelled) propagates untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

__all__ = ["CancelScope", "CancelToken"]


class CancelToken:
    """A cancellation flag that can be awaited, observed with callbacks, and nested."""

    __slots__ = ("_callbacks", "_children", "_event", "_parent", "reason")

    def __init__(self, parent: CancelToken | None = None) -> None:
        self._callbacks: list[Callable[[], None]] = []
        self._children: list[CancelToken] = []
        self._event: asyncio.Event | None = None
        self._parent = parent
        self.reason: str | None = None
        if parent is not None:
            parent._children.append(self)
            if parent.cancelled:
                self.reason = parent.reason

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def child(self) -> CancelToken:
        """A token cancelled together with this one, that can also be cancelled on its own."""
        return CancelToken(self)

    def cancel(self, reason: str = "cancelled") -> None:
        if self.reason is not None:
            return
        self.reason = reason
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()
        for child in list(self._children):  # children unlink themselves while cancelling
            child.cancel(reason)
        if self._parent is not None:
            with contextlib.suppress(ValueError):
                self._parent._children.remove(self)

    def cancel_threadsafe(self, loop: asyncio.AbstractEventLoop, reason: str = "cancelled") -> None:
        loop.call_soon_threadsafe(self.cancel, reason)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when cancelled (at once if already). Returns an unregister function."""
        if self.cancelled:
            callback()
            return lambda: None
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    async def wait(self) -> None:
        if self.cancelled:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()

    def detach(self) -> None:
        """Stop receiving the parent's cancellation (for tokens that outlive their parent's use)."""
        if self._parent is not None:
            with contextlib.suppress(ValueError):
                self._parent._children.remove(self)
            self._parent = None

    @contextlib.asynccontextmanager
    async def scope(self) -> AsyncIterator[CancelScope]:
        """Run a block that this token can interrupt; see the module docstring."""
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - always inside a task under asyncio.run
            raise RuntimeError("CancelToken.scope() must be used inside an asyncio task")
        scope = CancelScope()

        def deliver() -> None:
            if scope._active:
                scope._requested = True
                task.cancel(msg="phi-core cancel token")

        def fire() -> None:
            # Cancelled from inside the task itself: deliver at its next await, not mid-step.
            if asyncio.current_task() is task:
                asyncio.get_running_loop().call_soon(deliver)
            else:
                deliver()

        scope._active = True
        # a token cancelled already fires at once: the block stops at its first await
        remove = self.on_cancel(fire)
        try:
            yield scope
        except asyncio.CancelledError:
            if not scope._requested:
                raise
            if task.uncancel() > 0:  # someone else cancelled us as well: propagate
                raise
            scope.cancelled = True
        finally:
            scope._active = False
            remove()
        if self.cancelled:
            scope.cancelled = True


@dataclass
class CancelScope:
    cancelled: bool = False
    _requested: bool = False
    _active: bool = False
