"""A run log holding real recordings (a judged race with a failed branch and a model-written
``<script>``, a bandit race with its router state, a selection), made by the same
:class:`RunRecorder` the CLI uses, with scripted providers (test doubles)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phi_core.config import plan_race
from phi_core.errors import AuthError
from phi_core.race import BanditOptions
from phi_core.runlog import RunLog, RunRecorder
from phi_core.testing import Fail, Reply, ScriptedProvider
from phi_core.types import Usage

from ..select.agents import good_and_bad_selector

XSS = '<script>window.__phi_xss = 1</script><img src="x" onerror="window.__phi_xss = 2">'
"""What a hostile (or confused) model might answer; the view must show it as text."""
RUBRIC = json.dumps(
    {
        "scores": [
            {"answer": 1, "reason": "r", "relevance": 0.9, "coverage": 0.9, "faithfulness": 0.9},
            {"answer": 2, "reason": "r", "relevance": 0.2, "coverage": 0.2, "faithfulness": 0.2},
        ]
    }
)


@dataclass(frozen=True)
class Recorded:
    log_path: Path
    state: str
    race_id: str
    bandit_id: str
    select_id: str
    namespace: str


def _providers(**replies: Any) -> dict[str, ScriptedProvider]:
    return {
        f"scripted:{name}": ScriptedProvider(name=name, default=reply)
        for name, reply in replies.items()
    }


async def record_all(root: Path) -> Recorded:
    log_path = root / "logs.db"
    state = str(root / "router.sqlite")
    with RunLog(log_path) as log:
        race = plan_race(
            models=["scripted:a", "scripted:b", "scripted:c"],
            judge="scripted:judge",
            providers=_providers(
                a=Reply(f"A answers: {XSS}", usage=Usage(input=12, output=30)),
                b=Reply(
                    "B: entanglement links two particles' states.", usage=Usage(input=12, output=9)
                ),
                c=Fail(AuthError("bad credentials")),
                judge=Reply("2"),
            ),
        )
        recorder = RunRecorder(log, prompt="Explain entanglement.", plan=race, conversation_id="c1")
        race_id = recorder.finish(await race.run("Explain entanglement.", events=recorder)).id

        bandit = plan_race(
            models=["scripted:a", "scripted:b"],
            judge="scripted:judge",
            strategy="bandit",
            bandit=BanditOptions(state=state, top_k=2),
            providers=_providers(a=Reply("Answer A."), b=Reply("Answer B."), judge=Reply(RUBRIC)),
        )
        recorder = RunRecorder(log, prompt="Which one?", plan=bandit)
        bandit_record = recorder.finish(await bandit.run("Which one?", events=recorder))

        recorder = RunRecorder(log, prompt="phi select spec.toml")
        select_id = recorder.finish(await good_and_bad_selector().select_best()).id
    namespace = bandit_record.route_events[0].namespace
    return Recorded(log_path, state, race_id, bandit_record.id, select_id, namespace)


@pytest.fixture
async def recorded(tmp_path: Path, strict_loop: list[dict[str, Any]]) -> Recorded:
    """The recordings, made on a strict loop (no task left running, no unretrieved error)."""
    return await record_all(tmp_path)
