"""CancelToken: children, callbacks, and the scope that interrupts awaits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phi_core.cancel import CancelToken


def test_cancelling_a_parent_cancels_every_child_but_not_the_reverse() -> None:
    parent = CancelToken()
    children = [parent.child() for _ in range(4)]
    grandchild = children[1].child()
    children[0].cancel("one child")
    assert not parent.cancelled
    parent.cancel("all")
    assert all(c.cancelled for c in children)
    assert grandchild.cancelled and grandchild.reason == "all"
    assert CancelToken(parent).cancelled  # a child of a cancelled token starts cancelled


def test_callbacks_fire_once_and_can_be_unregistered() -> None:
    token = CancelToken()
    fired: list[str] = []
    remove = token.on_cancel(lambda: fired.append("a"))
    token.on_cancel(lambda: fired.append("b"))
    remove()
    token.cancel()
    token.cancel()
    assert fired == ["b"]


async def test_scope_interrupts_an_await_and_reports_it(strict_loop: list[Any]) -> None:
    token = CancelToken()
    asyncio.get_running_loop().call_soon(token.cancel)
    async with token.scope() as scope:
        await asyncio.Event().wait()
    assert scope.cancelled


async def test_scope_lets_outside_cancellation_propagate(strict_loop: list[Any]) -> None:
    token = CancelToken()

    async def work() -> None:
        async with token.scope():
            await asyncio.Event().wait()

    task = asyncio.create_task(work())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not token.cancelled


async def test_cancelling_from_inside_the_scope_stops_at_the_next_await(
    strict_loop: list[Any],
) -> None:
    token = CancelToken()
    reached: list[str] = []
    async with token.scope() as scope:
        token.cancel()
        reached.append("still running synchronously")
        await asyncio.sleep(3600)
        reached.append("never")
    assert scope.cancelled and reached == ["still running synchronously"]
    await asyncio.sleep(0)  # no stray cancellation is left pending on the task
