"""Selection through the real embedded model: usage is metered from the provider, the cache answers reruns."""

from __future__ import annotations

from pathlib import Path

import pytest

from phi_core.select import MeteredModel, ModelSelector, ResponseCache

pytestmark = pytest.mark.local_model


async def test_selection_with_the_local_model_meters_tokens_and_caches_replies(
    tmp_path: Path,
) -> None:
    cache = ResponseCache(tmp_path / "cache.sqlite")
    candidates = [
        MeteredModel("local:smollm2", name="smollm2@short", max_tokens=4, seed=1),
        MeteredModel("local:smollm2", name="smollm2@long", max_tokens=12, seed=1),
    ]

    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        return await models["solver"].complete(question)

    def scorer(expected: str, actual: str) -> float:
        return float(expected.lower() in actual.lower())

    data = [("What is the capital of France?", "Paris"), ("What colour is the sky?", "blue")]
    selector = ModelSelector(
        agent, {"solver": candidates}, data, scorer, algorithm="brute_force", cache=cache, seed=0
    )
    first = await selector.select_best()
    assert first.evaluations == 4
    assert all(c.output_tokens > 0 and c.input_tokens > 0 for c in first.combinations)
    assert cache.misses == 4 and len(cache) == 4
    again = await selector.select_best()
    assert cache.hits == 4
    assert {(c.name, c.accuracy, c.output_tokens) for c in again.combinations} == {
        (c.name, c.accuracy, c.output_tokens) for c in first.combinations
    }
