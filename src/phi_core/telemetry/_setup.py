"""Turning spans on and off: :func:`instrument`, :func:`uninstrument`, the environment variables.

Where spans go, in order: the ``tracer_provider`` given; else the ``exporter`` or ``endpoint``
given (a tracer provider of phi-core's own, shut down — flushed — by :func:`uninstrument` and at
exit); else the application's global tracer provider when it configured the OpenTelemetry SDK;
else OTLP/HTTP to the endpoint from ``PHI_OTEL_ENDPOINT`` or the standard
``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` (default ``http://localhost:4318``).

Environment variables:

- ``PHI_OTEL``: ``1``/``true`` turns spans on for every run (read when ``phi_core`` is imported and
  by the ``phi`` command), ``otlp`` or ``console`` also picks the exporter, ``0``/``false`` or
  unset leaves them off;
- ``PHI_OTEL_ENDPOINT``: phi-core's OTLP/HTTP endpoint (a base URL; ``/v1/traces`` is added);
- ``PHI_OTEL_CAPTURE_CONTENT`` or the conventions'
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``: ``true`` records prompts and completions;
- the SDK's own: ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS``,
  ``OTEL_EXPORTER_OTLP_TIMEOUT``, ``OTEL_TRACES_EXPORTER`` (``console`` or ``otlp``, with
  ``PHI_OTEL=1``)...
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from .._logging import get_logger
from ..errors import MissingExtraError, PhiError, UserError
from ..events import add_observer

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import TracerProvider

    from ._spans import EventSpans

__all__ = [
    "Exporter",
    "Instrumentation",
    "TelemetrySettings",
    "current_instrumentation",
    "exporter_named",
    "instrument",
    "instrument_from_env",
    "settings_from_env",
    "uninstrument",
]

logger = get_logger("phi_core.telemetry")

Exporter = Literal["otlp", "console"]
SWITCH_ENV = "PHI_OTEL"
ENDPOINT_ENV = "PHI_OTEL_ENDPOINT"
CONTENT_ENVS = ("PHI_OTEL_CAPTURE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
DEFAULT_MAX_CONTENT_CHARS = 16_384
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"", "0", "false", "no", "off"})
_EXPORTERS: tuple[Exporter, ...] = ("otlp", "console")


@dataclass(frozen=True)
class TelemetrySettings:
    """What the environment asks for (see :func:`settings_from_env`)."""

    exporter: Exporter | None = None
    """``None``: the application's tracer provider if it set one up, else OTLP/HTTP."""
    endpoint: str | None = None
    capture_content: bool = False


def exporter_named(name: str) -> Exporter:
    """``"otlp"`` or ``"console"`` (any case) as an :data:`Exporter`.

    Raises:
        UserError: any other name.
    """
    for exporter in _EXPORTERS:
        if name.strip().lower() == exporter:
            return exporter
    raise UserError(f"exporter must be 'otlp' or 'console', got {name!r}.")


def _flag(environ: Mapping[str, str], name: str) -> bool:
    raw = environ.get(name, "").strip().lower()
    if raw in _ON:
        return True
    if raw in _OFF:
        return False
    raise UserError(f"{name} must be true or false, got {environ[name]!r}.")


def settings_from_env(environ: Mapping[str, str] | None = None) -> TelemetrySettings | None:
    """The settings ``PHI_OTEL`` and friends ask for; ``None`` when spans are off.

    Raises:
        UserError: a variable holds a value that means nothing here (the message names it).
    """
    env = os.environ if environ is None else environ
    raw = env.get(SWITCH_ENV, "").strip().lower()
    if raw in _OFF:
        return None
    exporter: Exporter | None
    if raw in _ON:
        standard = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
        if standard == "none":
            return None
        exporter = exporter_named(standard) if standard in _EXPORTERS else None
    elif raw in _EXPORTERS:
        exporter = exporter_named(raw)
    else:
        raise UserError(
            f"{SWITCH_ENV} must be 1 (spans on), otlp, console or 0 (off), got {env[SWITCH_ENV]!r}."
        )
    endpoint = env.get(ENDPOINT_ENV, "").strip() or None
    if endpoint is not None:
        _check_endpoint(endpoint)
    return TelemetrySettings(
        exporter=exporter,
        endpoint=endpoint,
        capture_content=any(_flag(env, name) for name in CONTENT_ENVS),
    )


def _check_endpoint(endpoint: str) -> str:
    if not endpoint.startswith(("http://", "https://")):
        raise UserError(
            f"The OpenTelemetry endpoint must be an http(s) URL such as 'http://localhost:4318', "
            f"got {endpoint!r}."
        )
    return endpoint


def _traces_url(endpoint: str) -> str:
    """A base URL (``http://host:4318``) or a full one (``…/v1/traces``) as the traces URL."""
    endpoint = _check_endpoint(endpoint).rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


