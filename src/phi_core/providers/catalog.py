"""The built-in providers and protocols (registered on first use of the registry).

Every ``provider:model`` name resolves here to a :class:`ModelConfig` (protocol, base URL, key
variable, context window, output limit, prices, compat flags). Nothing here needs a key or an SDK:
keys are looked up, and SDKs imported, when a provider is built for a call, so ``phi models`` can
list everything on a machine without keys.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import MissingExtraError, UnknownModelError
from .base import ApiProtocol, ModelConfig, Provider
from .pricing import price_for
from .registry import ProviderSpec, register_protocol, register_provider

__all__ = ["MODEL_INFO", "ModelInfo"]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    context_window: int
    max_tokens: int
    reasoning: bool = False


# Known model families (id prefix → limits). Longest matching prefix wins.
MODEL_INFO: dict[str, ModelInfo] = {
    "gpt-5": ModelInfo(400_000, 128_000, True),
    "gpt-4.1": ModelInfo(1_047_576, 32_768),
    "gpt-4o": ModelInfo(128_000, 16_384),
    "o3": ModelInfo(200_000, 100_000, True),
    "o4-mini": ModelInfo(200_000, 100_000, True),
    "claude-opus-4-5": ModelInfo(200_000, 64_000, True),
    "claude-opus-4": ModelInfo(200_000, 32_000, True),
    "claude-sonnet-4": ModelInfo(200_000, 64_000, True),
    "claude-3-7-sonnet": ModelInfo(200_000, 64_000, True),
    "claude-haiku-4-5": ModelInfo(200_000, 64_000, True),
    "claude-3-5-haiku": ModelInfo(200_000, 8_192),
    "claude-3-haiku": ModelInfo(200_000, 4_096),
    "gemini-2.5": ModelInfo(1_048_576, 65_536, True),
    "gemini-2.0": ModelInfo(1_048_576, 8_192),
    "grok-4": ModelInfo(256_000, 64_000, True),
    "grok-3-mini": ModelInfo(131_072, 16_384, True),
    "grok-3": ModelInfo(131_072, 16_384),
    "deepseek-chat": ModelInfo(128_000, 8_192),
    "deepseek-reasoner": ModelInfo(128_000, 64_000, True),
    "llama-3.3-70b": ModelInfo(128_000, 32_768),
    "llama-3.1-8b": ModelInfo(128_000, 8_192),
    "anthropic.claude": ModelInfo(200_000, 8_192, True),
    "amazon.nova": ModelInfo(300_000, 10_000),
}


def _info(model: str) -> ModelInfo | None:
    base = model.rsplit("/", 1)[-1]
    for head in ("us.", "eu.", "apac.", "global."):
        if base.startswith(head):
            base = base[len(head) :]
    best = max((k for k in MODEL_INFO if base.startswith(k)), key=len, default=None)
    return MODEL_INFO[best] if best else None


@dataclass(frozen=True, slots=True)
class _Vendor:
    name: str
    api: ApiProtocol
    description: str
    base_url: str | None = None
    base_url_env: str | None = None
    key_env: str | None = None
    models: tuple[str, ...] = ()
    default_context: int = 128_000
    default_max_tokens: int = 4_096
    variant_of: str | None = None

    def build(self, model: str) -> ModelConfig:
        info = _info(model)
        base_url = self.base_url
        if self.base_url_env:
            base_url = os.environ.get(self.base_url_env) or base_url
        pricing = price_for(self.name, model)
        return ModelConfig(
            provider=self.name,
            id=model,
            api=self.api,
            base_url=base_url,
            api_key_env=self.key_env,
            context_window=info.context_window if info else self.default_context,
            max_tokens=info.max_tokens if info else self.default_max_tokens,
            reasoning=info.reasoning if info else False,
            **({"pricing": pricing} if pricing else {}),
        )


VENDORS: tuple[_Vendor, ...] = (
    _Vendor(
        "openai",
        "openai_completions",
        "OpenAI Chat Completions",
        "https://api.openai.com/v1",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        ("gpt-4o-mini", "gpt-4o", "gpt-4.1-mini", "gpt-5-mini", "o4-mini"),
    ),
    _Vendor(
        "openai-responses",
        "openai_responses",
        "OpenAI Responses API",
        "https://api.openai.com/v1",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        ("gpt-5-mini", "gpt-5", "o4-mini"),
        variant_of="openai",
    ),
    _Vendor(
        "azure",
        "azure_openai_responses",
        "Azure OpenAI (model = deployment name; set AZURE_OPENAI_ENDPOINT)",
        None,
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_API_KEY",
        variant_of="openai",
    ),
    _Vendor(
        "anthropic",
        "anthropic_messages",
        "Anthropic Messages",
        "https://api.anthropic.com",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_API_KEY",
        ("claude-haiku-4-5", "claude-sonnet-4-5", "claude-opus-4-5"),
        200_000,
        8_192,
    ),
    _Vendor(
        "google",
        "google_generative_ai",
        "Google Gemini API",
        None,
        "GOOGLE_GEMINI_BASE_URL",
        "GEMINI_API_KEY",
        ("gemini-2.0-flash", "gemini-2.5-flash", "gemini-2.5-pro"),
        1_048_576,
        8_192,
    ),
    _Vendor(
        "vertex",
        "google_vertex",
        "Google Vertex AI (GOOGLE_CLOUD_PROJECT/GOOGLE_CLOUD_LOCATION or an express key)",
        None,
        "GOOGLE_VERTEX_BASE_URL",
        "GOOGLE_API_KEY",
        ("gemini-2.5-flash", "gemini-2.5-pro"),
        1_048_576,
        8_192,
        variant_of="google",
    ),
    _Vendor(
        "bedrock",
        "bedrock_converse_stream",
        "AWS Bedrock Converse (AWS credential chain; AWS_REGION)",
        None,
        "BEDROCK_ENDPOINT_URL",
        None,
        ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "amazon.nova-lite-v1:0"),
    ),
    _Vendor(
        "openrouter",
        "openai_completions",
        "OpenRouter (vendor/model names)",
        "https://openrouter.ai/api/v1",
        None,
        "OPENROUTER_API_KEY",
        ("openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"),
    ),
    _Vendor(
        "xai",
        "openai_completions",
        "xAI Grok",
        "https://api.x.ai/v1",
        None,
        "XAI_API_KEY",
        ("grok-4", "grok-3-mini"),
    ),
    _Vendor(
        "groq",
        "openai_completions",
        "Groq",
        "https://api.groq.com/openai/v1",
        None,
        "GROQ_API_KEY",
        ("llama-3.3-70b-versatile", "llama-3.1-8b-instant"),
    ),
    _Vendor(
        "cerebras",
        "openai_completions",
        "Cerebras",
        "https://api.cerebras.ai/v1",
        None,
        "CEREBRAS_API_KEY",
        ("llama3.1-8b", "gpt-oss-120b"),
    ),
    _Vendor(
        "mistral",
        "openai_completions",
        "Mistral",
        "https://api.mistral.ai/v1",
        None,
        "MISTRAL_API_KEY",
        ("mistral-small-latest", "mistral-large-latest"),
    ),
    _Vendor(
        "deepseek",
        "openai_completions",
        "DeepSeek",
        "https://api.deepseek.com/v1",
        None,
        "DEEPSEEK_API_KEY",
        ("deepseek-chat", "deepseek-reasoner"),
    ),
    _Vendor(
        "ollama",
        "openai_completions",
        "Ollama (local server, no key)",
        "http://127.0.0.1:11434/v1",
        "OLLAMA_BASE_URL",
        None,
    ),
    _Vendor(
        "vllm",
        "openai_completions",
        "vLLM server (VLLM_BASE_URL, no key)",
        "http://127.0.0.1:8000/v1",
        "VLLM_BASE_URL",
        None,
    ),
    _Vendor(
        "llamacpp",
        "openai_completions",
        "llama.cpp server (LLAMACPP_BASE_URL, no key)",
        "http://127.0.0.1:8080/v1",
        "LLAMACPP_BASE_URL",
        None,
    ),
)


def _openai_compat_model(model: str) -> ModelConfig:
    """``openai-compat:my-model@http://host:port/v1`` (or OPENAI_COMPAT_BASE_URL)."""
    name, base_url = model, os.environ.get("OPENAI_COMPAT_BASE_URL")
    for scheme in ("@http://", "@https://"):
        at = model.rfind(scheme)
        if at > 0:
            name, base_url = model[:at], model[at + 1 :]
            break
    head, sep, address = model.rpartition("@")
    if base_url is None and sep and head and "://" not in address:
        raise UnknownModelError(  # `m@localhost:8000/v1`: the scheme was left out
            f"`openai-compat:{model}`: the server address after '@' needs its scheme; write "
            f"`openai-compat:{head}@http://{address}` (or https://)."
        )
    if not base_url:
        raise UnknownModelError(
            f"`openai-compat:{model}` names no server: write `openai-compat:{model}@http://host:port/v1` "
            f"or set OPENAI_COMPAT_BASE_URL."
        )
    return ModelConfig(
        provider="openai-compat",
        id=name,
        api="openai_completions",
        base_url=base_url,
        api_key_env="OPENAI_COMPAT_API_KEY",
    )


