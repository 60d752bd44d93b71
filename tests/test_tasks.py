"""``run_all``: a task group that raises a child's failure as itself and leaves the caller's
cancel state alone (Python 3.11's ``TaskGroup`` wraps it in a group and can leave a cancel
request on the caller)."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from phi_core._tasks import run_all


class Boom(BaseException):
    """Not an Exception."""


def cancelling() -> int:
    task = asyncio.current_task()
    assert task is not None
    return task.cancelling()


async def value(v: int, delay: float = 0.0) -> int:
    await asyncio.sleep(delay)
    return v


async def test_results_come_back_in_the_order_given(strict_loop):
    assert await run_all([value(1, 0.03), value(2, 0.0), value(3, 0.01)]) == [1, 2, 3]
    assert await run_all([]) == []


@pytest.mark.parametrize("fault", [ValueError("bad"), Boom("kaboom"), asyncio.CancelledError()])
async def test_a_failure_is_raised_as_itself_and_the_siblings_are_cancelled(fault, strict_loop):
    cancelled: list[str] = []

    async def slow(name: str) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    async def fails() -> None:
        await asyncio.sleep(0.01)
        raise fault

    with pytest.raises(type(fault)) as raised:
        await run_all([slow("a"), fails(), slow("b")])
    assert raised.value is fault  # not an exception group
    assert sorted(cancelled) == ["a", "b"]
    assert cancelling() == 0  # the caller is not left looking cancelled
    assert await value(5, 0.001) == 5  # and it can go on awaiting


async def test_pick_chooses_among_several_failures(strict_loop):
    async def fails() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("first")

    async def cleanup_fails() -> None:  # its clean-up on cancellation fails too
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise KeyError("second") from None

    seen: list[list[str]] = []

    def pick(failures):
        seen.append([type(f).__name__ for f in failures])
        return failures[-1]

    with pytest.raises(KeyError):
        await run_all([fails(), cleanup_fails()], pick=pick)
    assert seen == [["ValueError", "KeyError"]]
    with pytest.raises(ValueError):  # without pick: the first
        await run_all([fails(), cleanup_fails()])


async def test_a_stop_is_raised_after_every_sibling_has_ended(strict_loop):
    ended: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            ended.append("slow")

    async def stop() -> None:
        raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt):
        await run_all([slow(), stop()])
    assert ended == ["slow"]
    assert cancelling() == 0


async def test_cancelling_the_caller_cancels_every_child(strict_loop):
    started = asyncio.Event()
    ended: list[int] = []

    async def slow(k: int) -> None:
        started.set()
        try:
            await asyncio.sleep(10)
        finally:
            ended.append(k)

    task = asyncio.create_task(run_all([slow(1), slow(2)]))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(ended) == [1, 2]


async def test_coroutines_cancelled_before_they_start_are_closed_without_a_warning(strict_loop):
    async def fails() -> None:
        raise ValueError("at once")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError):
            await run_all([fails(), *(value(k, 1.0) for k in range(5))])
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_an_observer_added_as_a_bound_method_is_removed_by_an_equal_one() -> None:
    from phi_core.events import Emitter, add_observer, remove_observer

    class Watcher:
        def __init__(self) -> None:
            self.seen: list[object] = []

        def on_event(self, event: object) -> None:
            self.seen.append(event)

    watcher = Watcher()
    before = Emitter(None).active
    add_observer(watcher.on_event)
    assert Emitter(None).active
    remove_observer(watcher.on_event)  # a new bound method object, equal to the one added
    assert Emitter(None).active == before
