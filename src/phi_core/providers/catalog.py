"""The built-in providers and protocols (registered on first use of the registry)."""

from __future__ import annotations

from .base import ModelConfig
from .registry import ProviderSpec, register_protocol, register_provider


def _scripted_model(model: str) -> ModelConfig:
    return ModelConfig(provider="scripted", id=model, api="scripted")


def _scripted_factory(model: ModelConfig) -> object:
    from ..testing import ScriptedProvider

    return ScriptedProvider(name=model.spec)


register_provider(
    ProviderSpec(
        name="scripted",
        build=_scripted_model,
        description="test double: replies scripted in code (phi_core.testing.ScriptedProvider)",
    )
)
register_protocol("scripted", _scripted_factory)  # type: ignore[arg-type]
