"""`select_best(on_evaluation=...)`: a progress report per finished evaluation, not per batch
(what `phi select`'s progress bar, ETA and running cost are drawn from)."""

from __future__ import annotations

import asyncio

from phi_core.cli.select import _Tally
from phi_core.select import Evaluation

from .agents import good_and_bad_selector


async def test_every_evaluation_is_reported_as_it_finishes_not_once_per_batch() -> None:
    selector = good_and_bad_selector(5)  # brute force: one batch holding every cell
    batches: list[int] = []
    seen: list[tuple[int, int, float]] = []
    result = await selector.select_best(
        on_progress=lambda arena: batches.append(arena.evaluations),
        on_evaluation=lambda k, i, e: seen.append((k, i, e.score)),
    )
    assert batches == [10]
    assert len(seen) == 10 == result.evaluations
    assert {(k, i) for k, i, _ in seen} == {(k, i) for k in range(2) for i in range(5)}
    assert sorted(score for _, _, score in seen) == [0.0] * 5 + [1.0] * 5


def test_the_tally_sums_what_was_paid_and_bounds_the_time_left() -> None:
    tally = _Tally(most=10)
    assert tally.eta() == ""
    for n in range(1, 5):
        tally.add(Evaluation(config_id="c", score=1.0, cost_usd=0.01, spent_usd=0.002), n * 3.0)
    assert tally.done == 4 and round(tally.spent, 6) == 0.008  # paid, not the list price
    assert tally.eta() == "≤ 0:18 left"  # 6 more at 3 s each, at most


async def test_a_callback_that_raises_stops_the_run_with_its_own_error() -> None:
    """The caller's own exception, not nested exception groups, and the caller's task is left
    as it was (Python 3.11's TaskGroup can leave a cancel request on it)."""
    selector = good_and_bad_selector(5)

    def broken(k: int, i: int, e: Evaluation) -> None:
        raise ValueError("progress bar broke")

    try:
        await selector.select_best(on_evaluation=broken)
    except ValueError as error:
        assert str(error) == "progress bar broke"
    else:
        raise AssertionError("the callback's error was swallowed")
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