class Instrumentation:
    """Spans for every run, from :func:`instrument` until :meth:`close` (or the ``with`` block's
    end). ``tracer_provider`` is where they go; ``spans`` is the event observer."""

    def __init__(
        self, tracer_provider: TracerProvider, spans: EventSpans, *, owned: bool, remove: Any
    ) -> None:
        self.tracer_provider = tracer_provider
        self.spans = spans
        self.owned = owned
        """True when phi-core made the tracer provider (and shuts it down on close)."""
        self._remove = remove
        self._closed = False

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every finished span now; False if that did not finish in time."""
        flush = getattr(self.tracer_provider, "force_flush", None)
        return bool(flush(timeout_millis)) if callable(flush) else True

    def close(self) -> None:
        """Stop recording spans, then flush them (and shut down a provider phi-core made)."""
        global _current
        with _lock:
            if self._closed:
                return
            self._closed = True
            self._remove()
            if _current is self:
                _current = None
        if self.owned:
            shutdown = getattr(self.tracer_provider, "shutdown", None)
            if callable(shutdown):
                shutdown()
        else:
            self.force_flush()

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_current: Instrumentation | None = None
_lock = threading.Lock()


def current_instrumentation() -> Instrumentation | None:
    """The instrumentation :func:`instrument` set up, if it is still on."""
    return _current


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    exporter: Exporter | SpanExporter | None = None,
    endpoint: str | None = None,
    capture_content: bool | None = None,
    max_content_chars: int | None = DEFAULT_MAX_CONTENT_CHARS,
    service_name: str | None = None,
) -> Instrumentation:
    """Record OpenTelemetry GenAI spans for every run from now on (one call, like pydantic-ai's
    ``Agent.instrument_all()``); calling it again replaces the previous setup.

    Args:
        tracer_provider: where spans go (yours; flushed, never shut down, by ``close``).
        exporter: ``"otlp"`` (OTLP/HTTP), ``"console"`` (JSON on stderr) or a ``SpanExporter``;
            spans then go through a tracer provider of phi-core's own.
        endpoint: the OTLP/HTTP endpoint (base URL, or the full ``…/v1/traces`` URL).
        capture_content: record prompts, completions, tool arguments and results (redacted);
            ``None`` reads ``PHI_OTEL_CAPTURE_CONTENT`` /
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (default off).
        max_content_chars: cut each recorded text to this many characters (``None``: whole).
        service_name: ``service.name`` of phi-core's own provider (default ``OTEL_SERVICE_NAME``,
            else ``phi``).

    Raises:
        MissingExtraError: the ``otel`` extra is not installed.
        UserError: a bad exporter name or endpoint.
    """
    try:
        from opentelemetry import trace

        from ._spans import EventSpans
    except ImportError as exc:
        raise MissingExtraError("OpenTelemetry spans", "otel") from exc
    if isinstance(exporter, str):
        exporter = exporter_named(exporter)
    if not isinstance(exporter, str | None) and not callable(getattr(exporter, "export", None)):
        raise UserError(
            f"exporter must be 'otlp', 'console' or an OpenTelemetry SpanExporter, "
            f"got {exporter!r}."
        )
    if max_content_chars is not None and max_content_chars < 1:
        raise UserError(
            f"max_content_chars must be >= 1, got {max_content_chars!r}. Use None for no limit."
        )
    if endpoint is not None:
        endpoint = _traces_url(endpoint)
    if capture_content is None:
        capture_content = any(_flag(os.environ, name) for name in CONTENT_ENVS)
    uninstrument()
    owned = False
    if tracer_provider is None:
        if exporter is None and endpoint is None and _sdk_configured():
            tracer_provider = trace.get_tracer_provider()
        else:
            tracer_provider = _own_provider(exporter, endpoint, service_name)
            owned = True
    from .. import __version__

    spans = EventSpans(
        tracer_provider.get_tracer("phi_core", __version__),
        capture_content=capture_content,
        max_content_chars=max_content_chars,
    )
    global _current
    with _lock:
        handle = Instrumentation(tracer_provider, spans, owned=owned, remove=add_observer(spans))
        _current = handle
    return handle


def uninstrument() -> None:
    """Stop the spans :func:`instrument` turned on (flushing what was recorded)."""
    handle = _current
    if handle is not None:
        handle.close()


def instrument_from_env(environ: Mapping[str, str] | None = None) -> Instrumentation | None:
    """:func:`instrument` as ``PHI_OTEL`` and friends ask; ``None`` (nothing done) when off."""
    settings = settings_from_env(environ)
    if settings is None:
        return None
    return instrument(
        exporter=settings.exporter,
        endpoint=settings.endpoint,
        capture_content=settings.capture_content,
    )


def _start_from_env() -> None:
    """``import phi_core`` with ``PHI_OTEL`` set: spans on, or a warning saying why not."""
    try:
        instrument_from_env()
    except PhiError as exc:
        logger.warning("OpenTelemetry spans are off: %s", exc)


def _sdk_configured() -> bool:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

    return isinstance(trace.get_tracer_provider(), SdkTracerProvider)


def _own_provider(
    exporter: Exporter | SpanExporter | None, endpoint: str | None, service_name: str | None
) -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    name = service_name or (None if named else "phi")
    provider = SdkTracerProvider(resource=Resource.create({"service.name": name} if name else {}))
    if exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    elif exporter is None or exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        url = endpoint or os.environ.get(ENDPOINT_ENV, "").strip() or None
        otlp = OTLPSpanExporter(endpoint=_traces_url(url)) if url else OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(otlp))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider
