"""Pieces every concrete provider shares: key lookup, error classification, message assembly.

* :func:`api_key_for` finds a key (the ModelConfig's own, else the environment, else the one
  stored with ``phi keys set``) when a provider is built, registers it as a secret, and raises
  :class:`MissingApiKeyError` naming the variable and ``phi keys set``.
* :func:`classify_error` turns a status code, a message, a body and response headers into the
  right :class:`ProviderError` subclass; each provider calls it from one ``except`` boundary.
* :class:`MessageBuilder` turns vendor stream pieces into our deltas (with the content-block
  ``index`` of the final message) and assembles the :class:`AssistantMessage` at the end. Text is
  kept as a list of parts joined once, so accumulation stays linear in the reply length.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import json
import os
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

from ..errors import (
    AuthError,
    BadRequestError,
    ContextOverflowError,
    MissingApiKeyError,
    NetworkError,
    OverloadedError,
    ProviderError,
    RateLimitedError,
    ServerError,
    register_secret,
)
from ..types import (
    AssistantMessage,
    Content,
    StopReason,
    TextContent,
    TextDelta,
    ThinkingContent,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from .base import ModelConfig
from .keys import stored_key

T = TypeVar("T")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP libraries' transport exceptions (the SDKs use httpx, its fork httpx2, aiohttp; boto3 uses urllib3)."""
    found: list[type[BaseException]] = [OSError, EOFError]
    for name, attr in (("httpx", "TransportError"), ("httpx2", "TransportError"),
                       ("aiohttp", "ClientError"), ("urllib3.exceptions", "HTTPError")):  # fmt: skip
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        found.append(getattr(module, attr))
    return tuple(found)


TRANSPORT_ERRORS = _transport_errors()


class PerLoop(Generic[T]):
    """One SDK client per running event loop.

    An async HTTP client's connections belong to the loop that opened them; a client reused from
    another loop (a second ``asyncio.run``, or each test's own loop) fails on its stale
    connections. The client is built on first use in each loop and then shared by every call in it.

    With ``close``, the client is also closed inside its loop when that loop shuts down: a small
    async generator, started at once, is tracked by the loop like any other, and
    ``loop.shutdown_asyncgens()`` (run by ``asyncio.run`` and ``asyncio.Runner`` on exit) closes
    it, which runs ``close(client)``. Clients whose transports complain when dropped open (aiohttp
    warns "Unclosed client session") need this.
    """

    __slots__ = ("_client", "_close", "_closer", "_factory", "_loop")

    def __init__(
        self, factory: Callable[[], T], close: Callable[[T], Awaitable[object]] | None = None
    ) -> None:
        self._factory = factory
        self._close = close
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._client: T | None = None
        self._closer: AsyncGenerator[None, None] | None = None

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is None or self._loop() is not loop:
            client = self._factory()
            self._client = client
            self._loop = weakref.ref(loop)
            if self._close is not None:
                self._closer = _close_at_shutdown(client, self._close)
                step = self._closer.__anext__()  # the loop's firstiter hook now tracks it
                try:
                    step.send(None)  # runs to the ``yield``: nothing to await before it
                except StopIteration:
                    pass
        return self._client


async def _close_at_shutdown(
    client: T, close: Callable[[T], Awaitable[object]]
) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await close(client)


__all__ = [
    "TRANSPORT_ERRORS",
    "MessageBuilder",
    "PerLoop",
    "api_key_for",
    "classify_error",
    "client_tool_choice",
    "is_context_overflow",
    "parse_retry_after",
    "stop_sequences",
    "unchained",
]

# Phrases vendors use when a prompt does not fit (lower-cased substring match).
_OVERFLOW_PHRASES = (
    "prompt is too long",
    "input is too long",
    "exceeds the context window",
    "maximum prompt length",
    "reduce the length of the messages",
    "maximum context length",
    "exceeds the available context size",
    "greater than the context length",
    "context window exceeds limit",
    "exceeded model token limit",
    "context length exceeded",
    "context_length_exceeded",
    "too many tokens",
    "token limit exceeded",
    "input token count",
    "exceeds the maximum number of tokens",
    "input is too long for requested model",
)


# Providers that cannot be called without a key (the others also run keyless: local servers).
KEY_REQUIRED = frozenset(
    {"openai", "openai-responses", "azure", "anthropic", "google", "openrouter", "xai", "groq",
     "cerebras", "mistral", "deepseek"}
)  # fmt: skip


