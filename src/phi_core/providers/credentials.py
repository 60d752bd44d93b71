"""Credentials that change while an agent runs (short-lived tokens, rotated keys).

A :class:`CredentialProvider` hands out the current credential (``await get()``) and forgets it
when told it was rejected (``await invalidate()``). With ``AgentLoopConfig.credentials`` set,
every model call asks it for the key; when the vendor answers with an authentication error
before any reply arrived, the loop invalidates the credential **once**, asks again and retries
**once** (this retry does not count against ``RetryPolicy.max_retries``). A second rejection is
the classified :class:`~phi_core.errors.AuthError` of an ordinary failed call.

Credentials are registered as secrets when handed out, so :func:`~phi_core.errors.redact`
removes them from every error message, event and log line; a provider that fails to produce a
credential becomes an ``AuthError`` without its original exception attached.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import SecretStr

from ..errors import AuthError, redact, register_secret
from .base import ModelConfig, Provider, StreamEvent, StreamRequest
from .retry import RetryPolicy, stream_with_retry

__all__ = [
    "CredentialProvider",
    "RefreshingCredentialProvider",
    "StaticCredentialProvider",
    "stream_with_credentials",
]


@runtime_checkable
class CredentialProvider(Protocol):
    """Hands out the current credential; ``invalidate`` may be sync or async."""

    async def get(self) -> str: ...

    def invalidate(self) -> Any: ...


class StaticCredentialProvider:
    """Always the same key (invalidating does nothing)."""

    def __init__(self, key: str) -> None:
        register_secret(key)
        self._key = SecretStr(key)

    async def get(self) -> str:
        return self._key.get_secret_value()

    def invalidate(self) -> None:
        return None

    def __repr__(self) -> str:
        return "StaticCredentialProvider('**********')"


class RefreshingCredentialProvider:
    """Fetches a credential with ``fetch()`` (sync or async), keeps it until invalidated.

    Concurrent callers share one fetch; ``fetches`` counts how many were made.
    """

    def __init__(self, fetch: Callable[[], str | Awaitable[str]]) -> None:
        self._fetch = fetch
        self._current: SecretStr | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def get(self) -> str:
        async with self._lock:
            if self._current is None:
                value = self._fetch()
                if inspect.isawaitable(value):
                    value = await value
                if not isinstance(value, str) or not value:
                    raise ValueError(
                        f"the credential fetch function returned {type(value).__name__}, not a "
                        "non-empty string"
                    )
                self.fetches += 1
                register_secret(value)
                self._current = SecretStr(value)
            return self._current.get_secret_value()

    def invalidate(self) -> None:
        self._current = None

    def __repr__(self) -> str:
        return f"RefreshingCredentialProvider(fetches={self.fetches})"


async def _current(credentials: CredentialProvider) -> str:
    try:
        key = await credentials.get()
    except Exception as exc:
        raise AuthError(
            f"The credential provider {type(credentials).__name__} could not produce a "
            f"credential: {redact(f'{type(exc).__name__}: {exc}')}"
        ) from None
    if not isinstance(key, str) or not key:
        raise AuthError(
            f"The credential provider {type(credentials).__name__} returned "
            f"{type(key).__name__}, not a non-empty string."
        )
    register_secret(key)
    return key


async def stream_with_credentials(
    provider_for: Callable[[ModelConfig], Provider],
    request: StreamRequest,
    credentials: CredentialProvider,
    *,
    open_stream: Callable[[Provider, StreamRequest], AsyncIterator[StreamEvent]] | None = None,
    policy: RetryPolicy | None = None,
) -> AsyncIterator[StreamEvent]:
    """Stream ``request`` with the credential in ``request.model.api_key``, refreshed once on
    an authentication error (see the module docstring).

    ``provider_for(model)`` gives the provider for a model carrying the current key (the
    registry keeps one provider, hence one client, per key); ``open_stream(provider, request)``
    makes one attempt (default: :func:`stream_with_retry` with ``policy``; the loop passes its
    :class:`~phi_core.providers.call.ModelCall`).
    """

    def default_open(provider: Provider, attempt: StreamRequest) -> AsyncIterator[StreamEvent]:
        return stream_with_retry(provider, attempt, policy)

    opener = open_stream or default_open
    refreshed = False
    while True:
        key = await _current(credentials)
        model = request.model.model_copy(update={"api_key": SecretStr(key)})
        attempt = dataclasses.replace(request, model=model)
        yielded = False
        try:
            async for item in opener(provider_for(model), attempt):
                yielded = True
                yield item
            return
        except AuthError:
            if yielded or refreshed:
                raise
            refreshed = True
        try:
            done = credentials.invalidate()
            if inspect.isawaitable(done):
                await done
        except Exception as exc:
            raise AuthError(
                f"The credential was rejected and invalidating it failed: "
                f"{redact(f'{type(exc).__name__}: {exc}')}"
            ) from None
