"""A tiny OTLP/HTTP trace receiver on 127.0.0.1 (a test double of a collector): it decodes each
``ExportTraceServiceRequest`` with ``opentelemetry-proto`` and keeps the spans it carried."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value_of(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a Python value (arrays as tuples)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    span_id: bytes
    parent_span_id: bytes
    trace_id: bytes
    kind: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    scope: str
    resource: dict[str, Any]


@dataclass
class Receiver:
    url: str
    requests: list[dict[str, str]] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    def parent_of(self, span: ReceivedSpan) -> ReceivedSpan | None:
        return next((s for s in self.spans if s.span_id == span.parent_span_id), None)


def _decode(body: bytes, receiver: Receiver) -> None:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    for resource_spans in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                receiver.spans.append(
                    ReceivedSpan(
                        name=span.name,
                        span_id=span.span_id,
                        parent_span_id=span.parent_span_id,
                        trace_id=span.trace_id,
                        kind=span.kind,
                        attributes={a.key: value_of(a.value) for a in span.attributes},
                        events=[
                            (e.name, {a.key: value_of(a.value) for a in e.attributes})
                            for e in span.events
                        ],
                        status_code=span.status.code,
                        scope=scope_spans.scope.name,
                        resource=resource,
                    )
                )


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve ``POST /v1/traces`` on 127.0.0.1 (a free port) until the block ends."""
    lock = threading.Lock()
    receiver = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with lock:
                receiver.requests.append(
                    {"path": self.path, "content_type": self.headers.get("Content-Type", "")}
                )
                _decode(body, receiver)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