def api_key_for(
    model: ModelConfig, env_var: str | None, *, required: bool | None = None
) -> str | None:
    """The key for ``model``: its own ``api_key``, else ``model.api_key_env`` or ``env_var``,
    else the key stored with ``phi keys set`` (:mod:`phi_core.providers.keys`).

    Raises :class:`MissingApiKeyError` naming the variable when the key is ``required`` (by
    default: for the vendors in :data:`KEY_REQUIRED`) and nothing is set.
    """
    if required is None:
        required = model.provider in KEY_REQUIRED
    key = model.api_key_value()
    var = model.api_key_env or env_var
    if not key and var:
        key = os.environ.get(var) or None
    if not key:
        key = stored_key(model.provider, var, required=required)
    if not key and required:
        raise MissingApiKeyError(model.provider, var or "<PROVIDER>_API_KEY")
    register_secret(key)
    return key


def is_context_overflow(status: int | None, text: str) -> bool:
    """Whether an error (status + message/body text) says the prompt exceeded the context window."""
    lowered = text.lower()
    if any(phrase in lowered for phrase in _OVERFLOW_PHRASES):
        return True
    return status == 413 and "rate" not in lowered


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date).

    ``None`` when neither header holds a finite number of seconds or a valid HTTP date
    (``"soon"``, ``"1s"``, a malformed date): the caller's own back-off applies. Never raises.
    """
    if not headers:
        return None
    try:
        lowered = {str(k).lower(): str(v).strip() for k, v in headers.items()}
    except Exception:  # a headers object that cannot even be listed: no hint
        return None
    ms = _seconds(lowered.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000.0
    value = lowered.get("retry-after")
    if not value:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    # Not `parsedate_to_datetime`: on Python 3.11 it raises ValueError for text that is no date.
    try:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        when = float(email.utils.mktime_tz(parsed))  # a date without a zone counts as UTC
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    return max(when - time.time(), 0.0)


def _seconds(text: str | None) -> float | None:
    """A finite, non-negative number of seconds, or ``None`` (absent, not a number, NaN, ∞)."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if not -float("inf") < value < float("inf"):  # NaN and ±∞ are no delay
        return None
    return max(value, 0.0)


def classify_error(
    *,
    status: int | None,
    message: str,
    provider: str,
    model: str,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    error_type: str | None = None,
    auth_hint: str | None = None,
) -> ProviderError:
    """The :class:`ProviderError` subclass for one failed call (never raised here, returned).

    ``error_type`` is the vendor's own error code when it has one (``overloaded_error``,
    ``rate_limit_exceeded``, ``ThrottlingException`` ...); it wins over the status for streams
    whose errors arrive inside a 200 response. ``auth_hint`` says what to check after an
    authentication failure (default: the provider's key variable and ``phi keys set``).

    Never raises: an odd body, header or field loses that detail, never the classification (an
    exception from here would escape the provider's ``except`` unclassified, chained to the SDK
    exception whose request holds the key).
    """
    if isinstance(status, bool) or not isinstance(status, int):
        status = None
    message = str(message)
    body_text = _body_text(body)
    text = f"{message} {body_text}"
    kind = str(error_type or "").lower()
    kwargs: dict[str, Any] = {
        "status": status,
        "provider": provider,
        "model": model,
        "body": body_text or None,
        "retry_after": parse_retry_after(headers),  # never raises
    }
    cls: type[ProviderError]
    if is_context_overflow(status, text):
        cls = ContextOverflowError
    elif "overload" in kind or status == 529:
        cls = OverloadedError
    elif status == 429 or "rate_limit" in kind or "throttl" in kind or "resource_exhausted" in kind:
        cls = RateLimitedError
    elif status in (401, 403) or "auth" in kind or "permission" in kind or "accessdenied" in kind:
        cls = AuthError
    elif status == 503 or "unavailable" in kind:
        cls = OverloadedError
    elif (status is not None and status >= 500) or "server" in kind or "internal" in kind:
        cls = ServerError
    elif status is None and "rate limit" in text.lower():
        cls = RateLimitedError
    elif status is None and not kind:
        cls = ServerError
    else:
        cls = BadRequestError
    if cls is AuthError:
        prefix = f"authentication failed ({auth_hint or _key_hint(provider)})"
    else:
        prefix = {
            RateLimitedError: "rate limited",
            OverloadedError: "overloaded",
            ServerError: "server error",
            ContextOverflowError: "context overflow: the prompt exceeds the model's context window",
            BadRequestError: "bad request",
            NetworkError: "network error",
        }[cls]
    return cls(f"{provider}:{model} {prefix}: {message}", **kwargs)


