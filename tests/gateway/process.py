"""A live ``phi serve`` process on 127.0.0.1 for the tests that use real command-line clients."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

__all__ = ["PHI", "free_port", "phi_serve"]

PHI = str(Path(sys.executable).with_name("phi"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def phi_serve(
    config: Path, *args: str, env: dict[str, str] | None = None, ready_timeout: float = 60.0
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """Start ``phi serve --config CONFIG`` on a free port; yields (url, process) once
    ``/readyz`` answers; stops it with SIGTERM (graceful) on exit."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        PHI, "serve", "--config", str(config), "--port", str(port), *args,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        async with httpx.AsyncClient() as client:
            while True:
                if process.returncode is not None:
                    err = await process.stderr.read() if process.stderr else b""
                    raise RuntimeError(f"phi serve exited: {err.decode(errors='replace')}")
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{url}/readyz")).status_code == 200:
                        break
                assert time.monotonic() < deadline, "phi serve did not become ready"
                await asyncio.sleep(0.1)
        yield url, process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.communicate(), timeout=30)
            except TimeoutError:
                process.kill()
                await process.communicate()
