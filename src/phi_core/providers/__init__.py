"""Providers: the provider contract, model naming, retry and (per vendor) wire protocols.

Builds clients and classifies errors; never imports the loop, parallel or routing layers.
"""

from .base import ModelConfig, Provider, StreamDone, StreamRequest
from .registry import get_provider, known_providers, resolve_model
from .retry import RetryPolicy, stream_with_retry

__all__ = [
    "ModelConfig",
    "Provider",
    "RetryPolicy",
    "StreamDone",
    "StreamRequest",
    "get_provider",
    "known_providers",
    "resolve_model",
    "stream_with_retry",
]