def _body_text(body: Any) -> str:
    """An error body as text for matching and for :attr:`ProviderError.body` (never raises)."""
    if body is None:
        return ""
    if isinstance(body, str):
        return body
    try:
        return json.dumps(body, default=str)
    except (TypeError, ValueError, RecursionError):  # circular, or keys JSON cannot hold
        try:
            return repr(body)
        except Exception:
            return f"<{type(body).__name__}>"


def _key_hint(provider: str) -> str:
    """What to check after a 401/403: the provider's key variable and ``phi keys set`` (as the
    missing-key error says), when the provider is a known one that takes a key."""
    try:
        from .registry import known_providers

        key_env = next((s.key_env for s in known_providers() if s.name == provider), None)
    except Exception:  # the hint is never worth losing the error
        key_env = None
    if not key_env:
        return "check the API key"
    return (
        f"check the API key: set the {key_env} environment variable or store one with "
        f"`phi keys set {provider}`"
    )


def unchained(mapped: ProviderError, exc: BaseException) -> ProviderError:
    """``mapped``, classified from ``exc``, ready to raise *outside* the ``except`` block that
    caught ``exc`` (so that neither ``__cause__`` nor ``__context__`` holds ``exc``, whose
    message, request and headers can show the API key); ``cause_type`` keeps its type."""
    if mapped is not exc:
        mapped.cause_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
    mapped.__cause__ = None
    mapped.__context__ = None
    return mapped


def network_error(provider: str, model: str, exc: BaseException) -> NetworkError:
    """A transport failure, said as what happened: a refused connection names the host and
    port it was refused by (an SDK may report it as a timeout, e.g. openai over aiohttp)."""
    detail = str(exc) or type(exc).__name__
    chain = _causes(exc)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        where = _address(chain)
        detail = (
            f"the connection to {where} was refused" if where else "the connection was refused"
        ) + " (nothing answers there: check the URL and that the server is running)"
    return NetworkError(
        f"{provider}:{model} network error: {detail}", provider=provider, model=model
    )


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from (or during), outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 16:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _address(chain: list[BaseException]) -> str | None:
    """``host:port`` of the failed connection, from the exceptions that carry it (aiohttp's
    connector errors; the SDKs' connection errors hold the request)."""
    for error in chain:
        host, port = getattr(error, "host", None), getattr(error, "port", None)
        if isinstance(host, str) and isinstance(port, int):
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    for error in chain:
        try:
            url = error.request.url  # type: ignore[attr-defined]
        except Exception:  # no request, or httpx refuses to say (RuntimeError)
            continue
        host = getattr(url, "host", None)
        if isinstance(host, str) and host:
            port = getattr(url, "port", None) or {"http": 80, "https": 443}.get(
                str(getattr(url, "scheme", ""))
            )
            shown = f"[{host}]" if ":" in host else host
            return f"{shown}:{port}" if port else shown
    return None


def malformed_stream(provider: str, model: str, exc: BaseException) -> ProviderError:
    """A ``ValueError`` out of an SDK call, classified.

    Only a stream that could not be decoded (undecodable JSON, bytes that are not UTF-8) is a
    server fault worth retrying, also when an SDK wraps the decoding error in its own
    ``ValueError`` (google-genai's ``UnknownApiResponseError`` is raised *from* the
    ``JSONDecodeError``). Text that cannot be encoded — a lone surrogate in the request — fails
    the same way on every attempt, as does any other ``ValueError``: a bad request, never retried.
    """
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError) or isinstance(
        exc.__cause__, json.JSONDecodeError | UnicodeDecodeError
    ):
        return ServerError(
            f"{provider}:{model} sent a malformed stream event: {exc}",
            provider=provider,
            model=model,
        )
    if isinstance(exc, UnicodeEncodeError):
        return BadRequestError(
            f"{provider}:{model} bad request: the request holds invalid Unicode ({exc.reason} "
            f"at index {exc.start}); replace lone surrogates before sending",
            provider=provider,
            model=model,
        )
    return BadRequestError(
        f"{provider}:{model} bad request: {type(exc).__name__}: {exc}",
        provider=provider,
        model=model,
    )


def client_tool_choice(value: Any) -> tuple[str, str | None] | None:
    """An OpenAI-style ``tool_choice`` (what a client of the gateway sends) as ``(mode, name)``:
    mode ``auto``, ``none``, ``required`` or ``tool`` (then ``name`` is the tool's); ``None`` for
    no choice. The one reading of it for the vendors whose APIs spell it otherwise.

    Raises:
        ValueError: a value in no shape Chat Completions accepts (the message says which).
    """
    if value is None:
        return None
    if value in ("auto", "none", "required"):
        return str(value), None
    if isinstance(value, Mapping) and value.get("type") == "function":
        function = value.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str) and name:
            return "tool", name
    raise ValueError(
        f'`tool_choice` must be "auto", "none", "required" or '
        f'{{"type": "function", "function": {{"name": …}}}}, got {value!r:.80}.'
    )


