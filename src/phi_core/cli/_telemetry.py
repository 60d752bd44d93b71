"""``phi --otel``: OpenTelemetry spans for one command (flags first, then ``PHI_OTEL``)."""

from __future__ import annotations

import typer

from ..errors import UserError
from ..telemetry import (
    TelemetrySettings,
    current_instrumentation,
    instrument,
    settings_from_env,
)
from ._common import usage_error

__all__ = ["OTEL_ENDPOINT_HELP", "OTEL_EXPORTER_HELP", "OTEL_HELP", "start_telemetry"]

OTEL_HELP = (
    "Send OpenTelemetry GenAI spans of the run over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT "
    "(default http://localhost:4318). Env PHI_OTEL=1. Prompts and answers are only recorded with "
    "PHI_OTEL_CAPTURE_CONTENT=1."
)
OTEL_EXPORTER_HELP = "Where spans go: otlp or console (stderr). Implies --otel."
OTEL_ENDPOINT_HELP = "The OTLP/HTTP endpoint (env PHI_OTEL_ENDPOINT). Implies --otel."


def start_telemetry(
    ctx: typer.Context, on: bool, exporter: str | None, endpoint: str | None
) -> None:
    """Turn spans on as the flags or the environment ask; they are flushed when the command
    ends. A bad value is a usage error (exit 2)."""
    try:
        settings = settings_from_env()
        if on or exporter is not None or endpoint is not None:
            base = settings or TelemetrySettings()
            settings = TelemetrySettings(
                exporter=exporter or base.exporter,  # type: ignore[arg-type]
                endpoint=endpoint or base.endpoint,
                capture_content=base.capture_content,
            )
        elif settings is not None and current_instrumentation() is not None:
            settings = None  # PHI_OTEL already turned spans on when phi_core was imported
        handle = (
            instrument(
                exporter=settings.exporter,
                endpoint=settings.endpoint,
                capture_content=settings.capture_content,
            )
            if settings is not None
            else current_instrumentation()
        )
    except UserError as exc:
        raise usage_error(exc) from None
    if handle is not None:
        ctx.call_on_close(handle.close)
