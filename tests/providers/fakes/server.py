"""A scriptable HTTP/1.1 server on 127.0.0.1 for the vendor wire-format tests.

It is deliberately tiny and raw (``asyncio.start_server``) so a test controls every byte: status,
headers, a streamed body sent chunk by chunk (chunked transfer encoding, so a connection dropped
mid-way is an incomplete body, never a clean end), and abrupt disconnects. Every request is
recorded with its path, query, headers, decoded JSON body and arrival time.

A script item is a :class:`Respond`, a :class:`Stream`, or an (async) callable taking the
:class:`Recorded` request and returning one of those. When the script runs out the server answers
500 with a message saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeServer", "Recorded", "Respond", "Stream"]


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    raw: bytes
    at: float
    ended_at: float | None = None
    """When the response was finished or abandoned (the client went away mid-stream)."""
    completed: bool = False
    """Whether the whole response was written (False: the connection closed first)."""

    @property
    def json(self) -> Any:
        return json.loads(self.raw) if self.raw else None


@dataclass
class Respond:
    """A whole response at once."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body if self.body is not None else {}).encode()


@dataclass
class Stream:
    """A streamed 200 response: each item of ``chunks`` is written and flushed on its own.

    ``drop_after``: close the connection abruptly after that many chunks (no terminating chunk).
    ``interval``: seconds to wait before each chunk after the first (a slow upstream).
    """

    chunks: list[bytes]
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)
    drop_after: int | None = None
    status: int = 200
    interval: float = 0.0


Item = Respond | Stream | Callable[[Recorded], "Respond | Stream | Awaitable[Respond | Stream]"]

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 413: "Payload Too Large", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable", 529: "Overloaded"}  # fmt: skip


class FakeServer:
    """``async with FakeServer([...]) as server:`` then point a client at ``server.url``."""

    def __init__(self, script: Iterable[Item] = (), *, default: Item | None = None) -> None:
        self.script: list[Item] = list(script)
        self.default = default
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._server: asyncio.Server | None = None
        self._handlers: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def push(self, *items: Item) -> None:
        self.script.extend(items)

    async def __aenter__(self) -> FakeServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        # Closing the connections ends each handler's read; handlers are awaited, never cancelled.
        for writer in list(self._handlers.values()):
            writer.transport.abort()
        for task in list(self._handlers):
            with contextlib.suppress(ConnectionError):
                await task
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers[task] = writer
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.pop(task, None)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        length = int(headers.get("content-length", "0") or 0)
        raw = await reader.readexactly(length) if length else b""
        parts = urlsplit(target)
        record = Recorded(method, parts.path, parse_qs(parts.query), headers, raw, time.monotonic())
        self.requests.append(record)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            done = await self._respond(record, writer)
            record.completed = done
            return done
        finally:
            record.ended_at = time.monotonic()
            self.in_flight -= 1

    async def _respond(self, record: Recorded, writer: asyncio.StreamWriter) -> bool:
        item = self.script.pop(0) if self.script else self.default
        if item is None:
            item = Respond(500, {"error": {"message": "fake server: script exhausted"}})
        if callable(item) and not isinstance(item, Respond | Stream):
            result = item(record)
            item = await result if inspect.isawaitable(result) else result
        assert isinstance(item, Respond | Stream)
        if isinstance(item, Respond):
            payload = item.payload()
            self._head(writer, item.status, item.content_type, item.headers,
                       {"content-length": str(len(payload))})  # fmt: skip
            writer.write(payload)
            await writer.drain()
            return True
        self._head(writer, item.status, item.content_type, item.headers,
                   {"transfer-encoding": "chunked"})  # fmt: skip
        await writer.drain()
        for n, chunk in enumerate(item.chunks):
            if item.drop_after is not None and n >= item.drop_after:
                writer.transport.abort()
                return False
            if n and item.interval:
                await asyncio.sleep(item.interval)
            if writer.transport.is_closing():  # the client went away
                return False
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            await writer.drain()
        if item.drop_after is not None:
            writer.transport.abort()
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    @staticmethod
    def _head(
        writer: asyncio.StreamWriter,
        status: int,
        content_type: str,
        extra: dict[str, str],
        framing: dict[str, str],
    ) -> None:
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
            f"content-type: {content_type}",
        ]
        lines += [f"{k}: {v}" for k, v in {**framing, **extra}.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))


def sse(events: Iterable[tuple[str | None, Any]]) -> list[bytes]:
    """SSE frames: ``(event name or None, data)``; data that is not a str is JSON-encoded."""
    out: list[bytes] = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        frame = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
        out.append(frame.encode())
    return out
