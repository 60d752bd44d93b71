"""qualify_model_name: a bare model name resolved through the catalog (issue 14's seed
compatibility, reused by `-m gpt-4o` later)."""

from __future__ import annotations

import pytest

from phi_core.errors import AmbiguousModelError, UnknownModelError
from phi_core.providers import registry
from phi_core.providers.base import ModelConfig
from phi_core.providers.registry import ProviderSpec, qualify_model_name


@pytest.mark.parametrize(
    ("name", "qualified"),
    [
        ("gpt-4o", "openai:gpt-4o"),
        ("claude-haiku-4-5", "anthropic:claude-haiku-4-5"),
        ("gemini-2.0-flash", "google:gemini-2.0-flash"),
        ("deepseek-chat", "deepseek:deepseek-chat"),
        ("smollm2", "local:smollm2"),
        ("  grok-4 ", "xai:grok-4"),
    ],
)
def test_a_bare_name_one_provider_offers_gets_that_provider(name: str, qualified: str) -> None:
    assert qualify_model_name(name) == qualified


def test_a_dated_snapshot_belongs_to_its_family_but_a_longer_word_does_not() -> None:
    assert qualify_model_name("gpt-4o-2024-08-06") == "openai:gpt-4o-2024-08-06"
    assert qualify_model_name("o4-mini-deep-research-2025-06-26") == (
        "openai:o4-mini-deep-research-2025-06-26"
    )
    with pytest.raises(UnknownModelError):
        qualify_model_name("gpt-4oo")


def test_another_api_of_the_same_vendor_gives_way_to_the_vendors_own_provider() -> None:
    # gpt-5 is listed by both `openai` and `openai-responses` (the same models, another API).
    assert qualify_model_name("gpt-5") == "openai:gpt-5"
    assert qualify_model_name("gemini-2.5-pro") == "google:gemini-2.5-pro"  # not vertex


def test_a_name_with_a_known_provider_prefix_is_returned_unchanged() -> None:
    assert qualify_model_name("openai-compat:m@http://127.0.0.1:9/v1") == (
        "openai-compat:m@http://127.0.0.1:9/v1"
    )
    assert qualify_model_name("local:smollm2") == "local:smollm2"


def test_an_ambiguous_name_lists_every_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.known_providers()  # the built-ins are registered
    monkeypatch.setitem(
        registry._PROVIDERS,
        "acme",
        ProviderSpec(
            name="acme",
            build=lambda m: ModelConfig(provider="acme", id=m, api="scripted"),
            models=("gpt-4o",),
        ),
    )
    with pytest.raises(AmbiguousModelError) as info:
        qualify_model_name("gpt-4o")
    assert info.value.candidates == ("acme:gpt-4o", "openai:gpt-4o")
    assert "acme:gpt-4o, openai:gpt-4o" in str(info.value)


def test_an_unknown_name_suggests_close_ones_and_the_provider_form() -> None:
    with pytest.raises(UnknownModelError, match=r"Did you mean 'gpt-4o'") as info:
        qualify_model_name("gtp-4o")
    assert "provider:model" in str(info.value) and "phi models" in str(info.value)
    with pytest.raises(UnknownModelError, match="empty"):
        qualify_model_name("  ")
