"""An experiment for ``gateway_load.py --phi-pythonpath benchmarks/gateway_nodelay``, not a fix.

asyncio sets ``TCP_NODELAY`` only on connections accepted from a socket whose ``proto`` is
``IPPROTO_TCP``; uvicorn's multi-worker mode listens on a socket made with proto 0, so every
streamed reply of ``phi serve --workers 2`` waits ~40 ms (Nagle + the client's delayed ACK).
Loaded into the gateway's processes (Python imports ``sitecustomize`` at start-up), this drops
the proto check, to measure what the gateway gives once it sets ``TCP_NODELAY`` itself.
"""

import asyncio.base_events
import asyncio.selector_events
import socket


def _set_nodelay(sock: socket.socket) -> None:
    if sock.family in {socket.AF_INET, socket.AF_INET6} and sock.type == socket.SOCK_STREAM:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


asyncio.base_events._set_nodelay = _set_nodelay  # type: ignore[attr-defined]
asyncio.selector_events._set_nodelay = _set_nodelay  # type: ignore[attr-defined]