def _lazy(module: str, cls: str, extra: str | None, what: str) -> Callable[[ModelConfig], Provider]:
    def factory(model: ModelConfig) -> Provider:
        try:
            mod = importlib.import_module(f"{__package__}.{module}")
        except ImportError as exc:
            if extra is None:
                raise
            raise MissingExtraError(what, extra) from exc
        provider: Provider = getattr(mod, cls)(model)
        return provider

    return factory


def _scripted_model(model: str) -> ModelConfig:
    return ModelConfig(provider="scripted", id=model, api="scripted")


def _scripted_factory(model: ModelConfig) -> Provider:
    from ..testing import ScriptedProvider

    return ScriptedProvider(name=model.spec)


for _vendor in VENDORS:
    register_provider(
        ProviderSpec(
            name=_vendor.name,
            build=_vendor.build,
            description=_vendor.description,
            key_env=_vendor.key_env,
            models=_vendor.models,
            variant_of=_vendor.variant_of,
        )
    )
register_provider(
    ProviderSpec(
        name="openai-compat",
        build=_openai_compat_model,
        description="any OpenAI-compatible server: openai-compat:model@http://host:port/v1",
        key_env="OPENAI_COMPAT_API_KEY",
    )
)
register_provider(
    ProviderSpec(
        name="scripted",
        build=_scripted_model,
        description="test double: replies scripted in code (phi_core.testing.ScriptedProvider)",
    )
)

