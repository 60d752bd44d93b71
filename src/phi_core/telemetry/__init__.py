"""OpenTelemetry GenAI spans for every run: a sink of the one event stream (optional ``otel``
extra).

``phi_core.telemetry.instrument()`` (or ``PHI_OTEL=1``, or ``phi --otel``) turns spans on for
every agent run, model call, tool execution, race and bandit race in the process; they go to the
application's tracer provider, OTLP/HTTP or the console. :class:`EventSpans` is the observer that
builds them — it only reads events, so it imports nothing above :mod:`phi_core.events`; pass one as
``events=`` to trace a single run. Prompt and completion content is recorded only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._setup import (
    Exporter,
    Instrumentation,
    TelemetrySettings,
    current_instrumentation,
    exporter_named,
    instrument,
    instrument_from_env,
    settings_from_env,
    uninstrument,
)

if TYPE_CHECKING:
    from ._spans import EventSpans

__all__ = [
    "EventSpans",
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


def __getattr__(name: str) -> Any:
    # EventSpans needs the `otel` extra: imported on first use, so this package imports without it.
    if name == "EventSpans":
        from ._spans import EventSpans

        return EventSpans
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
