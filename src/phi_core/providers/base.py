"""The provider contract: one async method that streams deltas and ends with the message.

A provider's :meth:`Provider.stream` is an async iterator. It yields :data:`StreamDelta` objects
(text, thinking and tool-call pieces, in the order the vendor sent them) and finally exactly one
:class:`StreamDone` carrying the assembled :class:`AssistantMessage`. A failure raises a classified
:class:`~phi_core.errors.ProviderError`. Cancellation is ordinary asyncio cancellation of the task
iterating the stream; a provider closes its HTTP response (or stops its generator) on exit.

Retry, limiting and instrumentation wrap a provider; they do not fork it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ..errors import UserError
from ..types import (
    AssistantMessage,
    Message,
    Pricing,
    ResponseFormat,
    StreamDelta,
    ThinkingLevel,
    ToolDefinition,
)

__all__ = [
    "ApiProtocol",
    "CacheConfig",
    "CacheStrategy",
    "ManualCache",
    "ModelConfig",
    "Provider",
    "StreamDone",
    "StreamEvent",
    "StreamRequest",
    "cache_targets",
    "output_ceiling",
]

ApiProtocol = Literal[
    "openai_completions",
    "openai_responses",
    "azure_openai_responses",
    "anthropic_messages",
    "google_generative_ai",
    "google_vertex",
    "bedrock_converse_stream",
    "local_gguf",
    "scripted",
    "replay",
]


class ModelConfig(BaseModel):
    """Everything needed to call one model: identity, endpoint, limits, prices, quirks.

    ``api_key`` is a :class:`~pydantic.SecretStr`: it never shows in reprs, logs or dumps.
    """

    model_config = ConfigDict(extra="forbid", frozen=False)

    provider: str
    id: str
    api: ApiProtocol = "openai_completions"
    name: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    api_key_env: str | None = None
    context_window: int = 128_000
    max_tokens: int = 4096
    reasoning: bool = False
    pricing: Pricing = Field(default_factory=Pricing)
    headers: dict[str, str] = Field(default_factory=dict)
    compat: dict[str, Any] = Field(default_factory=dict)
    # Default sampling settings of this configuration (a request's own values win).
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None

    @property
    def spec(self) -> str:
        """The ``provider:model`` string naming this model."""
        return f"{self.provider}:{self.id}"

    def api_key_value(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key is not None else None


@dataclass(frozen=True, slots=True)
class ManualCache:
    """Prompt caching of exactly the parts you choose (phi-core's ``CacheStrategy::Manual``)."""

    system: bool = True
    tools: bool = True
    messages: bool = True


CacheStrategy = Literal["auto", "disabled"] | ManualCache
"""``"auto"``: the provider's best placement (Anthropic: system prompt, last tool, last message);
``"disabled"``: no cache markers; :class:`ManualCache`: only the parts named."""


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Prompt-cache settings: a master switch and a strategy.

    ``AgentLoopConfig.cache`` also takes a bool (``True`` is ``"auto"``, ``False`` is disabled),
    the strategy name, or a :class:`ManualCache`. Vendors that cache automatically (OpenAI, Gemini)
    need no markers; the setting only changes what Anthropic (and Anthropic on Bedrock) is asked
    to cache.
    """

    enabled: bool = True
    strategy: CacheStrategy = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, ManualCache) and self.strategy not in ("auto", "disabled"):
            raise UserError(
                f"Unknown prompt-cache strategy {self.strategy!r}; use 'auto', 'disabled' or "
                "ManualCache(system=..., tools=..., messages=...)."
            )

    @classmethod
    def of(cls, value: bool | str | ManualCache | CacheConfig | None) -> CacheConfig:
        """Normalise any accepted form (see the class docstring)."""
        if isinstance(value, CacheConfig):
            return value
        if value is None or isinstance(value, bool):
            return cls(enabled=value is not False)
        if isinstance(value, ManualCache):
            return cls(strategy=value)
        if isinstance(value, str):
            return cls(strategy=value.strip().lower())  # type: ignore[arg-type]
        raise UserError(
            f"cache must be a bool, 'auto', 'disabled', a ManualCache or a CacheConfig, got "
            f"{value!r}."
        )

    def targets(self) -> tuple[bool, bool, bool]:
        """Whether to cache (system prompt, tool definitions, conversation)."""
        if not self.enabled or self.strategy == "disabled":
            return (False, False, False)
        if isinstance(self.strategy, ManualCache):
            return (self.strategy.system, self.strategy.tools, self.strategy.messages)
        return (True, True, True)


def cache_targets(cache: bool | CacheConfig) -> tuple[bool, bool, bool]:
    """(system, tools, messages) to mark for caching under ``StreamRequest.cache``."""
    return CacheConfig.of(cache).targets()


@dataclass(slots=True)
class StreamRequest:
    """What one model call is asked to do. Providers must not mutate it."""

    model: ModelConfig
    messages: list[Message]
    system_prompt: str | None = None
    tools: list[ToolDefinition] = field(default_factory=list)
    thinking: ThinkingLevel = "off"
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    response_format: ResponseFormat | None = None
    cache: bool | CacheConfig = True
    extra: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        """A JSON-ready description of the request (for ``TurnRequest`` events and caches)."""
        return {
            "model": self.model.spec,
            "system_prompt": self.system_prompt,
            "messages": [m.model_dump(mode="json") for m in self.messages],
            "tools": [t.model_dump(mode="json") for t in self.tools],
            "thinking": self.thinking,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "response_format": (
                self.response_format.model_dump(mode="json", by_alias=True)
                if self.response_format
                else None
            ),
        }


@dataclass(slots=True)
class StreamDone:
    """The last item of every successful stream."""

    message: AssistantMessage


StreamEvent = StreamDelta | StreamDone


@runtime_checkable
class Provider(Protocol):
    """Speaks one wire protocol. ``name`` identifies it in logs and limiter keys."""

    name: str

    def stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        """Yield deltas as they arrive, then one :class:`StreamDone`; raise ``ProviderError``."""
        ...


def output_ceiling(provider: Provider | None, request: StreamRequest) -> int:
    """The output limit ``provider`` sends for ``request``: its own ``output_ceiling`` when it
    has one (a provider that raises the limit for thinking), else the request's ``max_tokens``
    or the model's. What an output cap (``ExecutionLimits``) must be compared with."""
    own = getattr(provider, "output_ceiling", None)
    if callable(own):
        return int(own(request))
    return request.max_tokens or request.model.max_tokens
