"""Quirk flags of the APIs that speak OpenAI Chat Completions, and the preset for each vendor.

:class:`OpenAICompat` holds phi-core's compat flags; every flag is read by the request builder
(phi-core left three of them unused). A ``ModelConfig.compat`` dict overrides single flags of the
preset, and an unknown flag name is a :class:`~phi_core.errors.ConfigError` listing the known
ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigError

__all__ = ["PRESETS", "OpenAICompat", "ThinkingFormat"]

ThinkingFormat = Literal["openai", "xai", "qwen", "openrouter", "none"]


@dataclass(frozen=True, slots=True)
class OpenAICompat:
    """How one OpenAI-compatible API differs from OpenAI's own."""

    supports_store: bool = True
    """Send ``store: false`` (OpenAI keeps completions otherwise)."""
    supports_developer_role: bool = True
    """Put the system prompt in a ``developer`` message (reasoning models) instead of ``system``."""
    supports_reasoning_effort: bool = True
    """The API takes ``reasoning_effort``."""
    supports_usage_in_streaming: bool = True
    """The API takes ``stream_options.include_usage`` (and then sends a usage chunk)."""
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    requires_tool_result_name: bool = False
    """Tool result messages must carry the tool's ``name``."""
    requires_assistant_after_tool_result: bool = False
    """A user message may not follow a tool result directly; an assistant message is inserted."""
    supports_strict_schema: bool = True
    """``response_format`` json_schema with ``strict``."""
    thinking_format: ThinkingFormat = "openai"
    """How thinking is requested and where reasoning text comes back."""

    @classmethod
    def for_model(cls, provider: str, overrides: dict[str, Any] | None = None) -> OpenAICompat:
        """The preset for ``provider`` (OpenAI's own for unknown names) with ``overrides``."""
        base = PRESETS.get(provider, _GENERIC if provider not in ("openai",) else OPENAI)
        if not overrides:
            return base
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(
                f"Unknown compat flag(s) {', '.join(map(repr, unknown))} for provider "
                f"{provider!r}. Known flags: {', '.join(sorted(known))}.",
                key="compat",
            )
        return dataclasses.replace(base, **overrides)


OPENAI = OpenAICompat()
# Self-hosted servers (llama.cpp, vLLM, Ollama, unknown endpoints): the conservative subset.
_GENERIC = OpenAICompat(
    supports_store=False,
    supports_developer_role=False,
    supports_reasoning_effort=False,
    max_tokens_field="max_tokens",
    supports_strict_schema=True,
    thinking_format="qwen",
)

PRESETS: dict[str, OpenAICompat] = {
    "openai": OPENAI,
    "xai": OpenAICompat(supports_store=False, supports_developer_role=False, thinking_format="xai"),
    "groq": OpenAICompat(
        supports_store=False, supports_developer_role=False, max_tokens_field="max_tokens"
    ),
    "cerebras": OpenAICompat(
        supports_store=False,
        supports_developer_role=False,
        supports_reasoning_effort=False,
        max_tokens_field="max_tokens",
    ),
    "openrouter": OpenAICompat(
        supports_store=False,
        supports_developer_role=False,
        supports_reasoning_effort=False,
        thinking_format="openrouter",
    ),
    "mistral": OpenAICompat(
        supports_store=False,
        supports_developer_role=False,
        supports_reasoning_effort=False,
        max_tokens_field="max_tokens",
        requires_tool_result_name=True,
        requires_assistant_after_tool_result=True,
        thinking_format="none",
    ),
    "deepseek": OpenAICompat(
        supports_store=False,
        supports_developer_role=False,
        supports_reasoning_effort=False,
        max_tokens_field="max_tokens",
        supports_strict_schema=False,
        thinking_format="none",
    ),
    "ollama": _GENERIC,
    "vllm": _GENERIC,
    "llamacpp": _GENERIC,
    "openai-compat": _GENERIC,
}