def stop_sequences(extra: Mapping[str, Any]) -> list[str]:
    """The caller's stop sequences (``stop``: a string or a list), for vendors that take them."""
    stop = extra.get("stop")
    if isinstance(stop, str):
        return [stop]
    return [s for s in stop or () if isinstance(s, str) and s]


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """JSON tool-call arguments: ``(dict, None)``, or ``({}, raw)`` when not a JSON object."""
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError:
        return {}, raw
    if isinstance(value, dict):
        return value, None
    return {}, raw


class _Block:
    __slots__ = ("id", "kind", "name", "parts", "redacted", "signature")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.parts: list[str] = []
        self.id: str | None = None
        self.name: str | None = None
        self.signature: str | None = None
        self.redacted = False


class MessageBuilder:
    """Collect stream pieces keyed by the vendor's block key; emit deltas with our block index."""

    __slots__ = ("_blocks", "_by_key", "model", "provider")

    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self._blocks: list[_Block] = []
        self._by_key: dict[Hashable, int] = {}

    def _block(self, key: Hashable, kind: str) -> tuple[int, _Block]:
        index = self._by_key.get(key)
        if index is None:
            index = len(self._blocks)
            self._by_key[key] = index
            self._blocks.append(_Block(kind))
        return index, self._blocks[index]

    def text(self, key: Hashable, text: str) -> TextDelta:
        if type(text) is not str:  # what a hostile upstream sent: validated (and refused)
            return TextDelta(index=0, text=text)
        index, block = self._block(key, "text")
        block.parts.append(text)
        # Built without re-validating an int and a str: one per streamed chunk adds up.
        return TextDelta.model_construct(index=index, text=text)

    def thinking(
        self, key: Hashable, text: str = "", signature: str | None = None, redacted: bool = False
    ) -> ThinkingDelta:
        index, block = self._block(key, "thinking")
        if text:
            block.parts.append(text)
        if signature:
            block.signature = (block.signature or "") + signature
        if redacted:
            block.redacted = True
        return ThinkingDelta(index=index, thinking=text, signature=signature)

    def tool_call(
        self,
        key: Hashable,
        *,
        id: str | None = None,
        name: str | None = None,
        arguments: str = "",
        signature: str | None = None,
    ) -> ToolCallDelta:
        index, block = self._block(key, "tool")
        if id and block.id and id != block.id:
            # Another call under the same vendor key: Ollama gives every parallel call index 0,
            # some servers send no index at all. A new id is a new call; what follows without
            # an id continues it.
            index = len(self._blocks)
            self._by_key[key] = index
            block = _Block("tool")
            self._blocks.append(block)
        if signature:
            block.signature = signature
        if id and not block.id:
            block.id = id
        if name and not block.name:
            block.name = name
        if arguments:
            block.parts.append(arguments)
        return ToolCallDelta(index=index, id=id, name=name, arguments=arguments)

    @property
    def has_tool_calls(self) -> bool:
        return any(b.kind == "tool" for b in self._blocks)

    def content(self) -> list[Content]:
        out: list[Content] = []
        for n, block in enumerate(self._blocks):
            text = "".join(block.parts)
            if block.kind == "text":
                out.append(TextContent(text=text))
            elif block.kind == "thinking":
                out.append(
                    ThinkingContent(
                        thinking=text, signature=block.signature, redacted=block.redacted
                    )
                )
            else:
                arguments, raw = parse_arguments(text)
                out.append(
                    ToolCall(
                        id=block.id or f"call_{n}",
                        name=block.name or "",
                        arguments=arguments,
                        raw_arguments=raw,
                        signature=block.signature,
                    )
                )
        return out

    def finish(self, stop_reason: StopReason, usage: Usage) -> AssistantMessage:
        if stop_reason == "stop" and self.has_tool_calls:
            stop_reason = "tool_use"
        return AssistantMessage(
            content=self.content(),
            stop_reason=stop_reason,
            model=self.model,
            provider=self.provider,
            usage=usage,
        )


def thinking_as_text(block: ThinkingContent) -> str:
    """How a thinking block is shown to a vendor that cannot take thinking (request-side only)."""
    return f"[Reasoning] {block.thinking}"
