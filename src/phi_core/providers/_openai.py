"""What the OpenAI-SDK providers share: the error boundary and small request helpers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import openai

from .._logging import get_logger
from ..errors import ProviderError
from ..types import ImageContent, ResponseFormat, ToolCall
from ._common import TRANSPORT_ERRORS, PerLoop, classify_error, malformed_stream, network_error
from .base import ModelConfig
from .deadlines import current_deadlines

__all__ = [
    "arguments_text",
    "data_url",
    "http_client",
    "map_openai_error",
    "openai_clients",
    "request_timeout",
]

logger = get_logger("phi_core.providers")

TIMEOUT = 600.0
# The limiter caps calls in flight; the pool must not be a second, hidden cap below it. The
# SDK's own ``Limits`` class (httpx or httpx2, depending on the SDK version) builds it.
LIMITS = type(openai.DEFAULT_CONNECTION_LIMITS)(
    max_connections=4096, max_keepalive_connections=1024
)


def request_timeout() -> Any:
    """This call's SDK time-out: the per-read :data:`TIMEOUT`, and the call's
    ``CallDeadlines.connect`` for opening the connection (the call path enforces the rest)."""
    connect = current_deadlines().connect
    return type(openai.DEFAULT_TIMEOUT)(
        TIMEOUT, connect=connect if connect is not None else TIMEOUT
    )


PREFER_AIOHTTP = True
"""Use the SDK's aiohttp transport when it is installed (a core dependency); see
:func:`http_client`. ``False`` keeps the SDK's default httpx transport."""


def http_client(prefer_aiohttp: bool | None = None) -> openai.DefaultAsyncHttpxClient:
    """The SDK's HTTP client for one event loop: its aiohttp transport when asked for (default
    :data:`PREFER_AIOHTTP`) and installed, else its default httpx client.

    With streamed answers at 100 to 1,000 calls in flight, the SDK's aiohttp transport costs
    about half the client CPU per call of its default httpx transport, whose pool walks every
    connection on each request (``benchmarks/overhead.py``). Without aiohttp (or with an SDK too
    old to offer it) the SDK's default httpx client is used, with our time-outs.
    """
    if prefer_aiohttp is None:
        prefer_aiohttp = PREFER_AIOHTTP
    aiohttp_client = getattr(openai, "DefaultAioHttpClient", None) if prefer_aiohttp else None
    if aiohttp_client is not None:
        try:
            client: openai.DefaultAsyncHttpxClient = aiohttp_client(timeout=TIMEOUT, limits=LIMITS)
            return client
        except RuntimeError as exc:  # the SDK raises this when aiohttp is not installed
            logger.debug("OpenAI SDK without its aiohttp transport (%s): using httpx", exc)
    # httpx keeps the SDK's own limits: its pool walks every kept-alive connection on each
    # request, so keeping more of them alive costs more CPU per call (benchmarks/overhead.py).
    return openai.DefaultAsyncHttpxClient(timeout=TIMEOUT)


def openai_clients(model: ModelConfig, key: str | None) -> PerLoop[openai.AsyncOpenAI]:
    """One ``AsyncOpenAI`` client per event loop for ``model``'s endpoint: SDK retries off (our
    retry policy applies), our time-outs, :func:`http_client`, closed when its loop shuts down."""
    return PerLoop(
        lambda: openai.AsyncOpenAI(
            api_key=key or "no-key",
            base_url=model.base_url,
            max_retries=0,
            timeout=TIMEOUT,
            default_headers=model.headers or None,
            http_client=http_client(),
        ),
        close=lambda client: client.close(),
    )


def map_openai_error(exc: BaseException, provider: str, model: str) -> ProviderError | None:
    """The one place OpenAI SDK (and transport) exceptions become classified errors.

    Returns ``None`` for anything else (a bug, not a provider failure: it propagates as is).
    """
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, (openai.APIConnectionError, *TRANSPORT_ERRORS)):
        return network_error(provider, model, exc)
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        return classify_error(
            status=exc.status_code,
            message=_message(exc.message, body),
            provider=provider,
            model=model,
            body=body,
            headers=exc.response.headers,
            error_type=_code(body),
        )
    if isinstance(exc, openai.APIError):  # an `error` event inside a 200 stream
        body = exc.body
        return classify_error(
            status=_status(body),
            message=_message(exc.message, body),
            provider=provider,
            model=model,
            body=body,
            error_type=_code(body),
        )
    if isinstance(exc, ValueError):  # undecodable JSON in an SSE event
        return malformed_stream(provider, model, exc)
    return None


def _message(default: str, body: Any) -> str:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return default


def _code(body: Any) -> str | None:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            for key in ("code", "type"):
                if isinstance(inner.get(key), str):
                    return str(inner[key])
    return None


def _status(body: Any) -> int | None:
    if isinstance(body, Mapping):
        for key in ("status", "code", "status_code"):
            value = body.get(key)
            if isinstance(value, int) and 400 <= value < 600:
                return value
    return None


def data_url(image: ImageContent) -> str:
    return f"data:{image.mime_type};base64,{image.data}"


def arguments_text(call: ToolCall) -> str:
    """The argument text to send back for a call (the raw text when it was not valid JSON)."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(call.arguments, ensure_ascii=False)


def json_schema_format(fmt: ResponseFormat, *, strict_ok: bool) -> dict[str, Any]:
    """Chat Completions ``response_format`` for a :class:`ResponseFormat`."""
    if fmt.type == "json_object" or fmt.schema_ is None:
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
    if strict_ok:
        spec["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": spec}
