"""A tracer provider with the SDK's in-memory exporter, instrumented for the test's duration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from phi_core.telemetry import instrument, uninstrument


class Spans:
    """The finished spans, with lookups by name and by parent."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    @property
    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.all if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {self.names()}"
        return found[0]

    def names(self) -> list[str]:
        return sorted(s.name for s in self.all)

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        assert parent.context is not None
        return sorted(
            (
                s
                for s in self.all
                if s.parent is not None and s.parent.span_id == parent.context.span_id
            ),
            key=lambda s: s.start_time or 0,
        )

    def parent_of(self, span: ReadableSpan) -> ReadableSpan | None:
        if span.parent is None:
            return None
        return next(
            s
            for s in self.all
            if s.context is not None and s.context.span_id == span.parent.span_id
        )

    def roots(self) -> list[ReadableSpan]:
        return [s for s in self.all if s.parent is None]

    def everything_said(self) -> str:
        """Every attribute value, event attribute and status description, as one text."""
        parts: list[Any] = []
        for span in self.all:
            parts.append(span.name)
            parts.extend((span.attributes or {}).values())
            parts.append(span.status.description or "")
            for event in span.events:
                parts.append(event.name)
                parts.extend((event.attributes or {}).values())
        return "\n".join(str(p) for p in parts)


@pytest.fixture(autouse=True)
def _spans_off_afterwards() -> Iterator[None]:
    """No test leaves spans on for the next one (the CLI turns them on by itself)."""
    yield
    uninstrument()


@pytest.fixture
def tracer_provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@pytest.fixture
def spans(tracer_provider: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[Spans]:
    """Spans for every run of the test (content not captured: the default)."""
    provider, exporter = tracer_provider
    instrument(tracer_provider=provider)
    try:
        yield Spans(exporter)
    finally:
        uninstrument()


@pytest.fixture
def spans_with_content(
    tracer_provider: tuple[TracerProvider, InMemorySpanExporter],
) -> Iterator[Spans]:
    provider, exporter = tracer_provider
    instrument(tracer_provider=provider, capture_content=True)
    try:
        yield Spans(exporter)
    finally:
        uninstrument()
