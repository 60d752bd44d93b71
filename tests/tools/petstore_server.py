"""A local HTTP server that answers the operations of ``data/petstore.yaml``, for the OpenAPI tests.

It runs in a thread on 127.0.0.1 (port 0) and records every request it receives, so tests can check
exactly what was sent (path, query, headers, body).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DATA = Path(__file__).with_name("data")


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Petstore:
    url: str  # the API base (``.../v1``)
    requests: list[Received] = field(default_factory=list)
    redirect_to: str = ""  # where ``GET /v1/pets/away`` redirects (another server, say)

    @property
    def last(self) -> Received:
        return self.requests[-1]


def _handler(store: Petstore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            """Quiet."""

        def _answer(self, status: int, body: Any, kind: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            store.requests.append(
                Received(
                    self.command,
                    parts.path,
                    parse_qs(parts.query),
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
            )
            path = parts.path.removeprefix("/v1")
            if parts.path == "/openapi.yaml":
                spec = (
                    (DATA / "petstore.yaml")
                    .read_text()
                    .replace("http://petstore.invalid/v1", "/v1")
                )
                return self._answer(200, spec.encode(), "application/yaml")
            if path == "/pets" and self.command == "GET":
                return self._answer(200, [{"id": "1", "name": "Rex"}])
            if path == "/pets" and self.command == "POST":
                return self._answer(201, {"id": "2", **(body or {})})
            if path in ("/pets/away", "/pets/moved") and self.command == "GET":
                where = store.redirect_to if path == "/pets/away" else "/v1/pets/1"
                self.send_response(302)
                self.send_header("Location", where)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            if path.startswith("/pets/") and self.command == "GET":
                pet = path.removeprefix("/pets/")
                if pet == "1":
                    return self._answer(200, {"id": "1", "name": "Rex"})
                return self._answer(404, {"error": f"no pet with id {pet}"})
            if path.startswith("/pets/") and self.command == "DELETE":
                return self._answer(204, b"")
            if path == "/whoami":  # echoes every credential it got, as a careless API might
                return self._answer(
                    200, {"headers": dict(self.headers.items()), "query": parse_qs(parts.query)}
                )
            if path == "/slow":
                time.sleep(1)
                return self._answer(200, {"slow": True})
            if path == "/big":
                return self._answer(200, b"x" * 200_000, "text/plain")
            return self._answer(404, {"error": "no such route"})

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    return Handler


@contextmanager
def petstore() -> Iterator[Petstore]:
    store = Petstore(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(store))
    server.daemon_threads = True
    store.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield store
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
