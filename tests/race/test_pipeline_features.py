"""A bandit race featurises a long query off the event loop, and a featuriser that raises still
ends the race with exactly one end event."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from phi_core.race import BanditRace
from phi_core.routing import LinUCBRouter, MemoryStateStore
from phi_core.testing import ScriptedProvider

from .test_pipeline import DIM, arm


class Recording:
    """Features that record the thread they were computed on (and can fail)."""

    def __init__(self, fail: bool = False) -> None:
        self.threads: list[int] = []
        self.fail = fail
        self.dim = DIM
        self.schema = f"recording:dim={DIM}"

    def __call__(self, query: str) -> Any:
        self.threads.append(threading.get_ident())
        if self.fail:
            raise ValueError("featuriser broke")
        return np.ones(DIM) / np.sqrt(DIM)


def race_with(features: Recording) -> BanditRace:
    arms = [arm(n, ScriptedProvider(default=f"answer {n}")) for n in "ab"]
    return BanditRace(
        arms, LinUCBRouter(DIM, alpha=0.5), features=features, store=MemoryStateStore()
    )


async def test_a_long_query_is_featurised_off_the_event_loop(strict_loop):
    features = Recording()
    race = race_with(features)
    await race.run("short question")
    await race.run("a long document " * 10_000)
    loop_thread = threading.get_ident()
    assert features.threads[0] == loop_thread  # a short one costs less than a thread hop
    assert features.threads[1] != loop_thread


async def test_a_featuriser_that_raises_still_ends_the_race_once(strict_loop):
    events: list[Any] = []
    with pytest.raises(ValueError, match="featuriser broke"):
        await race_with(Recording(fail=True)).run("q", events=events.append)
    [end] = [e for e in events if e.type == "bandit_race_end"]
    # the run raised: its status says so, not "all_failed" (the arms never ran)
    assert end.status == "error" and end.error == "ValueError: featuriser broke"
