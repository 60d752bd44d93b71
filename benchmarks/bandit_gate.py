"""Does the bandit race stop racing everything once it is sure, and only then?

"Race only when unsure": a bandit race skips its previews (action ``sure``) when the favourite
is clearly ahead of the arms a race would preview. This replays streams of varied queries through
:class:`~phi_core.race.BanditRace` with the CLI's defaults (LinUCB, alpha 1.0, 64 hashed features,
three arms, two previewed) against scripted arms whose judged quality is fixed, and reports:

- ``far``: arms of quality 0.95 / 0.5 / 0.1 — the first race that skips, how many skip; then the
  favourite degrades to 0.05 and we count the races until racing resumes;
- ``close``: 0.55 / 0.5 / 0.45 with judge noise (sd 0.15) — no race should skip;
- ``equal``: 0.5 / 0.5 / 0.5 with the same noise — no race should skip.

No model, no network: the arms and the judge are the scripted test double. Run::

    .venv/bin/python benchmarks/bandit_gate.py --races 1500 --after 300 \\
        --out benchmarks/results/bandit_gate
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from phi_core.loop import AgentLoopConfig
from phi_core.parallel import shown_candidates
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.race import Arm, BanditRace
from phi_core.routing import HashedFeatures, LinUCBRouter, MemoryStateStore
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import message_text

QUERIES = [
    "What is the capital of {}?",
    "Explain how {} works in two sentences.",
    "Give me three facts about {}.",
    "Translate the word {} into French.",
    "Is {} bigger than a house?",
]
TOPICS = ["France", "photosynthesis", "a bicycle", "the moon", "Python", "tea", "rain", "glass",
          "Peru", "a violin", "TCP", "chess", "honey", "Mars", "a bridge", "salt", "Kenya"]  # fmt: skip

WORLDS: dict[str, dict[str, Any]] = {
    "far": {"quality": {"good": 0.95, "fair": 0.5, "poor": 0.1}, "noise": 0.0},
    "close": {"quality": {"good": 0.55, "fair": 0.5, "poor": 0.45}, "noise": 0.15},
    "equal": {"quality": {"a": 0.5, "b": 0.5, "c": 0.5}, "noise": 0.15},
}


def query(i: int) -> str:
    """85 distinct queries, cycled."""
    return QUERIES[i % len(QUERIES)].format(TOPICS[(i * 7) % len(TOPICS)])


def config(name: str, provider: ScriptedProvider) -> AgentLoopConfig:
    model = ModelConfig(provider="test", id=name, api="scripted")
    return AgentLoopConfig(model=model, provider=provider)


class Judge:
    """A rubric judge scoring each answer by its arm's quality (plus noise), clipped to [0, 1]."""

    def __init__(self, quality: dict[str, float], noise: float, seed: int) -> None:
        self.quality = quality
        self.noise = noise
        self.rng = random.Random(seed)

    def __call__(self, request: StreamRequest) -> Reply:
        text = message_text(request.messages[-1])
        answers = list(shown_candidates(text, "Answer").items())
        scores = []
        for n, body in answers:
            q = self.quality[body.split()[-1]] + self.rng.gauss(0.0, self.noise)
            s = min(1.0, max(0.0, q))
            scores.append(
                {"answer": int(n), "reason": "r", "relevance": s, "coverage": s, "faithfulness": s}
            )
        return Reply(json.dumps({"scores": scores}))


async def replay(world: str, races: int, after: int, seed: int) -> dict[str, Any]:
    spec = WORLDS[world]
    quality = dict(spec["quality"])
    judge = Judge(quality, spec["noise"], seed)
    arms = [Arm(a, config(a, ScriptedProvider(default=f"answer from {a}"))) for a in quality]
    race = BanditRace(
        arms,
        LinUCBRouter(64, alpha=1.0),
        judge=config("judge", ScriptedProvider(default=judge)),
        features=HashedFeatures(64),
        store=MemoryStateStore(),
    )
    actions: list[str] = []
    for i in range(races):
        actions.append((await race.run(query(i))).action)
    out: dict[str, Any] = {
        "world": world,
        "quality": dict(spec["quality"]),
        "judge_noise": spec["noise"],
        "races": races,
        "first_sure": next((i for i, a in enumerate(actions) if a == "sure"), None),
        "sure": actions.count("sure"),
        "sure_in_last_500": actions[-500:].count("sure"),
    }
    if world == "far" and after:
        best = max(quality, key=quality.__getitem__)
        quality[best] = 0.05  # the favourite degrades badly
        later = [(await race.run(query(races + i))).action for i in range(after)]
        out["after_degrading"] = {
            "races": after,
            "sure_before_racing_again": next((i for i, a in enumerate(later) if a != "sure"), None),
            "sure": later.count("sure"),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--races", type=int, default=1500)
    parser.add_argument("--after", type=int, default=300, help="races after the favourite degrades")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worlds", default=",".join(WORLDS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = []
    for world in args.worlds.split(","):
        started = time.perf_counter()
        result = asyncio.run(replay(world, args.races, args.after, args.seed))
        result["wall_s"] = round(time.perf_counter() - started, 1)
        results.append(result)
        print(json.dumps(result))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
