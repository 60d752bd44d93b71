"""Listening sockets for phi's servers (``phi serve``, ``phi view``, ``phi mcp serve --http``)."""

from __future__ import annotations

import errno
import ipaddress
import socket

from .errors import UserError

__all__ = ["is_loopback", "listening_socket"]


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
