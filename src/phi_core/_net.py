"""Listening sockets for phi's servers (``phi serve``, ``phi view``, ``phi mcp serve --http``)."""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from .errors import UserError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "LOOPBACK_HOSTS",
    "BodyLimit",
    "HostCheck",
    "allowed_hosts",
    "is_loopback",
    "listening_socket",
]

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body phi's HTTP servers read by default (``gateway.max_body_bytes``)."""

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""The ``Host`` names a server bound to loopback answers to."""


def listening_socket(host: str, port: int, *, backlog: int = 2048) -> socket.socket:
    """A non-blocking TCP socket listening on ``host:port`` (a clear error when it is taken);
    it can be handed to worker processes (inheritable)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections accepted from a socket
    # whose proto says TCP; without it every streamed reply stalls ~40 ms (Nagle + delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            fix = "pass another --host (127.0.0.1 for this machine only, 0.0.0.0 for every address)"
        else:
            fix = "pass another --port (0 picks a free one)"
        raise UserError(f"Cannot listen on {host}:{port} ({exc.strerror}); {fix}.") from None
    sock.listen(backlog)
    sock.setblocking(False)
    sock.set_inheritable(True)
    return sock


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address to listen on) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str) -> tuple[str, ...] | None:
    """The ``Host`` names a server listening on ``host`` answers: the loopback names when it is
    bound to loopback; any (``None``) when it is served to the network on purpose."""
    return LOOPBACK_HOSTS if is_loopback(host) else None


class HostCheck:
    """ASGI middleware answering 400 to a request whose ``Host`` is not one of ``hosts``.

    A server on 127.0.0.1 is still reachable from every web page the user opens: a page whose
    domain is re-pointed at 127.0.0.1 (DNS rebinding) sends its own domain as ``Host``, so
    refusing foreign names keeps such pages from reading (or, keyless, spending through) it.
    ``body(message)`` is the JSON answered, in the server's own error shape.
    """

    def __init__(self, app: Any, hosts: Sequence[str], body: Callable[[str], Any]) -> None:
        self.app = app
        self.hosts = {h.strip("[]").lower() for h in hosts}
        self.body = body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            host = (urlsplit("//" + raw).hostname or "") if raw else ""
            if host not in self.hosts:
                from starlette.responses import JSONResponse

                message = (
                    f"This server answers requests for {', '.join(sorted(self.hosts))} only, "
                    f"not {raw!r}; use the address it printed when it started."
                )
                response = JSONResponse(self.body(message), status_code=400)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware answering 413 to a request whose body is larger than ``max_bytes``.

    A ``Content-Length`` past the limit is refused before anything is read; a body sent without
    one (chunked) is counted as it arrives, and past the limit the app reads no more of it (it
    sees the client go away) and its answer is replaced by the 413. ``body(message)`` is the JSON
    answered, in the server's own error shape.
    """

    def __init__(self, app: Any, max_bytes: int, body: Callable[[str], Any]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.body = body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"").decode("latin-1").strip()
        if length and (not length.isdigit() or int(length) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return
        received = 0
        over = started = answered = False

        async def counted() -> Any:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def replaced(message: Any) -> None:
            nonlocal started, answered
            if not over or started:  # an answer begun before the limit passed goes on as it is
                started = started or message["type"] == "http.response.start"
                await send(message)
            elif not answered:  # the app's own answer to a body it could not finish reading
                answered = True
                await self._refuse(scope, receive, send)

        try:
            await self.app(scope, counted, replaced)
        except Exception:
            if not over:
                raise
            # the app failed on the body it could not finish (starlette's ClientDisconnect)
        if over and not started and not answered:
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.responses import JSONResponse

        message = (
            f"The request body is larger than this server accepts ({self.max_bytes:,} bytes); "
            "send less, or raise `gateway.max_body_bytes` in its config."
        )
        await JSONResponse(self.body(message), status_code=413)(scope, receive, send)
