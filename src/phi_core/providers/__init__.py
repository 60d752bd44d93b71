"""Providers: the provider contract, ``provider:model`` naming, the vendor wire protocols, one
retry policy, one process-wide limiter and the price table.

This folder builds authenticated SDK clients (``openai``, ``anthropic``, ``google-genai``,
``boto3``, each with its own retries off), turns vendor streams into typed deltas and one
assembled message, and classifies every failure into a ``ProviderError``. It imports only
``types``, ``errors`` and ``cancel``; never the loop, parallel, routing or CLI layers.
Vendor SDKs are imported only when a provider for them is built.
"""

from .base import (
    ApiProtocol,
    CacheConfig,
    CacheStrategy,
    ManualCache,
    ModelConfig,
    Provider,
    StreamDone,
    StreamEvent,
    StreamRequest,
)
from .compat import OpenAICompat
from .credentials import (
    CredentialProvider,
    RefreshingCredentialProvider,
    StaticCredentialProvider,
    stream_with_credentials,
)
from .deadlines import CallDeadlines, deadline_scope
from .limiter import GateStats, Limiter, LimiterSlot, default_limiter, set_default_limiter
from .pricing import PRICES, PRICES_AS_OF, price_for
from .registry import (
    ProviderSpec,
    get_provider,
    known_providers,
    qualify_model_name,
    register_protocol,
    register_provider,
    resolve_model,
    split_model_settings,
)
from .retry import RetryPolicy, stream_with_retry

__all__ = [
    "PRICES",
    "PRICES_AS_OF",
    "ApiProtocol",
    "CacheConfig",
    "CacheStrategy",
    "CallDeadlines",
    "CredentialProvider",
    "GateStats",
    "Limiter",
    "LimiterSlot",
    "ManualCache",
    "ModelConfig",
    "OpenAICompat",
    "Provider",
    "ProviderSpec",
    "RefreshingCredentialProvider",
    "RetryPolicy",
    "StaticCredentialProvider",
    "StreamDone",
    "StreamEvent",
    "StreamRequest",
    "deadline_scope",
    "default_limiter",
    "get_provider",
    "known_providers",
    "price_for",
    "qualify_model_name",
    "register_protocol",
    "register_provider",
    "resolve_model",
    "set_default_limiter",
    "split_model_settings",
    "stream_with_credentials",
    "stream_with_retry",
]
