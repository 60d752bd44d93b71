from __future__ import annotations

import pytest

from phi_core.errors import ConfigError, UnknownModelError
from phi_core.providers import PRICES_AS_OF, known_providers, price_for, resolve_model
from phi_core.providers.compat import OpenAICompat
from phi_core.types import Pricing, Usage

EXPECTED = {
    "openai", "openai-responses", "anthropic", "google", "vertex", "azure", "bedrock", "openrouter",
    "ollama", "xai", "groq", "cerebras", "mistral", "deepseek", "vllm", "llamacpp", "openai-compat",
}  # fmt: skip


def test_every_documented_provider_resolves_without_a_key() -> None:
    assert {spec.name for spec in known_providers()} >= EXPECTED
    for name in sorted(EXPECTED - {"openai-compat"}):
        model = resolve_model(f"{name}:some-model")
        assert model.provider == name and model.id == "some-model"


@pytest.mark.parametrize(
    ("spec", "api", "base_url"),
    [
        ("openai:gpt-4o-mini", "openai_completions", "https://api.openai.com/v1"),
        ("anthropic:claude-haiku-4-5", "anthropic_messages", "https://api.anthropic.com"),
        ("google:gemini-2.0-flash", "google_generative_ai", None),
        ("vertex:gemini-2.5-pro", "google_vertex", None),
        ("azure:my-deployment", "azure_openai_responses", None),
        ("bedrock:amazon.nova-lite-v1:0", "bedrock_converse_stream", None),
        ("openrouter:openai/gpt-4o-mini", "openai_completions", "https://openrouter.ai/api/v1"),
        ("ollama:llama3.2", "openai_completions", "http://127.0.0.1:11434/v1"),
        ("llamacpp:smollm2", "openai_completions", "http://127.0.0.1:8080/v1"),
        (
            "openai-compat:my-model@http://127.0.0.1:8080/v1",
            "openai_completions",
            "http://127.0.0.1:8080/v1",
        ),
    ],
)
def test_model_strings_resolve_to_protocol_and_endpoint(
    spec: str, api: str, base_url: str | None
) -> None:
    model = resolve_model(spec)
    assert model.api == api and model.base_url == base_url


def test_known_models_carry_limits_and_table_prices() -> None:
    model = resolve_model("anthropic:claude-haiku-4-5-20251001")
    assert model.context_window == 200_000 and model.max_tokens == 64_000 and model.reasoning
    assert model.pricing == Pricing(input=1.0, output=5.0, cache_read=0.1, cache_write=1.25)
    assert resolve_model("openai:gpt-4o-mini").pricing.cache_read == 0.075
    assert resolve_model("openrouter:openai/gpt-4o-mini").pricing.input == 0.15
    assert resolve_model("bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0").pricing.input == 1.0
    assert price_for("ollama", "llama3.2") is None and PRICES_AS_OF


def test_pricing_can_be_overridden_per_model_config() -> None:
    model = resolve_model("openai:gpt-4o-mini", pricing=Pricing(input=1, output=2))
    assert model.pricing.input == 1.0 and model.pricing.output == 2.0


def test_cached_tokens_are_priced_as_the_vendor_bills_them() -> None:
    usage = Usage(input=1_000_000, output=1_000_000, cache_read=1_000_000, cache_write=1_000_000)
    # Anthropic haiku 4.5: $1 in, $5 out, reads 10 %, writes 125 %.
    assert usage.cost(resolve_model("anthropic:claude-haiku-4-5").pricing) == pytest.approx(
        1 + 5 + 0.1 + 1.25
    )
    # OpenAI gpt-4o-mini: cached reads at half price, no write surcharge.
    assert usage.cost(resolve_model("openai:gpt-4o-mini").pricing) == pytest.approx(
        0.15 + 0.6 + 0.075 + 0.15
    )


def test_unknown_provider_lists_the_known_ones_and_suggests_a_fix() -> None:
    with pytest.raises(UnknownModelError, match="Did you mean 'openai'") as info:
        resolve_model("opnai:gpt-4o")
    assert "anthropic" in str(info.value) and "bedrock" in str(info.value)


def test_openai_compat_without_a_url_says_how_to_give_one() -> None:
    with pytest.raises(UnknownModelError, match="@http://host:port/v1"):
        resolve_model("openai-compat:my-model")


def test_openai_compat_with_an_address_missing_its_scheme_shows_the_name_to_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_COMPAT_BASE_URL", raising=False)
    with pytest.raises(UnknownModelError) as caught:
        resolve_model("openai-compat:m1@localhost:8000/v1")
    message = str(caught.value)
    assert "needs its scheme" in message
    assert "`openai-compat:m1@http://localhost:8000/v1`" in message
    assert "/v1@http://host:port" not in message


def test_compat_flags_follow_the_preset_and_reject_unknown_names() -> None:
    assert OpenAICompat.for_model("mistral").requires_tool_result_name
    assert OpenAICompat.for_model("openai").max_tokens_field == "max_completion_tokens"
    assert (
        OpenAICompat.for_model(
            "groq", {"max_tokens_field": "max_completion_tokens"}
        ).max_tokens_field
        == "max_completion_tokens"
    )
    with pytest.raises(ConfigError, match="supports_magic"):
        OpenAICompat.for_model("openai", {"supports_magic": True})