register_protocol("openai_completions", _lazy("openai_chat", "OpenAIChatProvider", None, ""))
register_protocol(
    "openai_responses", _lazy("openai_responses", "OpenAIResponsesProvider", None, "")
)
register_protocol(
    "azure_openai_responses", _lazy("openai_responses", "AzureOpenAIProvider", None, "")
)
register_protocol(
    "anthropic_messages",
    _lazy("anthropic", "AnthropicProvider", "anthropic", "Anthropic models"),
)
register_protocol(
    "google_generative_ai", _lazy("google", "GoogleProvider", "google", "Google Gemini models")
)
register_protocol(
    "google_vertex", _lazy("google", "GoogleProvider", "google", "Google Vertex models")
)
register_protocol(
    "bedrock_converse_stream",
    _lazy("bedrock", "BedrockProvider", "bedrock", "AWS Bedrock models"),
)
register_protocol("scripted", _scripted_factory)

# ---------------------------------------------------------------------------------------------
# `local:` GGUF models live in providers/local.py (written by the local-model engineer). It
# registers the `local` provider and the `local_gguf` protocol when imported. KEEP THIS IMPORT.
if importlib.util.find_spec(f"{__package__}.local") is not None:
    importlib.import_module(f"{__package__}.local")
# ---------------------------------------------------------------------------------------------
