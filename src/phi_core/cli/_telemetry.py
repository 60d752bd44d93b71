"""``phi --otel``: OpenTelemetry spans for one command (flags first, then ``PHI_OTEL``)."""

from __future__ import annotations

import typer

from ..errors import UserError
from ..telemetry import (
    TelemetrySettings,
    current_instrumentation,
    exporter_named,
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
        handle = current_instrumentation()  # PHI_OTEL may have turned spans on at import
        if on or exporter is not None or endpoint is not None or (settings and handle is None):
            base = settings or TelemetrySettings()
            handle = instrument(
                exporter=exporter_named(exporter) if exporter is not None else base.exporter,
                endpoint=endpoint or base.endpoint,
                capture_content=base.capture_content,
            )
    except UserError as exc:
        raise usage_error(exc) from None
    if handle is not None:
        ctx.call_on_close(handle.close)
