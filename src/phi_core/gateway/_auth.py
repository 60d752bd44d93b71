"""Bearer keys: who may call ``phi serve`` and ``phi mcp serve --http``.

Every configured key is compared with the one a request presents, in constant time and all of
them every time (how long a check takes says nothing about which key nearly matched). Keys are
never logged or put in an error message.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from ..errors import GatewayError
from ._config import ApiKey

__all__ = ["BearerKeys", "require_bearer"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerKeys:
    """The keys a server accepts in ``Authorization: Bearer <key>`` (none: anyone may call)."""

    def __init__(self, keys: Sequence[tuple[ApiKey, str]]) -> None:
        self._keys = [(key, value.encode()) for key, value in keys]

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __repr__(self) -> str:
        return f"BearerKeys({[key.name for key, _ in self._keys]!r})"

    def check(self, authorization: str | None) -> ApiKey | None:
        """The key presented in ``authorization`` (``None`` when no keys are configured).

        Raises:
            GatewayError: 401 — no bearer token, or one that is not a configured key.
        """
        if not self._keys:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise GatewayError(
                401,
                "Missing API key: send it as a bearer token (the `Authorization` header, "
                "value `Bearer <key>`).",
                type_="authentication_error",
                code="missing_api_key",
            )
        given = token.strip().encode()
        found: ApiKey | None = None
        for key, value in self._keys:
            if hmac.compare_digest(given, value) and found is None:
                found = key
        if found is None:
            raise GatewayError(
                401, "Incorrect API key provided.", type_="authentication_error",
                code="invalid_api_key",
            )  # fmt: skip
        return found


def require_bearer(app: ASGIApp, keys: BearerKeys) -> ASGIApp:
    """``app`` behind ``keys``: an HTTP request without one of them gets a 401 (OpenAI's error
    shape, ``WWW-Authenticate: Bearer``) and never reaches ``app``; lifespan events pass."""
    if not keys:
        return app

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = dict(scope.get("headers") or ()).get(b"authorization")
            try:
                keys.check(header.decode("latin-1") if header is not None else None)
            except GatewayError as exc:
                body = json.dumps(exc.body()).encode()
                await send({"type": "http.response.start", "status": exc.status, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b"Bearer"),
                    (b"content-length", str(len(body)).encode()),
                ]})  # fmt: skip
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded
